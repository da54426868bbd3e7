"""The ``kafka`` connector over real Kafka and real processes: a coordinator process
and ``sluicegate reader`` processes with the exactly-once ``kafka:OUT`` output.

The oracle of every test is the input itself: each record the test produces is
known by (partition, offset), key and value, and reading OUT ``read_committed``
must give every one of them exactly once. The audit of the control topics is
clean in every test.

The helpers are in tests/support/kafka_data.py, shared with test_kafka_recovery.py (FLIP-537).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import NewPartitions
from kafka_data import (
    COORDINATOR_TIMEOUTS,
    KILLS,
    PARTITIONS,
    READERS,
    RECORDS,
    SEED_ENV,
    BackgroundWriter,
    DataWriter,
    Expected,
    OutputReader,
    TransactionalWriter,
    admin,
    audit_ok,
    audit_ok_once_epochs_are,
    check_exactly_once,
    coordinator_args,
    create_topic,
    delete_topic,
    kafka_options,
    of_type,
    reader_args,
    readers_messages,
    split_ids,
    start_coordinator,
    start_reader,
)
from local_http import free_port
from processes import ProcessGroup

from sluicegate.api.source import INPUT_WAIT_S

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]


def test_a_topic_is_copied_exactly_once_through_reader_kills(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """8 partitions, 400k records, a bounded source read by 4 reader processes into OUT
    through a user function (record_functions.as_envelope_paced: it writes each record's
    position and content as JSON); readers are SIGKILLed at random instants (seeded:
    SLUICEGATE_KAFKA_SEED replays the schedule) and started again after a random short
    delay. OUT read_committed holds the function of every input record exactly once."""
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    print(f"seed: {seed} (set {SEED_ENV}={seed} to replay the schedule)")
    rng = random.Random(seed)
    source = unique_source
    data, out = f"{source}.in", f"{source}.out"
    create_topic(kafka_bootstrap, data, PARTITIONS)
    create_topic(kafka_bootstrap, out, PARTITIONS)
    writer = DataWriter(kafka_bootstrap, data, PARTITIONS)
    # Twice the other tests' records: the 5 kills come within 4 s, and 200k records were
    # once copied before the last one could find a reader still reading (4 of 5 kills).
    records = 2 * RECORDS
    writer.produce(records // PARTITIONS)
    writer.flush()
    assert len(writer.expected) == records

    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest")
    start_coordinator(procs, source, READERS, options, *COORDINATOR_TIMEOUTS)
    current = {k: start_reader(procs, source, k, options, out, process="as_envelope_paced") for k in range(READERS)}
    for reader in current.values():
        reader.wait_for_log("got 2 splits", timeout_s=60)
    started = time.monotonic()
    output = OutputReader(kafka_bootstrap, out)
    kills = 0
    restarts: list[tuple[float, int]] = []
    draws = [rng.randrange(READERS) for _ in range(KILLS)]
    # Dense enough that all KILLS land while the copy runs (a few seconds).
    delays = [rng.uniform(0.2, 1.5) for _ in range(KILLS)]  # until the victim is started again
    gaps = [rng.uniform(0.2, 0.8) for _ in range(KILLS)]  # until the next kill
    next_kill = started + rng.uniform(0.2, 0.8)
    try:
        while True:
            now = time.monotonic()
            waiting = {k for _, k in restarts}
            for subtask, reader in current.items():
                code = reader.returncode
                assert subtask in waiting or code in (None, 0), f"{reader.name} exited with {code}:\n{reader.tail()}"
            if restarts and restarts[0][0] <= now:
                _, subtask = restarts.pop(0)
                current[subtask] = start_reader(procs, source, subtask, options, out, process="as_envelope_paced")
                print(f"{now - started:6.1f} s  started {current[subtask].name}")
                continue
            if kills < KILLS and now >= next_kill:
                # a reader that is reading (it was given splits), the drawn one or the next;
                # the first victim one that has checkpointed, so that its restart has a
                # checkpoint to restore (a schedule that killed every victim in the first
                # second, seed 184890961, left none)
                reading = [
                    k
                    for k, r in current.items()
                    if k not in waiting
                    and r.returncode is None
                    and r.lines_with(" splits (seq ")
                    and (kills > 0 or r.lines_with("sluicegate.reader: checkpoint "))
                ]
                if reading:
                    victim = min(reading, key=lambda k: (k - draws[kills]) % READERS)
                    current[victim].kill()
                    restarts.append((now + delays[kills], victim))
                    restarts.sort()
                    print(f"{now - started:6.1f} s  SIGKILL {current[victim].name} (subtask {victim})")
                    kills += 1
                    next_kill = now + gaps[kills - 1]
                    continue
            if not restarts and all(r.returncode == 0 for r in current.values()):
                break
            assert now - started < 120, "the readers did not finish within 120 s:\n" + procs.describe()
            time.sleep(0.05)
        print(f"{time.monotonic() - started:6.1f} s  every reader finished after {kills} kills")
        output.read_all()
    finally:
        output.close()
    check_exactly_once(output.rows, writer.expected)

    assert kills == KILLS, f"the readers finished after {kills} kills: the schedule is too slow"

    summary = audit_ok(kafka_bootstrap, source)
    assert summary.splits_finished == PARTITIONS and summary.splits_owned == 0
    registered: Counter[int] = Counter()
    for proc in procs.procs:
        if proc.name.startswith("reader-"):
            registered[int(proc.name.split("-")[1])] += len(proc.lines_with("registered as attempt"))
    assert {s.subtask: s.attempts for s in summary.subtasks} == dict(registered)
    assert sum(registered.values()) >= READERS + KILLS, "every victim had registered; each restart did"
    # A restart restores its subtask's last checkpoint; whether that still holds splits to
    # report (FLIP-537, test_kafka_recovery.py) depends on how far the victim had read, and
    # whether the coordinator keeps them on how long the restart took (a loaded machine
    # restarts past the session timeout): neither is this test's to fix.
    restored = [p.name for p in procs.procs if p.lines_with("restored checkpoint")]
    print(f"attempts per subtask {dict(registered)}; {len(restored)} restarts restored a checkpoint")
    assert restored, "no restarted reader restored a checkpoint"


# -- 2: bad settings and an unreachable data cluster ---------------------------------------


def test_bad_options_stop_the_coordinator_and_the_reader_at_start_naming_the_option(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    source = unique_source
    good = kafka_options(kafka_bootstrap, topics=f"{source}.in")
    cases = [
        ("topicz", {**good, "topicz": "x"}),
        ("topics", {**good, "topic_pattern": "x.*"}),
        ("starting_offsets", {**good, "starting_offsets": "yesterday"}),
        ("kafka.no.such.setting", {**good, "kafka.no.such.setting": "1"}),
        ("kafka.isolation.level", {**good, "kafka.isolation.level": "read_uncommitted"}),
    ]
    started = []
    for i, (setting, options) in enumerate(cases):
        started.append((setting, procs.start(f"coordinator-bad-{i}", coordinator_args(source, 2, options))))
        started.append((setting, procs.start(f"reader-bad-{i}", reader_args(source, 0, options, f"{source}.out"))))
    for setting, proc in started:
        code = proc.wait(60)
        log = proc.log()
        assert code == 2, f"{proc.args}: exit {code}\n{log}"
        assert f"invalid setting {setting!r}" in log, f"{proc.name}: the error does not name {setting}:\n{log}"
        assert "Traceback" not in log, log
    # nothing was started: the coordinator did not even create the control topics
    topics = admin(kafka_bootstrap).list_topics(timeout=10).topics
    assert not [t for t in topics if source in t]


class TcpForwarder:
    """Forwards 127.0.0.1:``port`` to ``target`` once started: the data cluster at an
    address where nothing answers, until the test lets it answer."""

    def __init__(self, port: int, target: str) -> None:
        self.port = port
        host, _, target_port = target.rpartition(":")
        self._target = (host, int(target_port))
        self._server: socket.socket | None = None
        self._closed = False

    def start(self) -> None:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()


def test_a_data_cluster_that_never_answers_ends_the_coordinator_naming_it(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """The data cluster's address answers nothing at the source's first start: more often a
    wrong address than an outage, so the coordinator exits 2 within the input wait, naming
    the cluster and the option (issue 24 item 2)."""
    cluster = f"127.0.0.1:{free_port()}"
    options = kafka_options(cluster, topics=f"{unique_source}.in", stopping_offsets="latest")
    started = time.monotonic()
    coordinator = procs.run("coordinator", coordinator_args(unique_source, 1, options), timeout_s=120)
    took = time.monotonic() - started
    said = " ".join(coordinator.log().split())
    assert coordinator.returncode == 2, said
    assert INPUT_WAIT_S <= took < INPUT_WAIT_S + 45, f"took {took:.1f} s"
    assert f"data cluster at {cluster}" in said and "check `bootstrap_servers`" in said, said
    assert said.count("waiting up to") == 1  # the wait is said once, not per attempt


def test_a_data_cluster_that_answers_late_is_waited_for_and_read_exactly_once(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """The data cluster answers a few seconds after the coordinator starts (a broker still
    starting): the coordinator says it waits, once, then serves; a reader copies the
    (bounded) topic exactly once and nothing crashes."""
    source = unique_source
    data, out = f"{source}.in", f"{source}.out"
    create_topic(kafka_bootstrap, data, 2)
    create_topic(kafka_bootstrap, out, 2)
    writer = DataWriter(kafka_bootstrap, data, 2)
    writer.produce(1000)
    writer.flush()
    port = free_port()
    cluster = f"127.0.0.1:{port}"
    options = kafka_options(cluster, topics=data, stopping_offsets="latest")
    coordinator = procs.start("coordinator", coordinator_args(source, 1, options))
    coordinator.wait_for_log("waiting up to", timeout_s=60)
    assert f"data cluster at {cluster}" in " ".join(coordinator.log().split())  # the log wraps long lines
    forwarder = TcpForwarder(port, kafka_bootstrap)
    forwarder.start()
    try:
        coordinator.wait_for_log("is serving", timeout_s=60)
        reader = start_reader(procs, source, 0, options, out)
        coordinator.wait_for_log("discovered 2 partitions", timeout_s=40)
        assert reader.wait(60) == 0, reader.tail()
    finally:
        forwarder.close()
    assert coordinator.returncode is None
    assert "Traceback" not in coordinator.log()
    output = OutputReader(kafka_bootstrap, out)
    try:
        check_exactly_once(output.read_all(), writer.expected)
    finally:
        output.close()
    summary = audit_ok(kafka_bootstrap, source)
    assert summary.splits_finished == 2


# -- 3: gaps that are not data loss --------------------------------------------------------


def test_transactional_and_compacted_topics_are_read_exactly_once_across_offset_gaps(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """One bounded source over two topics. TX was written in transactions, some aborted
    (the last one too, so its partitions end with aborted records and a marker); CMP is
    compacted (the log cleaner has removed old values of its keys before the readers
    start). Only committed records are read, once each; the gaps in the offsets are not
    data loss: both readers finish."""
    source = unique_source
    tx, cmp_, out = f"{source}.tx", f"{source}.cmp", f"{source}.out"
    create_topic(
        kafka_bootstrap,
        cmp_,
        2,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    compacted = DataWriter(kafka_bootstrap, cmp_, 2)
    for _ in range(5):  # five versions of each key, in segments of their own
        compacted.produce(200, key=lambda partition, n: f"key-{partition}-{n % 200}")
        compacted.flush()
        time.sleep(0.2)
    compacted.produce(1, key=lambda partition, n: "last")  # rolls the last full segment
    compacted.flush()
    produced = dict(compacted.expected)
    latest: dict[tuple[int, str | None], tuple[str, int, int]] = {}
    for where in sorted(produced):
        latest[(where[1], produced[where][0])] = where

    create_topic(kafka_bootstrap, tx, 4)
    create_topic(kafka_bootstrap, out, 4)
    transactions = TransactionalWriter(kafka_bootstrap, tx, 4)
    for per_partition, commit in ((300, True), (200, False), (300, True), (1, True), (100, False)):
        transactions.transaction(per_partition, commit)

    options = kafka_options(kafka_bootstrap, topics=f"{tx},{cmp_}", stopping_offsets="latest")
    start_coordinator(procs, source, 2, options)
    waited = time.monotonic()
    while len(_committed_offsets(kafka_bootstrap, cmp_)) >= len(produced):  # (the cleaner runs every 15 s)
        assert time.monotonic() < waited + 60, "the log cleaner did not compact CMP within 60 s"
        time.sleep(1.0)
    print(f"CMP compacted after {time.monotonic() - waited:.1f} s")
    readers = [start_reader(procs, source, k, options, out) for k in range(2)]
    assert [r.wait(60) for r in readers] == [0, 0], procs.describe()

    rows = OutputReader(kafka_bootstrap, out)
    try:
        all_rows = rows.read_all()
    finally:
        rows.close()
    check_exactly_once([r for r in all_rows if r["value"]["topic"] == tx], transactions.expected)
    assert len(transactions.expected) == 4 * 601
    compacted_rows = [r for r in all_rows if r["value"]["topic"] == cmp_]
    copies = Counter((r["value"]["topic"], r["value"]["partition"], r["value"]["offset"]) for r in compacted_rows)
    assert max(copies.values()) == 1, "a compacted record was written twice"
    for row in compacted_rows:
        value = row["value"]
        where = (value["topic"], value["partition"], value["offset"])
        assert produced.get(where) == (value["key"], value["value"]), row
    assert set(latest.values()) <= copies.keys(), "the latest value of a key is missing"
    assert len(copies) < len(produced), "CMP was read before it was compacted: no gap was crossed"
    summary = audit_ok(kafka_bootstrap, source)
    assert summary.splits_finished == 6 and summary.splits_owned == 0


def _committed_offsets(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of every record of ``topic`` now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluicegate-test-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        found: set[tuple[int, int]] = set()
        at_end: set[int] = set()
        while len(at_end) < partitions:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error() is None:
                    found.add((message.partition(), message.offset()))
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
        return found
    finally:
        consumer.close()


# -- 4: a deleted topic ----------------------------------------------------------------------


def test_a_deleted_topic_of_a_pattern_source_ends_its_splits_with_a_warning(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """A topic_pattern source over topics a and b, discovery every second. Once b is
    copied it is deleted while the readers run: the coordinator warns once, b-1's owner
    ends it with a warning, and a keeps being copied. b-0's owner was SIGKILLed just
    before and misses the announcement; started again, it reports b-0, which the
    enumerator ends instead of handing it out again (no consumer error would ever end
    it). A topic c created later is discovered and copied from its first offset.
    Nothing crashes."""
    source = unique_source
    a, b, c, out = (f"{source}.in.{name}" for name in ("a", "b", "c", "out"))
    for topic in (a, b):
        create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, out, 2)
    writer_b = DataWriter(kafka_bootstrap, b, 2)
    writer_b.produce(300)
    writer_b.flush()
    writer_a = DataWriter(kafka_bootstrap, a, 2)
    writer_a.produce(300)
    writer_a.flush()
    pattern = re.escape(source) + r"\.in\.[a-z]"
    options = kafka_options(kafka_bootstrap, pattern=pattern, partition_discovery_interval_ms="1000")
    coordinator = start_coordinator(procs, source, 2, options, "--session-timeout-ms", "3000")
    background = BackgroundWriter(writer_a)
    output = OutputReader(kafka_bootstrap, out)
    readers = [start_reader(procs, source, k, options, out) for k in range(2)]
    everything: Expected = {}
    try:
        # a is written all along, so only b's own rows say that b is copied
        output.wait_for(len(writer_b.expected), 60, [coordinator, *readers], "(b)", lambda r: r["value"]["topic"] == b)
        owner = {
            split_id: m["subtask"]
            for m in of_type(readers_messages(kafka_bootstrap, source), "AddSplits")
            for split_id in split_ids(m)
        }
        missed, told = owner[f"{b}-0"], owner[f"{b}-1"]
        assert missed != told, f"set-up: one reader holds both of b's partitions: {owner}"
        readers[missed].kill()  # b-0 is in its last checkpoint: OUT holds all of b
        delete_topic(kafka_bootstrap, b)
        coordinator.wait_for_log("partitions deleted from the data cluster", timeout_s=30)
        readers[told].wait_for_log(f"partitions ['{b}-1'] were deleted from the data cluster", timeout_s=30)
        readers[missed] = start_reader(procs, source, missed, options, out)
        readers[missed].wait_for_log("restored splits to the coordinator", timeout_s=60)
        coordinator.wait_for_log(f"came back from subtask {missed} and end: ['{b}-0']", timeout_s=30)
        create_topic(kafka_bootstrap, c, 2)
        writer_c = DataWriter(kafka_bootstrap, c, 2)
        writer_c.produce(200)
        writer_c.flush()
        coordinator.wait_for_log(f"discovered 2 partitions ({c}-0", timeout_s=30)
        time.sleep(3)  # three more discoveries: the deletion is not announced again
        everything = {**writer_b.expected, **writer_c.expected, **background.stop()}
        output.wait_for(len(everything), 60, [coordinator, *readers], "(a, b and c)")
        time.sleep(1.0)
        rows = output.read_all()
    finally:
        output.close()
        background.stop()
    check_exactly_once(rows, everything)
    for proc in (coordinator, *readers):
        assert proc.returncode is None, f"{proc.name} exited:\n{proc.tail()}"
        assert "Traceback" not in proc.log(), proc.log()
    warned = coordinator.lines_with("partitions deleted from the data cluster")
    assert len(warned) == 1, "\n".join(warned)
    assert f"{b}-0" in warned[0] and f"{b}-1" in warned[0]
    assert not readers[missed].lines_with(f"{b}-0"), "the restarted reader was given the deleted b-0"
    messages = readers_messages(kafka_bootstrap, source)
    removed = [m for m in of_type(messages, "SourceEvent") if m["body"]["payload"]["type"] == "partitions_removed"]
    assert removed and all(split_ids({"body": m["body"]["payload"]}) == {f"{b}-0", f"{b}-1"} for m in removed)
    again = [m for m in of_type(messages, "AddSplits") if m["cseq"] > removed[0]["cseq"] and b in str(split_ids(m))]
    assert not again, f"splits of the deleted topic were handed out again: {again}"
    summary = audit_ok(kafka_bootstrap, source)
    assert summary.splits_finished == 1 and summary.splits_assigned == 6
    assert summary.splits_owned == 4, "a, c (and not b) are owned"


# -- 5: a bounded source across a coordinator failover --------------------------------------


def test_a_bounded_source_ends_after_a_coordinator_failover_that_finds_a_new_partition(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup
) -> None:
    """The coordinator is SIGKILLed while two readers copy a bounded topic, a partition
    is added to the topic, and a successor takes over. Its enumerator discovers once
    more at start: the new partition is not part of the bounded read (in an
    uninterrupted run it would never have been found), so the readers finish, are never
    reset, and OUT holds exactly the records below the stop offsets."""
    source = unique_source
    data, out = f"{source}.in", f"{source}.out"
    create_topic(kafka_bootstrap, data, 2)
    create_topic(kafka_bootstrap, out, 2)
    writer = DataWriter(kafka_bootstrap, data, 2)
    writer.produce(30_000)
    writer.flush()
    expected = dict(writer.expected)
    options = kafka_options(kafka_bootstrap, topics=data, stopping_offsets="latest")
    first = start_coordinator(procs, source, 2, options, *COORDINATOR_TIMEOUTS)
    readers = [start_reader(procs, source, k, options, out) for k in range(2)]
    for reader in readers:
        reader.wait_for_log("checkpoint 1:", timeout_s=60)
    first.kill()
    client = admin(kafka_bootstrap)
    for future in client.create_partitions([NewPartitions(data, 3)]).values():
        future.result(30)
    later = DataWriter(kafka_bootstrap, data, 3)
    later.produce(100)
    later.flush()
    assert any(partition == 2 for _, partition, _ in later.expected)
    successor = start_coordinator(procs, source, 2, options, *COORDINATOR_TIMEOUTS)
    assert "epoch 2" in successor.lines_with("is serving")[0], successor.tail()
    assert [r.wait(60) for r in readers] == [0, 0], procs.describe()
    assert successor.lines_with("partitions created after the first discovery are not read")

    output = OutputReader(kafka_bootstrap, out)
    try:
        check_exactly_once(output.read_all(), expected)
    finally:
        output.close()
    for reader in readers:
        assert len(reader.lines_with("registering subtask")) == 1, reader.tail()

    # The readers end without the successor (the first coordinator's NoMoreSplits is
    # enough); its answers to their leaving (SplitsReleased, epoch 2) may commit after
    # they exit, so the audit waits for them.
    summary = audit_ok_once_epochs_are(kafka_bootstrap, source, [1, 2])
    assert summary.splits_assigned == 2 and summary.splits_finished == 2 and summary.splits_owned == 0
