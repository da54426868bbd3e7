"""A coordinator step longer than the takeover silence, over real Kafka and two real
coordinator workers with ``--takeover-silence-ms 2000`` (issue 21 item 5):

1. A registration that hands out a million splits is one step of seconds (with a floor of
   CPU seconds of its own, so that a fast machine makes it no shorter), and so is the
   release of those splits when the registered reader's session times out (no reader
   reads them). The core runs them on its step thread while the event loop goes on:
   ``/metrics`` answers during the steps (``sluicegate_step_running_seconds`` shows one
   past the silence); the active coordinator re-commits its last commit every liveness
   interval while a step runs, and its transactions of a hundred megabytes carry that
   commit every megabyte, so the standby sees the state topic move and does not take
   over, nor does the Faust group drop the worker: one coordinator, at epoch 1.
2. SIGSTOP of the active worker stops the step thread with everything else: the standby
   takes over once, at epoch 2, and the worker, resumed within the group's session
   timeout, finds itself fenced and steps down.

The registration is written into the inbox as a reader would write it; no reader reads the
splits (the one-million-split benchmark does that).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from local_http import http_get, wait_until
from processes import ProcessGroup
from test_takeover import serving_epochs, start_two_workers

from sluicegate.protocol.codec import encode, encode_key
from sluicegate.protocol.messages import ReaderRegistration, envelope
from sluicegate.protocol.topics import ControlTopics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SPLITS = 1_000_000
SILENCE_MS = 2000
ADD_READER_S = 2.5
"""CPU seconds the registration step spends before it hands out the million splits (the GIL
held, as a real step holds it; tests/support/slow_steps.py): a million splits alone made
steps of 1.9-2.5 s on a quiet machine, and a faster machine must not make them shorter
than the silence."""
CONNECTOR = "slow_steps:SlowRegistrationSource"
TAKEOVER_LINE = "no commit seen for"
MOVED_LINE = "moved to another worker"
TIMED_OUT_LINE = "failed (session-timeout)"
OPTIONS = {"splits": str(SPLITS), "records_per_split": "10", "add_reader_s": str(ADD_READER_S)}


def metric(port: int, name: str, source: str, **labels: str) -> float | None:
    """The value of one series on a worker's /metrics (None: not served now)."""
    status, _, body = http_get(port, "/metrics")
    if status != 200:
        return None
    wanted = {"source": source, **labels}
    for line in body.decode().splitlines():
        match = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if match and dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))) == wanted:
            return float(match.group(2))
    return None


def register_subtask_0(bootstrap: str, source: str) -> None:
    """A ReaderRegistration of subtask 0 in the source's inbox, as a reader writes it."""
    body = ReaderRegistration(incarnation="long-step", location="test", reported_splits=[], restored_checkpoint_id=None)
    env = envelope(body, source=source, subtask=0, attempt=None, epoch=0, ts=int(time.time() * 1000))
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(ControlTopics.for_source(source, "sluicegate").coordinator, encode(env), key=encode_key(0))
    assert producer.flush(30) == 0, "the registration was not delivered"


def test_a_step_longer_than_the_silence_keeps_one_coordinator_and_a_stopped_one_is_taken_over_once(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        pair = start_two_workers(
            group, source, 2, OPTIONS, "--takeover-silence-ms", str(SILENCE_MS), connector=CONNECTOR
        )
        active, standby, port = pair.active, pair.standby, pair.active_port

        # -- 1. one registration, one step of a million splits; no heartbeat follows, so
        # the session timeout takes them back in a second long step: the standby waits
        register_subtask_0(kafka_bootstrap, source)
        longest = 0.0

        def both_steps_done() -> bool:
            nonlocal longest
            running = metric(port, "sluicegate_step_running_seconds", source)
            longest = max(longest, running or 0.0)
            return running == 0.0 and TIMED_OUT_LINE in active.log()

        wait_until(both_steps_done, 180, "the assignment and the session timeout's release")
        assigned = metric(port, "sluicegate_coordinator_events_total", source, event="splits_assigned")
        print(f"steps of up to {longest:.1f} s ({assigned:,.0f} splits assigned, released), silence {SILENCE_MS} ms")
        assert longest * 1000 > SILENCE_MS, f"no step ({longest:.1f} s) was longer than the silence"
        time.sleep(SILENCE_MS / 1000 + 2)
        assert TAKEOVER_LINE not in standby.log(), standby.tail()
        assert MOVED_LINE not in active.log(), f"the group dropped the worker during a step:\n{active.tail()}"
        assert serving_epochs(active, source) == [1], active.tail()
        assert serving_epochs(standby, source) == [], standby.tail()

        # -- 2. the active worker stops (its step thread too): one takeover. It is resumed
        # once the standby decided, within the group's session timeout, so that the group
        # does not drop it and move the source back to it (a rebalance, not a takeover).
        os.kill(active.popen.pid, signal.SIGSTOP)
        try:
            standby.wait_for_log(TAKEOVER_LINE, timeout_s=30)
        finally:
            os.kill(active.popen.pid, signal.SIGCONT)
        standby.wait_for_log("epoch 2) is serving", timeout_s=90)
        active.wait_for_log("stepping down", timeout_s=60)  # resumed, it finds itself fenced
        time.sleep(SILENCE_MS / 1000 + 2)
        assert serving_epochs(standby, source) == [2], standby.tail()
        assert serving_epochs(active, source) == [1], active.tail()
        assert standby.log().count(TAKEOVER_LINE) == 1, standby.tail()
        assert MOVED_LINE not in standby.log(), standby.tail()
    finally:
        for proc in group.procs:
            if proc.popen.poll() is None:
                os.kill(proc.popen.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM until resumed
        group.stop_all()
