"""Flink's watermark-alignment bugs as tests over real Kafka, a real ``sluicegate
coordinator`` and real ``sluicegate reader`` processes (the ``sequence`` connector).

Each test sets up the situation the Flink issue describes and asserts what is
observable: the bounded run ends (every reader exits 0) or the announced low
watermark (WatermarkAnnouncement on NS.S.readers) gets past the point the bug
would have stuck it at; every record is read (once, as nothing fails in the
bounded tests); the audit of the control topics is clean.

Event times: record i of split k is at START + k * split_time_offset_ms + i * 10 ms,
so a positive offset puts later splits *ahead* and alignment pauses them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from processes import Proc, ProcessGroup, output_records, poll_until, readers_messages

from sluicegate.audit.commands import run_audit
from sluicegate.audit.invariants import AuditSummary

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

START = 1_700_000_000_000
"""The sequence connector's default start_time_ms."""
EVENT_MS = 10
"""Its default event_interval_ms."""
DRIFT_MS = 500
COORDINATOR_TIMING = ("--watermark-announce-interval-ms", "200")
READER_TIMING = ("--checkpoint-interval-ms", "200", "--heartbeat-interval-ms", "200", "--max-batch", "50")


# -- helpers ---------------------------------------------------------------------


def start_coordinator(
    procs: ProcessGroup, source: str, slots: int, options: dict[str, str], *extra: str, drift_ms: int = DRIFT_MS
) -> Proc:
    return procs.coordinator(
        source, slots, options, "--max-watermark-drift-ms", str(drift_ms), *COORDINATOR_TIMING, *extra
    )


def start_readers(
    procs: ProcessGroup, source: str, count: int, options: dict[str, str], tmp_path: Path, *extra: str
) -> tuple[list[Proc], list[Path]]:
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(count)]
    readers = [procs.reader(source, k, options, outs[k], *READER_TIMING, *extra) for k in range(count)]
    return readers, outs


async def announcements(bootstrap: str, source: str) -> list[dict[str, Any]]:
    """The coordinator's WatermarkAnnouncements (envelopes, in cseq order)."""
    return [m for m in await readers_messages(bootstrap, source) if m["type"] == "WatermarkAnnouncement"]


async def low_watermark(bootstrap: str, source: str) -> int | None:
    lows = [m["body"]["low_watermark"] for m in await announcements(bootstrap, source)]
    return max((low for low in lows if low is not None), default=None)


async def low_past(bootstrap: str, source: str, threshold: int, timeout_s: float, what: str) -> int:
    async def passed() -> int | None:
        low = await low_watermark(bootstrap, source)
        return low if low is not None and low > threshold else None

    result: int = await poll_until(passed, timeout_s, what, poll_s=0.3)
    return result


def expected_values(splits: int, records_per_split: int) -> set[int]:
    return set(range(splits * records_per_split))


def assert_read_exactly_once(outs: list[Path], splits: int, records_per_split: int) -> None:
    counts = Counter(record["value"] for record in output_records(*outs))
    missing = expected_values(splits, records_per_split) - set(counts)
    assert not missing, f"{len(missing)} records never read, e.g. {sorted(missing)[:5]}"
    twice = [v for v, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} records read more than once (nothing failed), e.g. {twice[:5]}"


async def clean_audit(bootstrap: str, source: str) -> AuditSummary:
    result = await run_audit(bootstrap, source)
    assert result.ok, "the audit found violations:\n" + "\n".join(map(str, result.violations[:10]))
    return result.summary


async def all_exit_ok(procs: ProcessGroup, readers: list[Proc], timeout_s: float) -> None:
    codes = [await r.wait_async(timeout_s) for r in readers]
    assert codes == [0] * len(readers), procs.describe()


def logged(readers: list[Proc], text: str) -> bool:
    return any(r.lines_with(text) for r in readers)


async def _more_than(items: Awaitable[list[Any]], count: int) -> bool:
    return len(await items) > count


def owner_of(messages: list[dict[str, Any]], split_id: str) -> int:
    """The subtask that got ``split_id`` last (a cooperative rebalance may have moved it)."""
    owners = [
        int(m["subtask"])
        for m in messages
        if m["type"] == "AddSplits" and any(s["split_id"] == split_id for s in m["body"]["splits"])
    ]
    if not owners:
        raise AssertionError(f"{split_id} was never assigned")
    return owners[-1]


# -- FLINK-32414: a subtask with no split ---------------------------------------------


async def test_flink_32414_a_reader_without_a_split_does_not_hold_alignment_back(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Three readers, two splits: one reader never gets a split. It heartbeats itself idle,
    so the low watermark follows the two that read; the ahead split is paused and resumed
    and the bounded run ends."""
    records = 600
    options = {"splits": "2", "records_per_split": str(records), "rate": "600", "split_time_offset_ms": "3000"}
    start_coordinator(procs, unique_source, 3, options)
    readers, outs = start_readers(procs, unique_source, 3, options, tmp_path)
    started = time.monotonic()
    await all_exit_ok(procs, readers, 40)
    took = time.monotonic() - started

    assert_read_exactly_once(outs, 2, records)
    assert logged(readers, "paused") and logged(readers, "resumed"), "alignment never paused the ahead split"
    by_subtask = Counter(r["subtask"] for r in output_records(*outs))
    assert len(by_subtask) == 2, f"expected one reader without a split: {by_subtask}"
    low = await low_watermark(kafka_bootstrap, unique_source)
    assert low is not None and low >= START + 3000, f"the low watermark stuck at {low}"
    await clean_audit(kafka_bootstrap, unique_source)
    print(f"FLINK-32414: 2 splits over 3 readers read in {took:.1f} s; last low watermark START+{low - START} ms")


# -- FLINK-35157: some subtasks finished -----------------------------------------------


async def test_flink_35157_readers_that_finished_their_splits_do_not_hold_alignment_back(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Three readers, three splits each 3 s of event time ahead of the one before. The
    behind ones finish first and their readers exit; the low watermark must get past the
    first split's end (only possible once its finished reader stopped counting) and the
    last reader must finish too."""
    records, offset = 600, 3000
    options = {"splits": "3", "records_per_split": str(records), "rate": "600", "split_time_offset_ms": str(offset)}
    start_coordinator(procs, unique_source, 3, options)
    readers, outs = start_readers(procs, unique_source, 3, options, tmp_path)
    started = time.monotonic()
    await all_exit_ok(procs, readers, 40)
    took = time.monotonic() - started

    assert_read_exactly_once(outs, 3, records)
    assert logged(readers, "paused") and logged(readers, "resumed"), "alignment never paused an ahead split"
    split0_end = START + (records - 1) * EVENT_MS
    low = await low_watermark(kafka_bootstrap, unique_source)
    assert low is not None and low > split0_end, f"the low watermark stuck at START+{(low or START) - START}"
    summary = await clean_audit(kafka_bootstrap, unique_source)
    assert summary.splits_finished == 3
    print(f"FLINK-35157: 3 skewed splits read in {took:.1f} s; last low watermark START+{low - START} ms")


# -- FLINK-32496: alignment together with idleness ----------------------------------------


async def test_flink_32496_alignment_with_an_idle_split_goes_on_and_the_split_resumes(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Two readers, two splits at the same event times; split 0 goes quiet for 8 s after 300
    records. Without split idleness the low watermark would stay at split 0's last event
    time and alignment would pause split 1 for the whole stall. With
    --split-idle-timeout-ms 500 split 0 goes idle, its reader heartbeats idle, the low
    watermark follows split 1 far past the stall point while split 0 is still quiet; then
    split 0 reads on and the bounded run ends with every record read."""
    records, stall_at, stall_ms = 1500, 300, 8000
    options = {
        "splits": "2",
        "records_per_split": str(records),
        "rate": "500",
        "stall_split": "0",
        "stall_at": str(stall_at),
        "stall_ms": str(stall_ms),
    }
    start_coordinator(procs, unique_source, 2, options)
    readers, outs = start_readers(procs, unique_source, 2, options, tmp_path, "--split-idle-timeout-ms", "500")
    started = time.monotonic()
    stall_point = START + (stall_at - 1) * EVENT_MS
    threshold = stall_point + 3 * DRIFT_MS
    low = await low_past(kafka_bootstrap, unique_source, threshold, 20, "the low watermark past split 0's stall point")
    passed_s = time.monotonic() - started
    split0_values = {r["value"] for r in output_records(*outs) if r["split_id"] == "seq-00000"}
    assert stall_at not in split0_values, "split 0 read on before the low watermark passed its stall point"
    await all_exit_ok(procs, readers, 40)
    took = time.monotonic() - started

    assert_read_exactly_once(outs, 2, records)
    assert logged(readers, "paused"), "alignment never paused split 1 at split 0's stall point"
    await clean_audit(kafka_bootstrap, unique_source)
    print(
        f"FLINK-32496: low watermark START+{low - START} ms (stall point START+{stall_point - START}) "
        f"after {passed_s:.1f} s while split 0 was quiet; run ended in {took:.1f} s"
    )


# -- FLINK-37670: NoMoreSplits sent --------------------------------------------------


async def test_flink_37670_no_deadlock_once_no_more_splits_was_sent(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Two readers that stay registered after their splits are done
    (--no-exit-when-finished), splits released one at a time. The reader of the behind
    split finishes first and sits with nothing to read: it must not keep the low watermark
    at its last event time, or the ahead split (paused by alignment) would never finish.
    Then NoMoreSplits goes to both (a bounded sluicegate enumerator sends it only once no
    split is outstanding, since a failed reader's splits come back), and the idle readers
    neither hang nor stop the coordinator's announcements; they leave cleanly."""
    records, offset = 600, 3000
    options = {
        "splits": "2",
        "records_per_split": str(records),
        "rate": "600",
        "split_time_offset_ms": str(offset),
        "release_interval_ms": "300",
    }
    start_coordinator(procs, unique_source, 2, options)
    readers, outs = start_readers(procs, unique_source, 2, options, tmp_path, "--no-exit-when-finished")
    started = time.monotonic()

    async def everything_read() -> bool:
        for reader in readers:
            assert reader.returncode is None, f"{reader.name} exited:\n{reader.tail()}"
        return {r["value"] for r in output_records(*outs)} == expected_values(2, records)

    await poll_until(everything_read, 30, "every record of both splits in the outputs")
    took = time.monotonic() - started
    split0_end = START + (records - 1) * EVENT_MS
    low = await low_past(kafka_bootstrap, unique_source, split0_end, 10, "the low watermark past split 0's end")

    async def no_more_splits_to_both() -> bool:
        messages = await readers_messages(kafka_bootstrap, unique_source)
        return {m["subtask"] for m in messages if m["type"] == "NoMoreSplits"} == {0, 1}

    await poll_until(no_more_splits_to_both, 15, "NoMoreSplits to both readers")
    # after NoMoreSplits the coordinator goes on announcing to the idle readers
    announced = len(await announcements(kafka_bootstrap, unique_source))
    await poll_until(
        lambda: _more_than(announcements(kafka_bootstrap, unique_source), announced), 10, "announcements going on"
    )
    assert [r.returncode for r in readers] == [None, None], "--no-exit-when-finished readers exited"
    for reader in readers:
        reader.request_stop()
    await all_exit_ok(procs, readers, 30)

    assert_read_exactly_once(outs, 2, records)
    assert logged(readers, "paused") and logged(readers, "resumed"), "alignment never paused the ahead split"
    await clean_audit(kafka_bootstrap, unique_source)
    print(f"FLINK-37670: both splits read in {took:.1f} s; low watermark START+{low - START} ms")


# -- FLINK-40505: a failed reader's watermark ----------------------------------------------


async def test_flink_40505_a_failed_readers_watermark_stops_counting_once_its_attempt_fails(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """Two readers of an unbounded source; split 1 is 20 s of event time ahead of split 0,
    so the reader of split 0 holds the low watermark and alignment pauses split 1. SIGKILL
    the reader of split 0: once its attempt fails (session timeout 3 s) its watermark
    stops counting, and the low watermark jumps to the other reader's without the killed
    reader ever coming back."""
    offset = 20_000
    # Split k is subtask k's and waits for it (round robin, a minute's grace): given to the
    # first reader when the second was slow to start (a loaded CI), split 1 moved later, and
    # while it moved the low watermark jumped to its event time (the new owner had reported
    # none yet: it does not hold the low watermark back), which never decreases.
    assignment = {"assigner": "round_robin", "assignment_grace_ms": "60000"}
    options = {
        "splits": "2",
        "records_per_split": "unbounded",
        "rate": "200",
        "split_time_offset_ms": str(offset),
        **assignment,
    }
    session = ("--session-timeout-ms", "3000")
    coordinator = start_coordinator(procs, unique_source, 2, options, *session, drift_ms=1000)
    # The reader of split 0 starts first and reads before the other registers: a reader that
    # has seen no event time yet does not hold the low watermark back (semantics 5), so
    # started together the reader of split 1 could report first and lift it past split 0.
    outs = [tmp_path / f"reader-{k}.jsonl" for k in range(2)]
    readers = [procs.reader(unique_source, 0, options, outs[0], *READER_TIMING, *session)]
    await readers[0].wait_for_log_async("checkpoint 2:", timeout_s=30)
    readers.append(procs.reader(unique_source, 1, options, outs[1], *READER_TIMING, *session))
    await readers[1].wait_for_log_async("registered as attempt 1", timeout_s=30)

    # One split each (the grace above), as the coordinator's messages say.
    async def split_each() -> bool:
        messages = await readers_messages(kafka_bootstrap, unique_source)
        return {owner_of(messages, "seq-00000"), owner_of(messages, "seq-00001")} == {0, 1}

    await poll_until(split_each, 60, "a split for each reader")
    before = await low_past(kafka_bootstrap, unique_source, START + 1000, 20, "the low watermark advancing")
    assert before < START + offset, "split 0's reader did not hold the low watermark back"
    holder = owner_of(await readers_messages(kafka_bootstrap, unique_source), "seq-00000")
    readers[holder].kill()
    killed = time.monotonic()

    low = await low_past(kafka_bootstrap, unique_source, START + offset, 60, "the low watermark past split 1's start")
    jumped_s = time.monotonic() - killed
    # Not before its attempt failed, and without it coming back: in the coordinator's own
    # order (cseq), the first announcement past split 1's start follows the release of
    # the killed attempt (session timeout). The order, not the seconds: on a loaded machine
    # the session timeout's 3 s and the announcements take what they take.
    messages = await readers_messages(kafka_bootstrap, unique_source)
    failed_at = [
        m["cseq"]
        for m in messages
        if m["type"] == "SplitsReleased" and m["subtask"] == holder and m["body"]["reason"] == "session-timeout"
    ]
    passed_at = [
        m["cseq"]
        for m in messages
        if m["type"] == "WatermarkAnnouncement" and (m["body"]["low_watermark"] or 0) > START + offset
    ]
    assert failed_at and passed_at, f"release {failed_at}, announcements past split 1's start {passed_at[:3]}"
    assert failed_at[0] < passed_at[0], f"the low watermark moved (cseq {passed_at[0]}) before the attempt failed"
    assert jumped_s >= 2.0, f"the low watermark moved {jumped_s:.1f} s after the kill, before any session timeout"
    assert readers[holder].returncode is not None
    other = readers[1 - holder]
    assert other.returncode is None, other.tail()
    other.request_stop()
    await all_exit_ok(procs, [other], 30)
    await clean_audit(kafka_bootstrap, unique_source)
    failed = coordinator.lines_with(f"subtask {holder} attempt 1 failed (session-timeout)")
    assert failed, f"the killed reader's attempt did not fail by session timeout:\n{coordinator.tail()}"
    print(
        f"FLINK-40505: killed subtask {holder} at low START+{before - START} ms; the low watermark "
        f"passed split 1's start (START+{low - START} ms) {jumped_s:.1f} s later (session timeout 3 s)"
    )


# -- FLINK-37399: a lagging split catches up at full speed ---------------------------------


async def test_flink_37399_a_lagging_split_reads_at_full_speed_while_the_others_are_paused(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """One reader (400 records/s), two unbounded splits, split 1 10 s of event time ahead.
    Alignment pauses split 1 while split 0 catches up; split 0 must then get the reader's
    whole rate, not its half share. Compared in one run: split 0's records/s while split 1
    is paused against the reader's total records/s once both read."""
    rate = 400
    options = {"splits": "2", "records_per_split": "unbounded", "rate": str(rate), "split_time_offset_ms": "10000"}
    start_coordinator(procs, unique_source, 1, options, drift_ms=1000)
    readers, outs = start_readers(procs, unique_source, 1, options, tmp_path)
    samples: list[tuple[float, int, int]] = []

    async def sampled_both_phases() -> bool:
        assert readers[0].returncode is None, readers[0].tail()
        counts = Counter(r["split_id"] for r in output_records(*outs))
        samples.append((time.monotonic(), counts["seq-00000"], counts["seq-00001"]))
        paused = _paused_window(samples)
        return paused is not None and samples[-1][0] - samples[paused[1]][0] >= 3.0

    await poll_until(sampled_both_phases, 40, "split 1 paused, then resumed for 3 s", poll_s=0.25)
    window = _paused_window(samples)
    assert window is not None
    first, last = window
    (t0, a0, _), (t1, a1, _) = samples[first], samples[last]
    catch_up = (a1 - a0) / (t1 - t0)
    (u0, b0, c0), (u1, b1, c1) = samples[last + 2], samples[-1]  # from a sample after split 1 resumed
    both = (b1 + c1 - b0 - c0) / (u1 - u0)
    readers[0].request_stop()
    await all_exit_ok(procs, readers, 30)
    await clean_audit(kafka_bootstrap, unique_source)
    print(
        f"FLINK-37399: split 0 alone {catch_up:.0f} records/s over {t1 - t0:.1f} s; "
        f"both splits {both:.0f} records/s over {u1 - u0:.1f} s (rate {rate})"
    )
    assert catch_up >= 0.75 * both, f"the lagging split read at {catch_up:.0f}/s, the reader at {both:.0f}/s"


def _paused_window(samples: list[tuple[float, int, int]]) -> tuple[int, int] | None:
    """The first run of samples (first, last index) of at least 1.5 s in which split 1
    did not move while split 0 did, once it is over (split 1 moved again)."""
    first: int | None = None
    for i in range(1, len(samples)):
        still = samples[i][2] == samples[i - 1][2] and samples[i][2] > 0
        if still and first is None:
            first = i - 1
        elif not still and first is not None:
            if samples[i - 1][0] - samples[first][0] >= 1.5 and samples[i - 1][1] > samples[first][1]:
                return first, i - 1
            first = None
    return None


# -- Spark: FLINK-32414 and FLINK-35157 with the Spark host --------------------------------


@pytest.mark.spark
def test_spark_flink_32414_35157_a_subtask_without_a_split_and_finished_subtasks_do_not_hold_alignment_back(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """The Spark host, one driver for all subtasks: parallelism 3 over 2 skewed bounded
    splits with the coordinator's alignment on. Subtask 2 never gets a split, the subtask
    of the behind split finishes first; an availableNow query must still read every row
    once and end, with the ahead split paused by the announced bound on the way."""
    pytest.importorskip("pyspark")
    from sluicegate.spark.job import spark_session

    records = 3000
    options = {"splits": "2", "records_per_split": str(records), "split_time_offset_ms": "15000"}
    start_coordinator(procs, unique_source, 3, options, drift_ms=1000)
    spark = spark_session("sluicegate-alignment-bugs", quiet=True)
    try:
        reader = spark.readStream.format("sluicegate").option("source", unique_source).option("parallelism", "3")
        reader = reader.option("kafka.bootstrap.servers", kafka_bootstrap).option("maxRecordsPerTrigger", "500")
        reader = reader.option("heartbeatIntervalMs", "200")
        for key, value in options.items():
            reader = reader.option(f"option.{key}", value)
        started = time.monotonic()
        query = (
            reader.load()
            .writeStream.format("memory")
            .queryName("alignment_bugs")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the availableNow query did not end"
        took = time.monotonic() - started
        assert query.exception() is None, query.exception()
        rows = spark.sql("select value, count(*) as n from alignment_bugs group by value").collect()
    finally:
        spark.stop()
    counts = {int(row["value"]): int(row["n"]) for row in rows}
    assert set(counts) == expected_values(2, records) and set(counts.values()) == {1}
    lows = [m["body"] for m in asyncio.run(announcements(kafka_bootstrap, unique_source))]
    bounds = [b["max_allowed_watermark"] for b in lows if b["max_allowed_watermark"] is not None]
    assert bounds and min(bounds) < START + 15_000, "the ahead split was never held back by a bound"
    low = max(b["low_watermark"] for b in lows if b["low_watermark"] is not None)
    assert low > START + (records - 1) * EVENT_MS, f"the low watermark stuck at START+{low - START}"
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert result.ok, result.first_violation
    print(f"Spark FLINK-32414/35157: {2 * records} rows over 3 subtasks in {took:.1f} s; low START+{low - START} ms")


# -- Spark: FLINK-32496 with the Spark host ------------------------------------------------


@pytest.mark.spark
def test_spark_flink_32496_alignment_with_an_idle_split_goes_on_and_the_split_resumes(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    """The Spark host, parallelism 2 over two splits at the same event times, alignment on;
    split 0 has nothing past 300 records for 8 s. With splitIdleTimeoutMs 1000 the driver
    counts split 0 idle once its planned position stops moving, so the low watermark
    follows split 1 far past the stall point while split 0 is still quiet; then split 0
    reads on and every row arrives once."""
    pytest.importorskip("pyspark")
    from sluicegate.spark.job import spark_session

    records, stall_at, stall_ms = 1500, 300, 8000
    options = {
        "splits": "2",
        "records_per_split": str(records),
        "stall_split": "0",
        "stall_at": str(stall_at),
        "stall_ms": str(stall_ms),
    }
    start_coordinator(procs, unique_source, 2, options)
    spark = spark_session("sluicegate-alignment-idleness", quiet=True)
    try:
        reader = spark.readStream.format("sluicegate").option("source", unique_source).option("parallelism", "2")
        reader = reader.option("kafka.bootstrap.servers", kafka_bootstrap).option("maxRecordsPerTrigger", "200")
        reader = reader.option("heartbeatIntervalMs", "200").option("splitIdleTimeoutMs", "1000")
        for key, value in options.items():
            reader = reader.option(f"option.{key}", value)
        query = (
            reader.load()
            .writeStream.format("memory")
            .queryName("alignment_idleness")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            stall_point = START + (stall_at - 1) * EVENT_MS
            low = asyncio.run(
                low_past(
                    kafka_bootstrap, unique_source, stall_point + 3 * DRIFT_MS, 60, "the low watermark past the stall"
                )
            )
            split0 = spark.sql(f"select count(*) from alignment_idleness where value < {records}").collect()[0][0]
            assert split0 <= stall_at, f"split 0 read {split0} rows: past its stall point before the low watermark"
            deadline = time.monotonic() + 60
            while spark.sql("select count(*) from alignment_idleness").collect()[0][0] < 2 * records:
                assert time.monotonic() < deadline, "not every row arrived"
                assert query.exception() is None, query.exception()
                time.sleep(0.5)
        finally:
            query.stop()
        rows = spark.sql("select value, count(*) as n from alignment_idleness group by value").collect()
    finally:
        spark.stop()
    counts = {int(row["value"]): int(row["n"]) for row in rows}
    assert set(counts) == expected_values(2, records) and set(counts.values()) == {1}
    result = asyncio.run(run_audit(kafka_bootstrap, unique_source))
    assert result.ok, result.first_violation
    print(f"Spark FLINK-32496: low START+{low - START} ms while split 0 was quiet at {split0} rows")
