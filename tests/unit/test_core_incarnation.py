"""Protocol v4: reader messages carry their incarnation, so a reader configured with another
subtask's number cannot act for that subtask's attempt even when the attempt numbers match."""

from __future__ import annotations

import dataclasses

from core_harness import CoreHarness, sequence_source

from sluicegate.protocol import Heartbeat, SplitsFinished, decode, encode
from sluicegate.protocol.messages import Direction


def two_readers() -> CoreHarness:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=2)
    h.register(0)
    h.register(1)
    assert h.reader(0).attempt == h.reader(1).attempt == 1  # attempts alone cannot tell them apart
    return h


def test_a_message_naming_another_incarnation_is_dropped_and_counted() -> None:
    h = two_readers()
    theirs = sorted(h.owned(1))
    sent_before = len(h.sent)
    wrong = h.envelope(1, SplitsFinished(split_ids=theirs), 1)
    assert not h.feed(dataclasses.replace(wrong, incarnation=h.reader(0).incarnation))
    assert h.counters["foreign_incarnation_messages"] == 1
    assert h.owned(1) == set(theirs) and len(h.sent) == sent_before
    # the same message from the attempt's own incarnation is applied
    h.feed(dataclasses.replace(wrong, incarnation=h.reader(1).incarnation))
    assert h.owned(1) == set()


def test_a_v3_message_without_incarnation_is_checked_on_the_attempt_alone() -> None:
    h = two_readers()
    theirs = sorted(h.owned(1))
    h.feed(h.envelope(1, SplitsFinished(split_ids=theirs), 1))
    assert h.owned(1) == set() and h.counters.get("foreign_incarnation_messages", 0) == 0


def test_the_incarnation_survives_the_codec_and_old_records_stay_readable() -> None:
    h = two_readers()
    env = dataclasses.replace(h.envelope(0, Heartbeat(watermark=5, idle=False), 1), incarnation="inc-x")
    assert decode(encode(env), Direction.TO_COORDINATOR).incarnation == "inc-x"
    v3 = dataclasses.replace(env, v=3, incarnation=None)
    decoded = decode(encode(v3), Direction.TO_COORDINATOR)
    assert decoded.v == 3 and decoded.incarnation is None
