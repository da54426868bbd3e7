"""The audit of a running source judges only states that existed (issue 22 item 1).

A bounded ``sequence`` source whose splits are released over time, read by 4 reader
processes, is audited in a tight loop from a thread, and followed by ``audit --follow``,
for ~30 s while the coordinator is SIGKILLed and started again 3 times and readers 4
times. A coordinator step commits records on several partitions of the readers topic
in one transaction, and the transaction's markers reach them one by one: a read taken
at an instant can see half a step. Every live audit must judge a consistent cut (audit/cut.py) and report
no violation, and the follower none. Then a forged AddSplits is written into the
readers topic while everything runs: every audit after it, and the follower, report a
violation at that record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_data import READER_TIMING, SHORT_SESSION
from local_http import free_port, http_get, wait_until
from processes import Proc, ProcessGroup
from test_observability import sample
from test_takeover import audit_failure

from sluicegate.audit.commands import run_audit
from sluicegate.audit.invariants import AuditResult
from sluicegate.audit.replay import topic_names
from sluicegate.protocol import AddSplits, encode, envelope

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 4
OPTIONS = {
    "splits": "4000",
    "records_per_split": "10",
    "rate": "200",  # 4 readers x 20 splits/s, a little above the release rate: all busy
    "release_interval_ms": "300",
    "splits_per_release": "20",
}
# seconds after the readers registered: (what, subtask); a killed reader restarts 1 s later
KILLS = [
    (3.0, "reader", 1),
    (5.0, "coordinator", 0),
    (9.0, "reader", 2),
    (13.0, "coordinator", 0),
    (17.0, "reader", 0),
    (21.0, "coordinator", 0),
    (24.0, "reader", 3),
]
AUDITS_AFTER_FORGERY = 2


class LiveAuditor(threading.Thread):
    """Audits the source back to back until stopped; keeps every result with its end time."""

    def __init__(self, bootstrap: str, source: str) -> None:
        super().__init__(name="live-auditor", daemon=True)
        self.bootstrap, self.source = bootstrap, source
        self.results: list[tuple[float, AuditResult]] = []
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                result = asyncio.run(run_audit(self.bootstrap, self.source))
                self.results.append((time.monotonic(), result))
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=120)


def forge(bootstrap: str, source: str, last: AuditResult) -> tuple[str, int, int]:
    """Write an AddSplits that no coordinator sent: subtask 1's live attempt, next cseq,
    and a seq and split it already had. Returns its location (topic, partition, offset)."""
    _, readers_topic = topic_names(source)
    summary = last.summary
    attempt = next(s.current_attempt for s in summary.subtasks if s.subtask == 1)
    split = {"split_id": "seq-00000", "start": 0, "end": 10, "position": 0}
    env = envelope(
        AddSplits(1, [split]),
        source=source,
        subtask=1,
        attempt=attempt,
        epoch=max(summary.epochs),
        ts=int(time.time() * 1000),
        cseq=(summary.last_cseq or 0) + 1,
    )
    where: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        readers_topic,
        encode(env),
        partition=1,
        on_delivery=lambda _err, msg: where.append((msg.partition(), msg.offset())),
    )
    producer.flush(30)
    assert where, "the forged record was not delivered"
    return readers_topic, *where[0]


def served(port: int) -> str | None:
    """What the follower serves on /metrics (None while nothing answers)."""
    status, _, body = http_get(port, "/metrics")
    return body.decode() if status == 200 else None


def test_audits_of_a_live_source_under_kills_report_only_what_happened(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """One-shot audits back to back and ``sluicegate audit --follow --fail-fast
    --metrics-port P`` beside them, through the kills: no audit reports a violation, and
    the follower keeps running, its metrics counting the records it checked. Then a
    forged AddSplits: every audit after it names it, and the follower prints it with the
    record and exits 1."""
    source = unique_source
    coordinator = procs.coordinator(source, READERS, OPTIONS, *SHORT_SESSION)
    readers: dict[int, Proc] = {
        k: procs.reader(source, k, OPTIONS, tmp_path / f"out-{k}.jsonl", *READER_TIMING) for k in range(READERS)
    }
    for reader in readers.values():
        reader.wait_for_log("registered as attempt", timeout_s=90)
    port = free_port()
    follow = procs.start(
        "audit-follow", ["audit", "--source", source, "--follow", "--fail-fast", "--metrics-port", str(port)]
    )
    follow.wait_for_log("following", timeout_s=60)
    auditor = LiveAuditor(kafka_bootstrap, source)
    auditor.start()
    zero = time.monotonic()
    restarts: list[tuple[float, int]] = []
    kills = list(KILLS)
    try:
        while kills or restarts:
            now = time.monotonic() - zero
            if restarts and restarts[0][0] <= now:
                subtask = restarts.pop(0)[1]
                readers[subtask] = procs.reader(
                    source, subtask, OPTIONS, tmp_path / f"out-{subtask}.jsonl", *READER_TIMING
                )
            elif kills and kills[0][0] <= now:
                _, what, subtask = kills.pop(0)
                if what == "coordinator":
                    coordinator.kill()
                    coordinator = procs.coordinator(source, READERS, OPTIONS, *SHORT_SESSION, wait_serving=False)
                else:
                    readers[subtask].kill()
                    restarts.append((now + 1.0, subtask))
            assert auditor.error is None, repr(auditor.error)
            assert follow.returncode is None, "audit --follow stopped during the kills:\n" + follow.tail()
            time.sleep(0.05)
        time.sleep(3.0)  # the last coordinator serves again
        live = list(auditor.results)
        assert auditor.error is None, repr(auditor.error)
        assert len(live) >= 5, f"only {len(live)} audits ran during the kills"
        false_alarms = [(i, r) for i, (_, r) in enumerate(live) if not r.ok]
        assert not false_alarms, f"audit {false_alarms[0][0]} of {len(live)}: " + audit_failure(false_alarms[0][1])
        cuts = [r.summary.cut for _, r in live if r.summary.cut is not None]
        assert len(cuts) == len(live) and all(not c.unresolved for c in cuts)
        assert len({r.summary.last_cseq for _, r in live}) > 1, "the source did not move while it was audited"
        metrics = wait_until(lambda: served(port), 30, "the follower's metrics")
        assert metrics is not None
        assert follow.returncode is None, follow.tail()
        assert sample(metrics, "sluicegate_audit_violations_total", kind="any", source=source) == 0
        assert (sample(metrics, "sluicegate_audit_records_checked_total", source=source) or 0) > 0
        assert (sample(metrics, "sluicegate_audit_readers_live", source=source) or 0) > 0

        location = forge(kafka_bootstrap, source, live[-1][1])
        forged_at = time.monotonic()
        deadline = forged_at + 120
        while sum(1 for t, _ in auditor.results if t > forged_at) < AUDITS_AFTER_FORGERY + 1:
            assert auditor.error is None and time.monotonic() < deadline, repr(auditor.error)
            time.sleep(0.2)
    finally:
        auditor.stop()
    # the audit under way when the record was written may have read before it
    after = [r for t, r in auditor.results if t > forged_at][1:]
    for result in after:
        places = {(v.location.topic, v.location.partition, v.location.offset) for v in result.violations}
        assert location in places, "the forged record went unnoticed: " + audit_failure(result)
    assert follow.wait(60) == 1, follow.tail()
    printed = follow.lines_with("VIOLATION")
    assert printed and f"{location[0]} partition {location[1]} offset {location[2]}" in printed[0], follow.tail()
    assert "AddSplits for subtask 1" in printed[0]
    print(
        f"{len(live)} live audits, none with a violation; {sum(1 for c in cuts if c.rereads)} read on to complete "
        f"a step, {sum(c.left_out for c in cuts)} later records left out; the forged record was caught "
        f"by the {len(after)} audits after it and by audit --follow"
    )
