"""The ``files`` connector without Kafka: options, the pure planning and bookkeeping,
the enumerator on the coordinator core (pull assignment, discovery, restart), the
standalone reader and the row ranges on real files in a temporary directory."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from core_harness import CoreHarness, body
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.api import InputStatus, Record, SourceReaderContext
from sluicegate.api.errors import ConfigError
from sluicegate.coordinator.core import AsyncCall, Effects
from sluicegate.protocol.messages import AddSplits, NoMoreSplits
from sluicegate_connectors.files import FileOptions, FileSource, FileSplit
from sluicegate_connectors.files.badfiles import BadFileError, change_of
from sluicegate_connectors.files.enumerator import RETRY_MS
from sluicegate_connectors.files.options import ORDERS
from sluicegate_connectors.files.planning import RowGroup, group_ranges, plan_file
from sluicegate_connectors.files.processed import ProcessedFiles
from sluicegate_connectors.files.schema import SchemaMismatch, conform, parse_ddl
from sluicegate_connectors.files.split import FileEntry, FileSplitCodec

SCHEMA = "id BIGINT, name STRING, ts TIMESTAMP"

# -- options and schema -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({}, "path"),
        ({"path": "/tmp", "colour": "red"}, "colour"),
        ({"path": "/tmp", "format": "xml"}, "format"),
        ({"path": "/tmp", "on_bad_file": "ignore"}, "on_bad_file"),
        ({"path": "/tmp", "discovery_interval_ms": "-1"}, "discovery_interval_ms"),
        ({"path": "/tmp", "split_size_bytes": "-1"}, "split_size_bytes"),
        ({"path": "/tmp", "schema": "id BIGINT, name STRNG"}, "schema"),
        ({"path": "/tmp", "schema": "id BIGINT, id STRING"}, "schema"),
        ({"path": "/tmp", "schema": SCHEMA, "event_time_column": "when"}, "event_time_column"),
        ({"path": "/tmp", "assigner": "lottery"}, "assigner"),
        ({"path": "nosuchprotocol://bucket/x"}, "path"),
    ],
)
def test_a_bad_option_fails_naming_it(options: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as error:
        FileOptions.parse(options)
    assert error.value.setting == setting


def test_storage_options_reach_fsspec_and_never_show() -> None:
    options = FileOptions.parse(
        {"path": "memory://data", "storage.skip_instance_cache": "true", "storage.a.b": "s3cr3t"}
    )
    assert options.storage_kwargs() == {"skip_instance_cache": True, "a": {"b": "s3cr3t"}}
    assert "s3cr3t" not in repr(options)


def test_ddl_types_and_conforming_a_file_to_them() -> None:
    schema = parse_ddl("a INT, b decimal(10, 2), `c` TIMESTAMP, d string")
    assert schema.names == ["a", "b", "c", "d"]
    assert schema.field("b").type == pa.decimal128(10, 2)
    table = pa.table({"d": ["x"], "a": [1], "extra": [True], "b": [1.5], "c": pa.array([0], pa.timestamp("ms"))})
    assert conform(table, schema).schema == schema
    with pytest.raises(SchemaMismatch, match="'d'"):
        conform(pa.table({"a": [1], "b": [1.0], "c": [0]}), schema)
    with pytest.raises(SchemaMismatch, match="'a'"):
        conform(pa.table({"a": ["one"], "b": [1.0], "c": [0], "d": ["x"]}), schema)


# -- planning and bookkeeping (pure) ------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 500), max_size=40), st.integers(1, 1500))
def test_row_group_ranges_cover_every_group_once_in_order(sizes: list[int], split_size: int) -> None:
    ranges = group_ranges([RowGroup(10, b) for b in sizes], split_size)
    flat = [g for first, end in ranges for g in range(first, end)]
    assert flat == list(range(len(sizes)))
    for first, end in ranges[:-1]:
        assert sum(sizes[first:end]) >= split_size, "only the last range may be small"
        assert sum(sizes[first : end - 1]) < split_size, "a range closes once it is large enough"


def test_a_large_parquet_file_becomes_row_group_splits_a_small_one_one_split() -> None:
    groups = [RowGroup(100, 40), RowGroup(100, 40), RowGroup(50, 30)]
    big = plan_file(FileEntry("d/a.parquet", 110, 1), "parquet", groups, 80)
    assert [(s.first_group, s.end_group, s.rows) for s in big] == [(0, 2, 200), (2, 3, 50)]
    assert len({s.split_id for s in big}) == 2
    small = plan_file(FileEntry("d/a.parquet", 110, 1), "parquet", groups, 1000)
    assert [(s.split_id, s.end_group, s.rows) for s in small] == [("d/a.parquet", None, 250)]
    csv = plan_file(FileEntry("d/b.csv", 10, 1), "csv", None, 1)
    assert [(s.split_id, s.rows) for s in csv] == [("d/b.csv", None)]
    codec = FileSplitCodec()
    for split in [*big, *csv]:
        split.position = 7
        assert codec.from_wire(codec.to_wire(split)) == split


listings = st.lists(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3), st.integers(0, 10_000)), max_size=8),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(listings, st.sampled_from([0, 3_000]))
def test_a_file_is_taken_once_and_the_memory_is_bounded(rounds: list[list[tuple[str, int, int]]], age: int) -> None:
    processed = ProcessedFiles()
    taken: Counter[tuple[str, int]] = Counter()
    taken_mtime: dict[tuple[str, int], int] = {}
    horizons: list[int] = []
    for step, listing in enumerate(rounds):
        now = 1_000 * (step + 1) + 10_000
        entries = {name: FileEntry(name, size, mtime) for name, size, mtime in listing}
        processed.advance(now, age)
        outcome = processed.consider(entries.values())
        processed.take(outcome.new)
        processed.forget_missing(entries)
        horizons.append(processed.horizon_ms)
        for entry in outcome.new:
            taken[(entry.path, step)] += 1
            taken_mtime[(entry.path, step)] = entry.mtime_ms
            assert age == 0 or entry.mtime_ms >= now - age
        assert set(processed.entries) <= set("abcdefgh")
        if age:
            assert all(mtime >= processed.horizon_ms for _, mtime in processed.entries.values())
        again = ProcessedFiles.from_json(processed.to_json())
        assert again.consider(entries.values()).new == (), "a restored memory takes nothing twice"
    # a file is taken again only after two listings without it, or once its first take
    # fell behind the horizon (forgotten) and it was rewritten since: both are new files
    for path in {p for p, _ in taken}:
        steps = sorted(s for p, s in taken if p == path)
        for earlier, later in itertools.pairwise(steps):
            absent = [s for s in range(earlier + 1, later) if path not in {n for n, _, _ in rounds[s]}]
            aged_out = taken_mtime[(path, earlier)] < horizons[later]
            rewritten = taken_mtime[(path, later)] != taken_mtime[(path, earlier)]
            assert len(absent) >= 2 or (aged_out and rewritten), (path, steps)


def test_changes_after_listing_are_named() -> None:
    split = FileSplit("d/a.csv", 100, 5, "csv")
    assert change_of(split, FileEntry("d/a.csv", 100, 5)) is None
    assert "grew" in (change_of(split, FileEntry("d/a.csv", 120, 6)) or "")
    assert "modified" in (change_of(split, FileEntry("d/a.csv", 100, 9)) or "")
    assert "gone" in (change_of(split, None) or "")


# -- files on disk ------------------------------------------------------------------------


def rows(first: int, n: int) -> pa.Table:
    ids = list(range(first, first + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "ts": pa.array([1_700_000_000_000 + i for i in ids], pa.timestamp("ms", tz="UTC")),
        }
    )


def write(path: Path, table: pa.Table, row_group_size: int | None = None) -> None:
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=row_group_size)
    elif path.suffix == ".csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)
    else:
        import orjson

        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in table.to_pylist()))


def source(directory: Path, **options: str) -> FileSource:
    opts = {"path": str(directory), "schema": SCHEMA, "event_time_column": "ts", **options}
    return FileSource.from_options(opts)


class Context(SourceReaderContext):
    def __init__(self) -> None:
        super().__init__(0, 1, "here")
        object.__setattr__(self, "letters", [])
        object.__setattr__(self, "events", [])

    def send_source_event(self, event: Any) -> None:
        self.events.append(event)  # type: ignore[attr-defined]

    def dead_letter(self, kind: str, origin: str, position: int, reason: str) -> None:
        self.letters.append((kind, origin, position, reason))  # type: ignore[attr-defined]


def read_all(src: FileSource, splits: list[FileSplit], context: Context | None = None) -> list[Record]:
    reader = src.create_reader(context or Context())
    reader.add_splits(splits)
    out: list[Record] = []
    while True:
        result = reader.next_batch(1_000)
        out += result.records
        if result.status is InputStatus.NOTHING_AVAILABLE:
            return out


def splits_of(src: FileSource) -> list[FileSplit]:
    store = src.store()
    out: list[FileSplit] = []
    for entry in store.list_files():
        fmt = src.options.format_of(entry.path) or ""
        groups = store.row_groups(entry.path) if fmt == "parquet" else None
        out += plan_file(entry, fmt, groups, src.options.split_size_bytes)
    return out


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_the_reader_reads_each_format_with_event_times_and_resumes_at_a_position(tmp_path: Path, suffix: str) -> None:
    write(tmp_path / f"a{suffix}", rows(0, 2_500))
    src = source(tmp_path)
    (split,) = splits_of(src)
    records = read_all(src, [split])
    assert [r.value["id"] for r in records] == list(range(2_500))
    assert records[7].event_time_ms == 1_700_000_000_007
    assert records[7].value["name"] == "n7"
    reader = src.create_reader(Context())
    reader.add_splits([split])
    first = reader.next_batch(1_234)
    (state,) = reader.snapshot_state(1)
    assert state.position == 1_234 and len(first.records) == 1_234
    rest = read_all(src, [state])
    assert [r.value["id"] for r in rest] == list(range(1_234, 2_500))


def test_row_group_splits_read_their_own_rows_and_ranges_read_arrow(tmp_path: Path) -> None:
    write(tmp_path / "big.parquet", rows(0, 10_000), row_group_size=1_000)
    src = source(tmp_path, split_size_bytes="20000")
    splits = splits_of(src)
    assert len(splits) > 1
    ids = [r.value["id"] for r in read_all(src, splits)]
    assert ids == list(range(10_000))
    second = splits[1]
    assert second.rows is not None
    batches = list(src.read_arrow(second, 10, second.rows - 5, 700))
    table = pa.Table.from_batches(batches)
    first_id = sum(s.rows or 0 for s in splits[:1])
    assert table.column("id").to_pylist() == list(range(first_id + 10, first_id + second.rows - 5))
    assert max(b.num_rows for b in batches) <= 700
    assert table.schema == src.arrow_schema()


def test_split_size_zero_makes_every_file_one_split(tmp_path: Path) -> None:
    write(tmp_path / "big.parquet", rows(0, 10_000), row_group_size=1_000)
    (whole,) = splits_of(source(tmp_path, split_size_bytes="0"))
    assert whole.end_group is None and whole.rows == 10_000, "what readPath=jvm plans: Spark cuts it into tasks"


def test_csv_ends_are_counted_by_the_planning_host(tmp_path: Path) -> None:
    write(tmp_path / "a.csv", rows(0, 300))
    src = source(tmp_path)
    (split,) = splits_of(src)
    assert src.split_end(split) is None
    src.prepare_planning([split])
    assert src.split_end(split) == 300 and src.available_end(split.copy(100), 0) == 300
    assert pa.Table.from_batches(list(src.read_arrow(split, 290, 300, 100))).num_rows == 10


def test_the_schema_is_inferred_from_the_first_file(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", rows(0, 3))
    src = FileSource.from_options({"path": str(tmp_path)})
    assert src.arrow_schema().names == ["id", "name", "ts"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="schema"):
        FileSource.from_options({"path": str(tmp_path / "empty")}).arrow_schema()


def bad_files(directory: Path) -> None:
    write(directory / "a.parquet", rows(0, 100))
    (directory / "b.parquet").write_bytes(b"PAR1 this is not parquet")
    write(directory / "c.parquet", pa.table({"other": [1, 2]}))
    write(directory / "d.parquet", rows(100, 100))


def test_bad_files_are_skipped_counted_and_dead_lettered(tmp_path: Path) -> None:
    bad_files(tmp_path)
    src = source(tmp_path, on_bad_file="skip")
    context = Context()
    records = read_all(src, splits_of_tolerant(src), context)
    assert sorted(r.value["id"] for r in records) == list(range(200))
    letters = context.letters  # type: ignore[attr-defined]
    assert [(kind, Path(origin).name) for kind, origin, _, _ in letters] == [
        ("bad-file", "b.parquet"),
        ("bad-file", "c.parquet"),
    ]
    assert "'id' is missing" in letters[1][3]
    assert [e["type"] for e in context.events] == ["bad_file", "bad_file"]  # type: ignore[attr-defined]


def test_a_bad_file_fails_the_reader_naming_it(tmp_path: Path) -> None:
    bad_files(tmp_path)
    src = source(tmp_path)
    with pytest.raises(BadFileError, match=r"b\.parquet"):
        read_all(src, splits_of_tolerant(src))


def test_a_file_that_grows_after_listing_is_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    write(path, rows(0, 10))
    src = source(tmp_path, on_bad_file="skip")
    (split,) = splits_of(src)
    with path.open("ab") as handle:
        handle.write(b'{"id": 10, "name": "n10", "ts": 1}\n')
    context = Context()
    assert read_all(src, [split], context) == []
    assert "grew" in context.letters[0][3]  # type: ignore[attr-defined]
    src.prepare_planning([split])
    assert src.split_end(split) == 0, "skipped in planning too: the split ends where it is"
    (skipped,) = src.take_skipped_input()
    assert (skipped.kind, skipped.origin, skipped.position) == ("bad-file", str(tmp_path / "a.jsonl"), 0)
    assert "grew" in skipped.reason and src.take_skipped_input() == []


def splits_of_tolerant(src: FileSource) -> list[FileSplit]:
    """Splits as the enumerator plans them: a footer that does not read gives a whole-file split."""
    out: list[FileSplit] = []
    store = src.store()
    for entry in store.list_files():
        try:
            groups: list[RowGroup] | None = store.row_groups(entry.path)
        except Exception:
            groups = None
        out += plan_file(entry, "parquet", groups, src.options.split_size_bytes)
    return out


# -- the enumerator on the coordinator core -------------------------------------------------


class FileHarness(CoreHarness):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.discoveries: list[AsyncCall] = []
        super().__init__(*args, **kwargs)

    def _collect(self, effects: Effects) -> Effects:
        self.discoveries += [c for c in effects.async_calls if "_discover" in getattr(c.fn, "__qualname__", "")]
        return super()._collect(effects)

    def discover(self) -> None:
        assert len(self.discoveries) == 1, self.discoveries
        call = self.discoveries.pop()
        try:
            result, error = call.fn(), None
        except Exception as exc:
            result, error = None, exc
        self._collect(self.core.on_async_result(call.call_id, result, error, self.now_ms))


def assigned(h: CoreHarness) -> dict[str, int]:
    return {s["split_id"]: e.subtask for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits}


def test_pull_assignment_bounded_end_and_no_push_on_registration(tmp_path: Path) -> None:
    for i in range(6):
        write(tmp_path / f"f{i}.parquet", rows(i * 10, 10))
    h = FileHarness(source(tmp_path), max_parallelism=2, start=False)
    h.start()
    h.register(0)
    h.register(1)
    h.discover()
    assert assigned(h) == {}, "pull: nothing goes out before a reader asks"
    h.request_split(0)
    first = assigned(h)
    assert set(first.values()) == {0} and len(first) == 3, "the requester gets its fair share"
    h.request_split(1)
    assert Counter(assigned(h).values()) == Counter({0: 3, 1: 3})
    assert h.discoveries == [], "bounded: listed once"
    for s in (0, 1):
        h.ack(s)
        h.finish(s)
        h.request_split(s)
    assert {e.subtask for e in h.of_type(NoMoreSplits)} == {0, 1}


def test_new_files_are_discovered_and_a_restart_never_retakes_a_file(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", rows(0, 10))
    h = FileHarness(source(tmp_path, discovery_interval_ms="1000"), max_parallelism=1, start=False)
    h.start()
    h.register(0)
    h.discover()
    h.request_split(0)
    assert list(assigned(h)) == [str(tmp_path / "a.parquet")]
    write(tmp_path / "b.csv", rows(10, 10))
    (tmp_path / ".c.parquet").write_bytes(b"hidden: in progress")
    h.discover()
    h.ack(0)
    h.finish(0)
    h.request_split(0)
    assert sorted(Path(p).name for p in assigned(h)) == ["a.parquet", "b.csv"]
    h.ack(0)
    h.finish(0)
    h.discoveries.clear()
    h.restart_coordinator()
    h.discover()
    h.request_split(0)
    counts = Counter(s["split_id"] for e in h.of_type(AddSplits) for s in body(e, AddSplits).splits)
    assert set(counts.values()) == {1}, "nothing taken twice across the restart"
    assert h.counters.get("discovery_failures", 0) == 0


def test_a_failed_listing_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "a.parquet", rows(0, 10))
    src = source(tmp_path, discovery_interval_ms="1000")
    h = FileHarness(src, max_parallelism=1, start=False)
    h.start()
    h.register(0)
    listing = src.store().list_files

    def broken() -> list[FileEntry]:
        raise OSError("the store is down")

    monkeypatch.setattr(src.store(), "list_files", broken)
    h.discover()
    assert h.counters["discovery_failures"] == 1
    assert h.discoveries[0].initial_delay_ms == RETRY_MS
    monkeypatch.setattr(src.store(), "list_files", listing)
    h.discover()
    h.request_split(0)
    assert list(assigned(h)) == [str(tmp_path / "a.parquet")]


def test_a_path_that_does_not_exist_is_named_once_and_read_once_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    incoming = tmp_path / "incoming"
    h = FileHarness(source(incoming, discovery_interval_ms="1000"), max_parallelism=1, start=False)
    h.start()
    h.register(0)
    with caplog.at_level("INFO", logger="sluicegate.connectors.files"):
        h.discover()
        h.discover()
        missing = [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()]
        assert len(missing) == 1, "once per change, not every listing"
        assert missing[0].startswith(f"path {incoming} does not exist: nothing to read until it does")
        assert "path option" in missing[0]
        incoming.mkdir()
        write(incoming / "a.parquet", rows(0, 10))
        h.discover()
        assert any(r.getMessage() == f"path {incoming} exists now" for r in caplog.records)
    h.request_split(0)
    assert list(assigned(h)) == [str(incoming / "a.parquet")]
    assert h.counters.get("discovery_failures", 0) == 0


def test_an_empty_directory_is_not_a_missing_path(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = FileHarness(source(tmp_path, discovery_interval_ms="1000"), max_parallelism=1, start=False)
    h.start()
    h.register(0)
    with caplog.at_level("INFO", logger="sluicegate.connectors.files"):
        h.discover()
    assert not [r for r in caplog.records if "does not exist" in r.getMessage()]


def test_a_corrupt_first_file_is_a_bad_file_under_the_policy_not_a_bad_schema_setting(tmp_path: Path) -> None:
    from sluicegate_connectors.files.badfiles import BadFileError

    (tmp_path / "a.parquet").write_bytes(b"PAR1 this is not parquet")
    write(tmp_path / "b.parquet", rows(0, 3))
    with pytest.raises(BadFileError) as failed:
        FileSource.from_options({"path": str(tmp_path)}).arrow_schema()
    said = str(failed.value)
    assert "bad file" in said and "a.parquet" in said and "on_bad_file=skip" in said, said
    assert "invalid setting" not in said
    skipping = FileSource.from_options({"path": str(tmp_path), "on_bad_file": "skip"})
    assert skipping.arrow_schema().names == ["id", "name", "ts"]  # from b.parquet
    (tmp_path / "b.parquet").write_bytes(b"not parquet either")
    with pytest.raises(ConfigError, match="no readable file"):
        FileSource.from_options({"path": str(tmp_path), "on_bad_file": "skip"}).arrow_schema()


def test_a_path_that_does_not_exist_fails_the_first_start_unless_told_to_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluicegate.api.errors import SourceError
    from sluicegate_connectors.files import source as files_source

    monkeypatch.setattr(files_source, "CHECK_INTERVAL_S", 0.01)
    typo = tmp_path / "inbxo"
    with pytest.raises(SourceError) as failed:
        FileSource.from_options({"path": str(typo)}).check_inputs(wait_s=0.05)
    said = str(failed.value)
    assert f"path {typo} (`path`) does not exist" in said and "`missing_path=wait`" in said, said
    FileSource.from_options({"path": str(typo), "missing_path": "wait"}).check_inputs(wait_s=0.05)
    typo.mkdir()  # an empty directory is fine: files may come
    FileSource.from_options({"path": str(typo)}).check_inputs(wait_s=0.05)
    with pytest.raises(ConfigError, match="missing_path"):
        FileSource.from_options({"path": str(typo), "missing_path": "later"})


def test_csv_without_a_header_reads_every_row_as_data_in_the_schemas_columns(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1;x;NA\n2;'y;z';7\n")
    src = FileSource.from_options(
        {
            "path": str(tmp_path),
            "schema": "id BIGINT, name STRING, n INT",
            "csv_header": "false",
            "csv_delimiter": ";",
            "csv_quote": "'",
            "csv_null_value": "NA",
        }
    )
    (split,) = src.batch_splits()
    table = pa.Table.from_batches(list(src.read_arrow(split, 0, src.split_end(split) or 0, 100)))
    assert table.to_pylist() == [{"id": 1, "name": "x", "n": None}, {"id": 2, "name": "y;z", "n": 7}]
    inferred = FileSource.from_options(
        {"path": str(tmp_path), "csv_header": "false", "csv_delimiter": ";", "csv_quote": "'"}
    )
    assert inferred.arrow_schema().names == ["_c0", "_c1", "_c2"], "Spark's names for columns without a header"


@pytest.mark.parametrize(
    ("options", "setting"),
    [({"csv_header": "yes"}, "csv_header"), ({"csv_delimiter": ";;"}, "csv_delimiter"), ({"order": "newest"}, "order")],
)
def test_a_bad_csv_or_order_option_fails_naming_it(tmp_path: Path, options: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileSource.from_options({"path": str(tmp_path), **options})
    assert info.value.setting == setting


def test_a_batch_read_takes_the_files_there_now_in_the_order_asked_for(tmp_path: Path) -> None:
    import os

    for i, name in enumerate(["b.parquet", "a.parquet", "c.parquet"]):
        write(tmp_path / name, rows(i * 10, 10))
        os.utime(tmp_path / name, (1_700_000_000 + i, 1_700_000_000 + i))
    by = {order: [s.path.rsplit("/", 1)[-1] for s in source(tmp_path, order=order).batch_splits()] for order in ORDERS}
    assert by == {
        "path": ["a.parquet", "b.parquet", "c.parquet"],
        "modified": ["b.parquet", "a.parquet", "c.parquet"],
        "latest_first": ["c.parquet", "a.parquet", "b.parquet"],
    }
    src = source(tmp_path)
    assert [src.split_end(s) for s in src.batch_splits()] == [10, 10, 10]


def test_a_schema_inferred_from_a_path_that_does_not_exist_names_the_path_not_the_schema(tmp_path: Path) -> None:
    """A batch read of a typo'd path blamed the schema (issue 51 item 3)."""
    from sluicegate.api.errors import ConfigError, SourceError

    typo = tmp_path / "inbxo"
    with pytest.raises(SourceError, match=rf"path {typo} \(`path`\) does not exist: check it"):
        FileSource.from_options({"path": str(typo)}).schema()
    typo.mkdir()
    with pytest.raises(ConfigError, match=r"no file under .* to infer it from"):
        FileSource.from_options({"path": str(typo)}).schema()
