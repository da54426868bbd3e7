"""Readers that coordinate their source themselves (issue 19 item 4, coordinator/embedded.py),
over real Kafka and real processes.

Three standalone readers of a rate-limited unbounded source start with ``--coordinator
auto`` and nothing else: no coordinator deployed, no topics created. One of them sets the
source up and serves it. Then a deployed coordinator (``sluicegate coordinator``) starts
and takes the source over, fencing the reader's; then it is SIGKILLed, and a reader takes
the source back once the state topic has stood still for the silence, and the readers read
on under it until they are stopped. The readers never register again, every value up to
where they left off is read exactly once, and the audit of the control topics (three
epochs and more, one per handover) is clean. The source is unbounded so that no machine
is fast or slow enough to end it before the handovers: a deployed coordinator took 25 s
to start on a loaded one. Apart, a reader that brings another
definition of the source is refused at start, naming the option. And a reader's
coordinator never takes the source from deployed workers that are alive (issue 49): a
worker paused for less than its group's session timeout, as a commit held up by a broker
failover leaves it, keeps its source; one that died loses it to the reader. And a host
whose source's last coordinator ran in a process of this machine that is gone (SIGKILLed)
takes the source over at once, not after a silence.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from local_http import wait_until
from processes import Proc, ProcessGroup, completed_checkpoints
from sequence_output import check_sequence_exactly_once, final_positions, values_by_split
from test_takeover import audit, audit_failure, serving_epochs

from sluicegate.coordinator.embedded import CoordinatorMode, EmbeddedCoordinator

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 3
SPLITS = 30
# unbounded splits released one per second, read at 40 records/s a reader: the coordinator
# of the moment assigns while readers read
OPTIONS = {
    "splits": str(SPLITS),
    "records_per_split": "unbounded",
    "rate": "40",
    "release_interval_ms": "1000",
    "splits_per_release": "1",
}
SERVES_NOW = "this process coordinates it now"
STANDS_BY = "another coordinator serves it now; this process stands by"


def registrations(reader: Proc) -> list[int]:
    """The attempts the reader registered as (its own lines, not its coordinator's)."""
    return [int(m) for m in re.findall(r"sluicegate\.reader: registered as attempt (\d+)", reader.log())]


def serving(reader: Proc, source: str) -> bool:
    """Whether ``reader``'s own coordinator serves ``source`` now, by the last word of its log
    (readers that start together may each serve at once: the last to start fences the others)."""
    last = None
    for line in reader.log().splitlines():
        if f"source {source}:" in line and (SERVES_NOW in line or STANDS_BY in line):
            last = line
    return last is not None and SERVES_NOW in last


def test_readers_serve_their_source_until_a_deployed_coordinator_takes_over_and_after_it_dies(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    outputs = [tmp_path / f"reader-{k}.jsonl" for k in range(READERS)]
    auto = ("--coordinator", "auto", "--max-parallelism", str(READERS), "--checkpoint-interval-ms", "500")
    try:
        readers = [group.reader(source, k, OPTIONS, outputs[k], *auto) for k in range(READERS)]
        for reader in readers:
            reader.wait_for_log("sluicegate.reader: registered as attempt 1", timeout_s=60)
        wait_until(lambda: serving_one(readers, source), 30, "one reader to serve the source")
        for reader in readers:
            reader.wait_for_log("checkpoint 2:", timeout_s=60)

        deployed = group.coordinator(source, READERS, OPTIONS)  # waits until it serves
        epoch = serving_epochs(deployed, source)
        assert epoch and epoch[0] >= 2, deployed.tail()
        wait_until(lambda: not any(serving(r, source) for r in readers), 30, "the readers' coordinator to stand by")

        assert all(r.returncode is None for r in readers), "set-up: a reader finished before the kill"
        deployed.kill()
        wait_until(
            lambda: any(re.search(rf"source {source}: no coordinator committed for", r.log()) for r in readers),
            30,
            "a reader to take the source back after the silence",
        )
        host = wait_until(lambda: serving_one(readers, source), 30, "one reader to serve the source again")
        for reader in readers:  # they read on under their own coordinator again
            wait_until(checkpoints_after(reader, 2), 30, f"{reader.name} to read on")
        # one that does not serve leaves first: the readers' coordinator answers, at epoch 3 or
        # later, and hands its splits to the others; then the rest stop
        leaver = next(r for r in readers if r is not host)
        leaver.request_stop()
        assert leaver.wait(60) == 0, leaver.tail()
        wait_until(lambda: last_epoch(kafka_bootstrap, source) >= 3, 30, "the readers' coordinator's answer")
        for reader in readers:
            reader.request_stop()
        for k, reader in enumerate(readers):
            assert reader.wait(60) == 0, f"reader {k}:\n{reader.tail()}"
        for k, reader in enumerate(readers):
            assert registrations(reader) == [1], f"reader {k} registered again:\n{reader.tail()}"
    finally:
        group.stop_all()

    rows = [row for path in outputs if path.exists() for row in map(orjson.loads, path.read_bytes().splitlines())]
    final = asyncio.run(final_positions(kafka_bootstrap, source))
    assert rows and final, "nothing read, or nothing handed back"
    check_sequence_exactly_once(values_by_split(rows), final)
    result = audit(kafka_bootstrap, source)
    assert result.ok, audit_failure(result)
    # Readers' coordinators before the deployed one, and after: the readers start together,
    # so a first one may be fenced by another before it sends anything (epochs [2, 3, 4] in
    # CI), and the deployed one may send nothing to the readers before its kill.
    epochs = result.summary.epochs
    assert epochs == sorted(set(epochs)), epochs
    assert epochs[0] < epoch[0] < epochs[-1], f"the readers' {epochs} around the deployed {epoch[0]}"


def serving_one(readers: list[Proc], source: str) -> Proc | None:
    """The one reader whose coordinator serves ``source`` now (None: none, or more than one)."""
    hosts = [r for r in readers if serving(r, source)]
    return hosts[0] if len(hosts) == 1 else None


def checkpoints_after(reader: Proc, more: int) -> Callable[[], bool]:
    """Whether ``reader`` completed ``more`` checkpoints after now."""
    before = completed_checkpoints(reader)
    return lambda: completed_checkpoints(reader) >= before + more


def last_epoch(bootstrap: str, source: str) -> int:
    return max(audit(bootstrap, source).summary.epochs, default=0)


def test_a_reader_that_brings_another_definition_is_refused_at_start(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    auto = ("--coordinator", "auto", "--max-parallelism", "1")
    try:
        first = group.reader(unique_source, 0, OPTIONS, tmp_path / "first.jsonl", *auto)
        first.wait_for_log("sluicegate.reader: registered as attempt 1", timeout_s=60)
        other = group.reader(unique_source, 0, {**OPTIONS, "splits": str(SPLITS + 1)}, tmp_path / "other.jsonl", *auto)
        assert other.wait(60) == 2, other.tail()
    finally:
        group.stop_all()
    assert f"option splits: {SPLITS} (source) vs {SPLITS + 1} (given)" in other.log(), other.tail()


STANDS_BACK = "live worker(s): theirs to take over; this process stands by"


def test_a_readers_coordinator_never_takes_the_source_from_live_deployed_workers(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.coordinator")
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    embedded: EmbeddedCoordinator | None = None
    try:
        deployed = group.coordinator(source, READERS, OPTIONS)  # waits until it serves
        # A reader's coordinator, in this process, watching with a silence of 1 s: shorter
        # than any pause below, so that only the group's liveness can hold it back.
        embedded = EmbeddedCoordinator(
            source, "sequence", OPTIONS, kafka_bootstrap, "sluicegate", CoordinatorMode.AUTO, READERS, silence_ms=1_000
        )
        embedded.start()

        os.kill(deployed.popen.pid, signal.SIGSTOP)  # silent, but a member of its group (6 s session)
        try:
            wait_until(lambda: STANDS_BACK in caplog.text, 4, "the reader's coordinator to stand back")
            assert embedded.runner is None, caplog.text
        finally:
            os.kill(deployed.popen.pid, signal.SIGCONT)
        time.sleep(2.5)  # room for a takeover to show, if there were one
        assert embedded.runner is None, caplog.text
        assert serving_epochs(deployed, source) == [1], deployed.tail()
        assert "stepping down" not in deployed.log(), deployed.tail()

        # Dead, it leaves its group at the session timeout: then the reader takes the source.
        deployed.kill()
        wait_until(lambda: embedded is not None and embedded.active, 40, "the reader's coordinator to serve")
        assert re.search(rf"source {source}: no coordinator committed for", caplog.text), caplog.text
    finally:
        if embedded is not None:
            embedded.close()
        for proc in group.procs:
            if proc.popen.poll() is None:
                os.kill(proc.popen.pid, signal.SIGCONT)
        group.stop_all()
    assert audit(kafka_bootstrap, source).ok


GONE = "its last coordinator's process (pid {pid}, this machine) is gone"


def test_a_host_takes_the_source_over_at_once_when_the_last_coordinators_process_is_gone(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader serving its source is SIGKILLed (as a Spark query's source process is when
    the query stops): a coordinator of this process, with a silence of 60 s, takes the
    source over within seconds because the state names the killed process, whether it
    looked after the kill (the state checked at start) or before it (the process waited for)."""
    caplog.set_level(logging.INFO, logger="sluicegate.coordinator")
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    auto = ("--coordinator", "auto", "--max-parallelism", "1", "--checkpoint-interval-ms", "500")
    embedded: EmbeddedCoordinator | None = None

    def serving_reader(name: str) -> Proc:
        reader = group.reader(source, 0, OPTIONS, tmp_path / f"{name}.jsonl", *auto)
        wait_until(lambda: completed_checkpoints(reader) >= 2, 60, f"{name} to read")
        assert serving(reader, source), reader.tail()
        return reader

    def coordinator_of_this_process() -> EmbeddedCoordinator:
        coordinator = EmbeddedCoordinator(
            source, "sequence", OPTIONS, kafka_bootstrap, "sluicegate", CoordinatorMode.AUTO, 1, silence_ms=60_000
        )
        coordinator.start()
        return coordinator

    try:
        for looks in ("after the kill", "before the kill"):
            reader = serving_reader(f"reader-{looks.split()[0]}")
            if looks == "before the kill":
                embedded = coordinator_of_this_process()
                time.sleep(1.5)
                assert not embedded.active, "the reader's coordinator is alive: it keeps the source"
            reader.kill()
            killed = time.monotonic()
            serves = embedded if embedded is not None else coordinator_of_this_process()
            embedded = serves
            wait_until(functools.partial(getattr, serves, "active"), 30, f"this process to serve ({looks})")
            assert time.monotonic() - killed < 15, "it waited for a silence"
            assert GONE.format(pid=reader.popen.pid) in caplog.text, caplog.text
            embedded.close()  # released: the next reader serves at once
            embedded = None
    finally:
        if embedded is not None:
            embedded.close()
        for proc in group.procs:
            if proc.popen.poll() is None:
                proc.kill()
    result = audit(kafka_bootstrap, source)
    assert result.ok, audit_failure(result)
