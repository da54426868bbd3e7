"""Fast takeover over real Kafka and real processes (takeover_silence_ms, default 2 s).

Two coordinator workers share a source that two readers read while its splits are
released over time. The standby watches the source's state topic; it takes over when
the active coordinator stops committing, before the Faust group notices anything:

1. The active worker is paused (SIGSTOP) for less than the group session timeout: a
   live-but-slow coordinator. The standby takes over at epoch 2, fencing it. Resumed,
   the old one finds itself fenced and steps down quietly: it still holds the source's
   Faust partition but does not start the source again, and the two do not fight.
2. The new active worker (which holds no Faust partition) is SIGKILLed: the first
   worker, which saw it commit, takes over at epoch 3 within the silence plus a few
   seconds, by the watch, not by a rebalance.

The readers read on throughout: one registration each, every value exactly once, and
the audit of both control topics is clean with epochs [1, 2, 3].
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from kafka_data import audit_ok_once_epochs_are
from processes import ProcessGroup
from test_takeover import (
    check_epochs_and_seqs,
    expected_values,
    log_time,
    read_outputs,
    readers_topic,
    registrations,
    serving_epochs,
    start_two_workers,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 2
SPLITS = 14
RECORDS_PER_SPLIT = 100
# 2 readers x 40 records/s read 1,400 values in >= 17 s; one split is released per
# second, so the coordinator is still assigning during both takeovers.
OPTIONS = {
    "splits": str(SPLITS),
    "records_per_split": str(RECORDS_PER_SPLIT),
    "rate": "40",
    "release_interval_ms": "1000",
    "splits_per_release": "1",
}
TAKEOVER_LINE = "no commit seen for"
SILENCE_S = 2.0
SESSION_TIMEOUT_S = 6.0
"""The Faust group's (faust_app.py): a takeover by rebalance cannot come sooner."""


def test_a_standby_takes_over_a_silent_coordinator_before_the_group_rebalances(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        pair = start_two_workers(group, source, READERS, OPTIONS)
        first, second = pair.active, pair.standby
        outputs = [tmp_path / f"reader-{k}.jsonl" for k in range(READERS)]
        readers = [
            group.reader(source, k, OPTIONS, outputs[k], "--checkpoint-interval-ms", "500") for k in range(READERS)
        ]
        for reader in readers:
            reader.wait_for_log("checkpoint 2:", timeout_s=60)

        # -- 1. a live-but-slow active coordinator: paused, fenced, resumed, steps down
        os.kill(first.popen.pid, signal.SIGSTOP)
        try:
            second.wait_for_log("epoch 2) is serving", timeout_s=30)
        finally:
            os.kill(first.popen.pid, signal.SIGCONT)
        assert TAKEOVER_LINE in second.log(), second.tail()
        first.wait_for_log("stepping down", timeout_s=30)
        time.sleep(3.0)  # room for a restart loop to show, if there were one
        assert serving_epochs(first, source) == [1], first.tail()
        assert serving_epochs(second, source) == [2], second.tail()
        assert "stepping down" not in second.log(), second.tail()

        # -- 2. the new active coordinator dies: the first worker saw it commit and takes over
        killed_at = time.time()
        second.kill()
        first.wait_for_log("epoch 3) is serving", timeout_s=60)
        took_over_at = log_time(first, TAKEOVER_LINE)
        serving_at = log_time(first, r"epoch 3\) is serving")
        assert took_over_at is not None and serving_at is not None, first.tail()
        print(f"takeover: SIGKILL -> successor serving epoch 3 in {serving_at - killed_at:.1f} s")
        assert killed_at < took_over_at <= serving_at, first.tail()
        assert serving_at - killed_at < SESSION_TIMEOUT_S, first.tail()  # silence + restore, not a rebalance
        assert serving_epochs(first, source) == [1, 3]

        for k, reader in enumerate(readers):
            assert reader.wait(120) == 0, f"reader {k}:\n{reader.tail()}"
        for k, reader in enumerate(readers):
            assert registrations(reader) == [1], f"reader {k} registered again:\n{reader.tail()}"
            assert "fenced" not in reader.log(), f"reader {k} was fenced:\n{reader.tail()}"

        counts = read_outputs(outputs)
        assert set(counts) == expected_values(SPLITS, RECORDS_PER_SPLIT)
        duplicated = {key: n for key, n in counts.items() if n > 1}
        assert not duplicated, f"{len(duplicated)} values read twice, e.g. {sorted(duplicated)[:5]}"

        # the readers may end on epoch 2's NoMoreSplits before epoch 3 serves; epoch 3's answers
        # to their leaving (SplitsReleased) then commit after they exit: the audit waits for them
        summary = audit_ok_once_epochs_are(kafka_bootstrap, source, [1, 2, 3])
        assert summary.splits_finished == SPLITS and summary.splits_owned == 0
        records = readers_topic(kafka_bootstrap, source)
        assert check_epochs_and_seqs(records) == [1, 2, 3]
    finally:
        for proc in group.procs:
            if proc.popen.poll() is None:
                os.kill(proc.popen.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM until resumed
        group.stop_all()
