"""The reader host's transaction as a state machine (reader/checkpoint_txn.py), driven by
an in-memory producer: a commit, a failed commit, a twin that took the transactional id,
and a broker that lost the transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import IllegalOperation, KafkaConnectionError, ProducerFenced

from sluicegate.reader.checkpoint_txn import CheckpointTxn, ReaderTakenOver, TxnRecord, TxnState


class MemoryProducer:
    """Records what reaches the 'broker': committed transactions, and what was aborted."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.started = self.stopped = False
        self.open: list[TxnRecord] | None = None

    async def start(self) -> None:
        if self.broker.down:
            raise KafkaConnectionError("broker down")
        self.broker.epoch += 1  # init_transactions: fences every earlier producer of the id
        self.epoch = self.broker.epoch
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def _check(self) -> None:
        if self.epoch != self.broker.epoch:
            raise ProducerFenced()

    async def begin_transaction(self) -> None:
        if self.open is not None:
            raise IllegalOperation("a transaction is already open")
        self._check()
        self.open = []

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:
        assert self.open is not None, "send outside a transaction"
        self.open.append(TxnRecord(topic, value or b"", key, partition, tuple(headers or ())))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def commit_transaction(self) -> None:
        self._check()
        if self.broker.fail_commits:
            self.broker.fail_commits -= 1
            raise KafkaConnectionError("commit lost")
        assert self.open is not None
        self.broker.committed.append(self.open)
        self.open = None

    async def abort_transaction(self) -> None:
        self._check()
        if self.broker.lost_transactions:
            raise KafkaConnectionError("the broker does not know this transaction any more")
        self.broker.aborted.append(self.open or [])
        self.open = None


class MemoryBroker:
    def __init__(self) -> None:
        self.epoch = 0
        self.down = False
        self.fail_commits = 0
        self.lost_transactions = False
        self.committed: list[list[TxnRecord]] = []
        self.aborted: list[list[TxnRecord]] = []
        self.producers: list[MemoryProducer] = []

    def new_producer(self) -> MemoryProducer:
        producer = MemoryProducer(self)
        self.producers.append(producer)
        return producer


async def _stop(producer: Any) -> None:
    await producer.stop()


def txn_of(broker: MemoryBroker) -> CheckpointTxn:
    return CheckpointTxn(broker.new_producer, lambda: ReaderTakenOver("taken over: subtask 0"), _stop, retry_s=0.0)


def state(txn: CheckpointTxn) -> TxnState:
    """Read anew each time (mypy would keep the first assert's narrowing)."""
    return txn.state


STATE = TxnRecord("ns.s.reader-state", b"checkpoint", b"0", 0)
ACK = TxnRecord("ns.s.coordinator", b"ack", b"0")


async def test_a_commit_sends_everything_in_one_transaction_and_goes_back_to_idle() -> None:
    broker = MemoryBroker()
    txn = txn_of(broker)
    await txn.start()
    await txn.open()  # an output writes into the open transaction ...
    await txn.producer.send("out", b"row")
    await txn.commit([STATE, ACK])  # ... and the checkpoint commits with it
    assert broker.committed == [[TxnRecord("out", b"row"), STATE, ACK]]
    assert state(txn) is TxnState.IDLE
    await txn.commit([STATE])
    assert len(broker.committed) == 2


async def test_a_failed_commit_aborts_raises_and_the_next_one_starts_clean() -> None:
    broker = MemoryBroker()
    txn = txn_of(broker)
    await txn.start()
    broker.fail_commits = 1
    with pytest.raises(KafkaConnectionError):
        await txn.commit([STATE, ACK])
    assert broker.aborted == [[STATE, ACK]] and broker.committed == []
    assert state(txn) is TxnState.IDLE
    await txn.commit([STATE])
    assert broker.committed == [[STATE]]


async def test_a_twin_that_took_the_id_is_taken_over_once_and_nothing_more_is_tried() -> None:
    broker = MemoryBroker()
    txn = txn_of(broker)
    await txn.start()
    await txn.open()
    twin = txn_of(broker)
    await twin.start()  # another process of this subtask: init_transactions fences us
    with pytest.raises(ReaderTakenOver):
        await txn.commit([STATE])
    assert state(txn) is TxnState.FENCED and broker.aborted == []  # no abort through a fenced producer
    with pytest.raises(ReaderTakenOver):
        await txn.open()
    await txn.renew()  # the host decided to take the subtask back
    assert state(txn) is TxnState.IDLE and broker.producers[0].stopped
    await txn.commit([STATE])
    assert broker.committed == [[STATE]]
    with pytest.raises(ReaderTakenOver):
        await twin.commit([ACK])  # and now the twin is the zombie


def test_only_fences_count_as_taken_over() -> None:
    txn = txn_of(MemoryBroker())
    txn.raise_if_fenced(KafkaConnectionError("down"))  # not a fence: returns
    assert state(txn) is TxnState.IDLE
    with pytest.raises(ReaderTakenOver):
        txn.raise_if_fenced(IllegalOperation("left its transaction"))
    assert state(txn) is TxnState.FENCED


async def test_a_transaction_the_broker_lost_renews_the_producer_once_it_answers() -> None:
    broker = MemoryBroker()
    txn = txn_of(broker)
    await txn.start()
    await txn.open()
    broker.lost_transactions = True
    broker.down = True  # the new producer waits for the broker
    task = asyncio.create_task(txn.abort())
    await asyncio.sleep(0.01)
    assert not task.done()
    broker.down, broker.lost_transactions = False, False
    await asyncio.wait_for(task, 5)
    assert len(broker.producers) >= 2 and broker.producers[0].stopped
    assert state(txn) is TxnState.IDLE
    await txn.commit([STATE])
    assert broker.committed == [[STATE]]
