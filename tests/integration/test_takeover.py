"""Coordinator takeover over real Kafka and real processes (PROTOCOL semantics 4).

Two coordinator workers run for the same source with the same arguments: Faust
gives the source's inbox partition to one of them (the active coordinator), the
other is a standby. Readers read a rate-limited bounded source whose splits are
released over time, so the coordinator keeps assigning while they read. The
active worker is SIGKILLed; the standby takes over at the next epoch from the
last commit; the readers neither stop nor register again; every value is read
exactly once and the audit of both control topics is clean.

The helpers at the top are shared with test_multi_source.py and test_chaos.py.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from local_http import coordinator_metrics, free_port, http_get, source_snapshot, wait_until
from processes import Proc, ProcessGroup, support_pythonpath

from sluicegate.audit.commands import run_audit
from sluicegate.audit.invariants import AuditResult
from sluicegate.audit.kafka_source import read_control_topics

ACTIVE_LINE = "is now the active coordinator"
MOVED_LINE = "moved to another worker"


# -- helpers (also used by test_multi_source.py and test_chaos.py; free_port, http_get and
# wait_until are in tests/support/local_http.py) ------------------------------------------


def health(port: int) -> dict[str, Any] | None:
    status, _, body = http_get(port, "/health")
    return orjson.loads(body) if status in (200, 503) else None


def coordinator_args(
    source: str, max_parallelism: int, options: Mapping[str, str], *extra: str, connector: str = "sequence"
) -> list[str]:
    args = ["coordinator", "--source", source, "--connector", connector, "--max-parallelism", str(max_parallelism)]
    for key, value in options.items():
        args += ["--option", f"{key}={value}"]
    return [*args, *extra]


def serving_epochs(proc: Proc, source: str) -> list[int]:
    """The epochs at which ``proc`` started serving ``source``, from its log."""
    pattern = re.compile(rf"coordinator for source {re.escape(source)} \(.*epoch (\d+)\) is serving")
    return [int(m.group(1)) for m in pattern.finditer(proc.log())]


def is_active_in_log(proc: Proc, source: str) -> bool:
    """The last word of ``proc``'s log about ``source``: it is (still) its active coordinator."""
    last = None
    for line in proc.log().splitlines():
        if source in line and (ACTIVE_LINE in line or MOVED_LINE in line):
            last = line
    return last is not None and ACTIVE_LINE in last


def stable_active(ports: Sequence[int], source: str, settle_s: float = 2.0, timeout_s: float = 60.0) -> int:
    """The index of the one worker whose /health lists ``source`` as active and has kept
    doing so for ``settle_s`` (the group has settled), the others answering without it."""

    def who() -> int | None:
        answers = [health(p) for p in ports]
        if any(a is None for a in answers):
            return None
        active = [i for i, a in enumerate(answers) if a is not None and source in a["active_sources"]]
        return active[0] if len(active) == 1 else None

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        first = who()
        if first is not None:
            time.sleep(settle_s)
            if who() == first:
                return first
        time.sleep(0.3)
    raise AssertionError(f"no single worker settled as the active coordinator of {source} within {timeout_s} s")


@dataclass(frozen=True)
class TwoWorkers:
    """Two coordinator workers of one source, once the group settled on the active one."""

    active: Proc
    standby: Proc
    active_port: int
    standby_port: int


def start_two_workers(
    group: ProcessGroup,
    source: str,
    max_parallelism: int,
    options: Mapping[str, str],
    *extra: str,
    connector: str = "sequence",
) -> TwoWorkers:
    """Start two coordinator workers of ``source`` with the same arguments (each its own
    ``--web-port``) and wait until one of them is the settled active coordinator. The
    workers import from tests/support too (a ``connector`` of the tests' own)."""
    ports = [free_port(), free_port()]
    workers = [
        group.start(
            f"worker-{i}",
            coordinator_args(source, max_parallelism, options, "--web-port", str(port), *extra, connector=connector),
            env={"PYTHONPATH": support_pythonpath()},
        )
        for i, port in enumerate(ports)
    ]
    a = stable_active(ports, source, timeout_s=90)
    return TwoWorkers(workers[a], workers[1 - a], ports[a], ports[1 - a])


def read_outputs(paths: Iterable[Path]) -> Counter[tuple[str, int]]:
    """(split_id, value) -> how many times the jsonl outputs hold it."""
    counts: Counter[tuple[str, int]] = Counter()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a SIGKILLed reader may leave half a line at the end
                counts[(row["split_id"], row["value"])] += 1
    return counts


def expected_values(splits: int, records_per_split: int) -> set[tuple[str, int]]:
    width = max(5, len(str(splits - 1)))
    return {
        (f"seq-{k:0{width}d}", v)
        for k in range(splits)
        for v in range(k * records_per_split, (k + 1) * records_per_split)
    }


def audit(bootstrap: str, source: str) -> AuditResult:
    return asyncio.run(run_audit(bootstrap, source))


def audit_failure(result: AuditResult) -> str:
    shown = "\n".join(f"  {v.kind.value} at {v.location}: {v.message}" for v in result.violations[:10])
    return f"{len(result.violations)} violation(s):\n{shown}"


def readers_topic(bootstrap: str, source: str) -> list[dict[str, Any]]:
    """Every committed record of NS.S.readers, decoded, in the coordinator's order (cseq),
    each with its partition and offset."""
    _, readers = asyncio.run(read_control_topics(bootstrap, source))
    out = []
    for partition, offset, value in readers:
        if value is None:
            continue
        env = orjson.loads(value)
        env["_partition"], env["_offset"] = partition, offset
        out.append(env)
    out.sort(key=lambda e: e["cseq"])
    return out


def check_epochs_and_seqs(records: Sequence[dict[str, Any]]) -> list[int]:
    """Independent of the audit: epochs never decrease in cseq order, and per subtask
    the AddSplits/NoMoreSplits/ReleaseRequest seqs are 1, 2, 3 ... (no gap, no reuse).
    Returns the epochs."""
    epochs: list[int] = []
    last_seq: dict[int, int] = {}
    for env in records:
        if epochs and env["epoch"] < epochs[-1]:
            raise AssertionError(f"epoch went back from {epochs[-1]} to {env['epoch']} at cseq {env['cseq']}")
        if not epochs or env["epoch"] != epochs[-1]:
            epochs.append(env["epoch"])
        if env["type"] in ("AddSplits", "NoMoreSplits", "ReleaseRequest"):
            subtask, seq = env["subtask"], env["body"]["seq"]
            expected = last_seq.get(subtask, 0) + 1
            assert seq == expected, f"subtask {subtask}: seq {seq} after {expected - 1} (cseq {env['cseq']})"
            last_seq[subtask] = seq
    return epochs


def registrations(proc: Proc) -> list[int]:
    """The attempts a reader process registered as, from its log."""
    return [int(m) for m in re.findall(r"registered as attempt (\d+)", proc.log())]


def log_time(proc: Proc, pattern: str) -> float | None:
    """Wall-clock time (s since the epoch) of the first Faust log line matching ``pattern``."""
    regex = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\].*" + pattern, re.MULTILINE)
    match = regex.search(proc.log())
    if match is None:
        return None
    stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    return stamp + int(match.group(2)) / 1000


# -- the test ---------------------------------------------------------------------------

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 3
SPLITS = 30
RECORDS_PER_SPLIT = 60
# Splits are released one per second (30 s from the coordinator's start) and 3 readers x 40
# records/s read each at once: the coordinator is still assigning when it is killed, also
# when the readers took ten seconds and more to start on a loaded machine.
OPTIONS = {
    "splits": str(SPLITS),
    "records_per_split": str(RECORDS_PER_SPLIT),
    "rate": "40",
    "release_interval_ms": "1000",
    "splits_per_release": "1",
}


def test_the_standby_takes_over_when_the_active_coordinator_is_killed(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        pair = start_two_workers(group, source, READERS, OPTIONS)
        active, standby, active_port, standby_port = pair.active, pair.standby, pair.active_port, pair.standby_port
        assert is_active_in_log(active, source), active.tail()
        assert not is_active_in_log(standby, source), standby.tail()
        assert serving_epochs(active, source) == [1]

        outputs = [tmp_path / f"reader-{k}.jsonl" for k in range(READERS)]
        readers = [
            group.reader(source, k, OPTIONS, outputs[k], "--checkpoint-interval-ms", "500") for k in range(READERS)
        ]
        for reader in readers:
            reader.wait_for_log("registered as attempt 1", timeout_s=60)
        for reader in readers:
            reader.wait_for_log("checkpoint 3:", timeout_s=60)

        # -- the ops endpoints: the active worker ...
        status, ctype, body = http_get(active_port, "/health")
        assert status == 200 and ctype.startswith("application/json"), (status, ctype, body)
        assert orjson.loads(body) == {"status": "ok", "active_sources": [source], "failed_sources": []}
        metrics = coordinator_metrics(active_port, source)
        assert re.search(rf'^sluicegate_registered_readers\{{source="{source}"\}} {READERS}\.0$', metrics, re.M), (
            metrics
        )
        assert re.search(rf'^sluicegate_coordinator_epoch\{{source="{source}"\}} 1\.0$', metrics, re.M), metrics
        assert re.search(rf'^sluicegate_active_source\{{source="{source}"\}} 1\.0$', metrics, re.M), metrics
        status, ctype, body = http_get(active_port, f"/sources/{source}")
        assert status == 200 and ctype.startswith("application/json"), (status, body)
        snapshot = source_snapshot(active_port, source)
        assert snapshot["source"] == source and snapshot["state"] == "active" and snapshot["epoch"] == 1
        assert [s["subtask"] for s in snapshot["subtasks"]] == list(range(READERS))
        for sub in snapshot["subtasks"]:
            assert sub["state"] == "live" and sub["attempt"] == 1, sub
            assert sub["seq"] >= 1 and isinstance(sub["owned_splits"], list), sub
        owned = [split for sub in snapshot["subtasks"] for split in sub["owned_splits"]]
        assert len(owned) == len(set(owned)), f"a split owned twice: {snapshot['subtasks']}"
        # ... and the standby
        status, _, body = http_get(standby_port, f"/sources/{source}")
        assert status == 404, (status, body)
        assert health(standby_port) == {"status": "ok", "active_sources": [], "failed_sources": []}
        status, _, body = http_get(standby_port, "/metrics")
        assert status == 200
        assert re.search(rf'^sluicegate_active_source\{{source="{source}"\}} 0\.0$', body.decode(), re.M)
        assert "sluicegate_registered_readers{" not in body.decode()

        # -- kill the active coordinator while the readers read and splits are still being released
        killed_at = time.time()
        active.kill()
        standby.wait_for_log(") is serving", timeout_s=60)
        assert serving_epochs(standby, source) == [2], standby.tail()
        serving_at = log_time(standby, r"epoch 2\) is serving")
        assert serving_at is not None
        print(f"takeover: SIGKILL -> successor serving epoch 2 in {serving_at - killed_at:.1f} s")
        assert serving_at - killed_at < 30

        # the successor answers for the source now, with the readers it restored
        snapshot2 = source_snapshot(standby_port, source)
        assert snapshot2["epoch"] == 2
        assert [s["attempt"] for s in snapshot2["subtasks"]] == [1] * READERS
        assert wait_until(lambda: http_get(standby_port, "/health")[0] == 200, 10, "/health on the successor")

        for k, reader in enumerate(readers):
            assert reader.wait(120) == 0, f"reader {k}:\n{reader.tail()}"

        # -- readers kept going: one registration each, never fenced
        for k, reader in enumerate(readers):
            assert registrations(reader) == [1], f"reader {k} registered again:\n{reader.tail()}"
            assert "fenced" not in reader.log(), f"reader {k} was fenced:\n{reader.tail()}"

        counts = read_outputs(outputs)
        expected = expected_values(SPLITS, RECORDS_PER_SPLIT)
        missing = expected - set(counts)
        duplicated = {key: n for key, n in counts.items() if n > 1}
        assert not missing, f"{len(missing)} values never read, e.g. {sorted(missing)[:5]}"
        assert set(counts) == expected
        assert not duplicated, f"{len(duplicated)} values read twice, e.g. {sorted(duplicated)[:5]}"

        result = audit(kafka_bootstrap, source)
        assert result.ok, audit_failure(result)
        summary = result.summary
        assert summary.epochs == [1, 2]
        assert summary.splits_finished == SPLITS and summary.splits_owned == 0
        assert [s.attempts for s in summary.subtasks] == [1] * READERS
        records = readers_topic(kafka_bootstrap, source)
        assert check_epochs_and_seqs(records) == [1, 2]
        after = [e for e in records if e["epoch"] == 2 and e["type"] == "AddSplits"]
        assert after, "the successor assigned nothing: the kill came too late to test a takeover mid-run"
        assert {e["attempt"] for e in records if e["epoch"] == 2} <= {1}
    finally:
        group.stop_all()
