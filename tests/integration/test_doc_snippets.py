"""Every snippet of README.md and docs/*.md marked ``run ID`` runs here as written, against
the suite's broker (the marks: tests/support/doc_snippets.py).

Each is a reader of the sample topic ``orders``. It runs as a user runs it, a python file
or a bash script in a directory of its own, sluicegate on PATH, Kafka in
``KAFKA_BOOTSTRAP_SERVERS``, until its output holds every order; then Ctrl-C (SIGINT to its
process group, as a terminal sends it) must end it with exit 0 and every order in the output
exactly once. The one change made to a snippet is the sample name: ``orders`` (the source,
its topic and the topics named after it) gets a prefix of the test's own, so that snippets
and runs do not share a source on the suite's broker.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from doc_snippets import Snippet, snippets_to_run
from kafka_data import OutputReader, audit_ok, create_topic
from processes import Proc

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

ORDERS = 200
PARTITIONS = 4
SAMPLE_NAME = re.compile(r"\borders\b")
"""The snippets' sample name, as a word: ``orders-copy`` holds it, ``orders_fns`` does not."""

Order = dict[str, Any]


def enriched(orders: list[Order]) -> list[Order]:
    """What the docs' ``enrich`` makes of the orders: the free ones dropped, VAT added."""
    return [{**o, "vat": round(o["amount"] * 0.2, 2)} for o in orders if o["amount"] > 0]


def copied(orders: list[Order]) -> list[Order]:
    return orders


@dataclass(frozen=True)
class ReaderRun:
    """How to check a snippet that reads the topic ``orders`` into the topic ``output``."""

    output: str
    expected: Callable[[list[Order]], list[Order]]
    functions_from: str | None = None
    """The run ID of the snippet whose functions the prose says are in ``orders_fns.py``."""


CASES = {
    "readme-reader": ReaderRun("orders-enriched", enriched),
    "readme-reader-cli": ReaderRun("orders-copy", copied),
    "readers-reader": ReaderRun("orders-enriched", enriched),
    "readers-reader-cli": ReaderRun("orders-enriched", enriched, functions_from="readers-reader"),
}
"""Each ``run ID`` of the docs and what its run must leave in its output."""

SNIPPETS = {s.run_id: s for s in snippets_to_run()}


def test_every_snippet_marked_run_is_a_case_here_and_every_case_is_marked() -> None:
    assert len(SNIPPETS) == len(snippets_to_run()), "two snippets have one run ID"
    assert set(SNIPPETS) == set(CASES)


def functions_of(snippet: Snippet) -> str:
    """A program snippet without its last statement, the ``run_reader`` call: its functions."""
    head, _, _ = snippet.text.rpartition("\nraise SystemExit(")
    assert head, f"{snippet.where} does not end in raise SystemExit(sluicegate.run_reader(...))"
    return head + "\n"


def produce_orders(bootstrap: str, topic: str) -> list[Order]:
    create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    orders = [{"id": n, "amount": (n % 11) - 2} for n in range(ORDERS)]
    for order in orders:
        producer.produce(
            topic, key=f"c{order['id'] % 7}", value=orjson.dumps(order), partition=order["id"] % PARTITIONS
        )
    assert producer.flush(30) == 0
    return orders


@pytest.fixture
def stopped_at_the_end() -> Iterator[list[Proc]]:
    """The snippets' processes, killed with all they started if a test leaves one running."""
    started: list[Proc] = []
    yield started
    for proc in started:
        if proc.returncode is None:
            proc.kill_group()


def start(snippet: Snippet, text: str, workdir: Path) -> Proc:
    """Run ``text`` (the snippet, renamed) as its reader would: a file in ``workdir``, run
    there, sluicegate's commands on PATH, in a session of its own (a terminal's job)."""
    if snippet.language == "python":
        program = workdir / f"{snippet.run_id}.py"
        command = [sys.executable, str(program)]
    else:
        program = workdir / f"{snippet.run_id}.sh"
        command = ["bash", "-e", str(program)]
    program.write_text(text, encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
    log = workdir / f"{snippet.run_id}.log"
    with log.open("wb") as handle:
        popen = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Proc(str(snippet.run_id), popen, log, command)


def by_id(orders: list[Order]) -> list[Order]:
    return sorted(orders, key=lambda o: int(o["id"]))


@pytest.mark.parametrize("run_id", sorted(CASES))
def test_the_snippet_runs_as_written(
    run_id: str, kafka_bootstrap: str, unique_source: str, tmp_path: Path, stopped_at_the_end: list[Proc]
) -> None:
    snippet, case = SNIPPETS[run_id], CASES[run_id]
    assert snippet.needs, f"{snippet.where} does not say what it needs"
    assert "9092" not in snippet.text, f"{snippet.where}: the broker comes from KAFKA_BOOTSTRAP_SERVERS"

    def renamed(text: str) -> str:
        return SAMPLE_NAME.sub(f"{unique_source}-orders", text)

    orders = produce_orders(kafka_bootstrap, renamed("orders"))
    output = renamed(case.output)
    create_topic(kafka_bootstrap, output, PARTITIONS)
    if case.functions_from is not None:
        (tmp_path / "orders_fns.py").write_text(functions_of(SNIPPETS[case.functions_from]), encoding="utf-8")
    expected = by_id(case.expected(orders))

    proc = start(snippet, renamed(snippet.text), tmp_path)
    stopped_at_the_end.append(proc)
    written = OutputReader(kafka_bootstrap, output)
    try:
        written.wait_for(len(expected), timeout_s=90, procs=[proc], what=f"from {snippet.where}")
        os.killpg(proc.popen.pid, signal.SIGINT)  # Ctrl-C in the snippet's terminal
        assert proc.wait(60) == 0, proc.tail()
        assert by_id(written.read_all()) == expected
    finally:
        written.close()
    audit_ok(kafka_bootstrap, renamed("orders"))
