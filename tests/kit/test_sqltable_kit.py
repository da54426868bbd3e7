"""The connector test kit on the guide's worked example, ``sqltable`` (docs/examples/):
in memory, and in the real run as ``--connector sqltable:SqlTableSource`` with
docs/examples on the processes' PYTHONPATH."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable
from pathlib import Path

from sluicegate.api import Record
from sluicegate.testing import ConnectorTestKit, KitEnv

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

ROWS = 300


class TestSqlTableKit(ConnectorTestKit):
    connector = "sqltable:SqlTableSource"
    writes_while_running = False  # it reads the table as it is when the enumerator looks

    def source_options(self, env: KitEnv) -> dict[str, str]:
        return {"database": str(env.directory / "shop.db"), "table": "orders", "keys_per_split": "40"}

    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        ids = [k * 3 + 1 for k in range(ROWS)]  # keys with gaps: splits hold fewer rows than keys
        with sqlite3.connect(env.directory / "shop.db") as db:
            db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT, amount REAL)")
            db.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, f"item-{i % 7}", i / 4) for i in ids])
        return list(ids)

    def record_key(self, record: Record) -> Hashable:
        key: int = record.value["id"]
        return key

    def real_run_env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(EXAMPLES)}


def test_the_guide_shows_the_example_code_as_it_is(tmp_path: Path) -> None:
    """Every ```python block of docs/connectors.md headed by a ``# docs/examples/...`` line
    is that file, whole and unchanged: the code the kit runs is the code the guide shows."""
    guide = (EXAMPLES.parent / "connectors.md").read_text()
    shown: dict[str, str] = {}
    for block in guide.split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        first, _, rest = code.partition("\n")
        if first.startswith("# docs/examples/"):
            shown[first.removeprefix("# docs/examples/")] = rest
    files = sorted(str(p.relative_to(EXAMPLES)) for p in (EXAMPLES / "sqltable").glob("*.py"))
    assert sorted(shown) == files, "the guide must show every file of docs/examples/sqltable, once"
    for name, code in shown.items():
        assert code == (EXAMPLES / name).read_text(), f"docs/connectors.md shows a different {name}"


def test_position_ranges_read_what_the_reader_reads(tmp_path: Path) -> None:
    """SupportsPositionRanges (what a Spark query plans with): a split's ranges, read in
    pieces of any size, give its rows once each, in key order, as the reader does."""
    from sqltable import SqlTableSource

    kit = TestSqlTableKit()
    env = KitEnv(tmp_path, "ranges")
    ids = [int(str(i)) for i in kit.write_data(env, 0)]
    source = SqlTableSource.from_options(kit.source_options(env))
    split = source.with_position(
        source.split_codec.from_wire({"split_id": "k", "low": 1, "high": 200, "position": 1}), 1
    )
    assert source.available_end(split, 0) == source.split_end(split) == 200
    pieces = [(1, 50), (50, 51), (51, 200)]
    values = [v for a, b in pieces for chunk in source.read_range(split, a, b, max_rows=7) for v in chunk.values]
    assert values == [repr({"id": i, "item": f"item-{i % 7}", "amount": i / 4}) for i in ids if i < 200]
    assert all(len(chunk) <= 7 for chunk in source.read_range(split, 1, 200, max_rows=7))
