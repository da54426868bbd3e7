"""How far Spark's driver lets a Kafka partition be read, and what an end says about data
loss (readable_end.py): Spark's rules, as KafkaMicroBatchSourceSuite states them."""

from __future__ import annotations

import logging

import pytest

from sluicegate_connectors.kafka.readable_end import PartitionLostError, ReadableEnds

KEY = ("orders", 0)


def test_a_stream_reads_to_the_end_found_each_time() -> None:
    ends = ReadableEnds(fail_on_data_loss=True)
    assert ends.end(KEY, 3, 10, gone=False, now_ms=1_000) == 10
    assert ends.end(KEY, 10, 15, gone=False, now_ms=1_100) == 15
    assert ends.end(KEY, 15, None, gone=False, now_ms=1_200) == 15, "an end not known yet: nothing to read"


def test_an_end_below_the_position_fails_the_query_with_fail_on_data_loss() -> None:
    # the topic deleted and created again with fewer records (the suite's "was changed from 2 to 1")
    with pytest.raises(PartitionLostError, match="orders-0 ends at offset 1, before offset 2 this query read to"):
        ReadableEnds(fail_on_data_loss=True).end(KEY, 2, 1, gone=False, now_ms=1_000)


def test_without_fail_on_data_loss_the_split_reads_on_from_the_new_end_and_it_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Spark's source: the batch that finds the partition shorter ends at its new end."""
    ends = ReadableEnds(fail_on_data_loss=False)
    with caplog.at_level(logging.WARNING, "sluicegate.connectors.kafka"):
        assert ends.end(KEY, 5, 1, gone=False, now_ms=1_000) == 1
        assert ends.end(KEY, 5, 1, gone=False, now_ms=1_100) == 1
    said = [r.getMessage() for r in caplog.records if "data loss: orders-0 ends at offset 1" in r.getMessage()]
    assert len(said) == 1 and "reads on from offset 1" in said[0]
    assert ends.end(KEY, 1, 4, gone=False, now_ms=1_200) == 4, "then reads what the new partition gets"


def test_a_partition_gone_from_the_cluster_is_data_loss() -> None:
    with pytest.raises(PartitionLostError, match="orders-0 is gone from the data cluster"):
        ReadableEnds(fail_on_data_loss=True).end(KEY, 2, None, gone=True, now_ms=1_000)
    assert ReadableEnds(fail_on_data_loss=False).end(KEY, 2, None, gone=True, now_ms=1_000) == 2, "waits"


def test_an_available_now_run_reads_to_the_ends_it_found_when_it_began() -> None:
    ends = ReadableEnds(fail_on_data_loss=True)
    started = 5_000  # every planning of the run asks at its start
    assert ends.end(KEY, 0, 10, gone=False, now_ms=started) == 10
    assert ends.end(KEY, 5, 30, gone=False, now_ms=started) == 10, "records written since are the next run's"
    assert ends.end(("orders", 1), 0, 7, gone=False, now_ms=started) == 7, "a split first planned later: its end then"
    assert ends.end(KEY, 10, 30, gone=False, now_ms=9_000) == 30, "the next run: to the end it finds"


def test_an_available_now_run_fails_when_a_partition_ends_below_its_end_or_goes_whatever_data_loss_says() -> None:
    for fail_on_data_loss in (True, False):
        ends = ReadableEnds(fail_on_data_loss)
        ends.end(KEY, 0, 3, gone=False, now_ms=5_000)
        with pytest.raises(
            PartitionLostError, match=r"ends at offset 2 now, before the end 3 this Trigger\.AvailableNow"
        ):
            ends.end(KEY, 1, 2, gone=False, now_ms=5_000)
        with pytest.raises(PartitionLostError, match=r"during a Trigger\.AvailableNow run that planned to read it"):
            ends.end(KEY, 1, None, gone=True, now_ms=5_000)
