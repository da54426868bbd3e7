"""The user's function between reading and writing (reader/processing.py, reader/records.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.api.reader import Record
from sluicegate.reader.processing import (
    BatchFunction,
    ErrorHandling,
    ErrorPolicy,
    Identity,
    ProcessingFailed,
    RecordFunction,
    is_batch_function,
    load_function,
    processor_for,
)
from sluicegate.reader.records import OUTPUT_SCHEMA, Message, NotAnOutputBatch, messages, output_batch, records_batch

SPARK_KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


def kafka_batch(values: list[bytes | None], partition: int = 3) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k{i}".encode() if i % 2 else None for i in range(n)],
            "value": values,
            "topic": ["orders"] * n,
            "partition": [partition] * n,
            "offset": list(range(100, 100 + n)),
            "timestamp": [1_700_000_000_000_000 + i * 1000 for i in range(n)],
            "timestampType": [0] * n,
            "headers": [[{"key": "trace", "value": f"t{i}".encode()}] if i % 3 else None for i in range(n)],
        },
        schema=SPARK_KAFKA_SCHEMA,
    )


def rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    assert batch.schema == OUTPUT_SCHEMA
    return [
        (m.key, m.value, m.headers, m.timestamp_ms)
        for m in messages(batch)  # the same reading as the host's per-record path
    ]


# -- the two forms ----------------------------------------------------------------------


def batch_fn(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def record_fn(record: Message) -> Message:
    return record


def unannotated(record):  # type: ignore[no-untyped-def]
    return record


def test_the_first_parameter_annotation_decides_the_form() -> None:
    # this module uses `from __future__ import annotations`: the annotations are text
    assert is_batch_function(batch_fn)
    assert not is_batch_function(record_fn)
    assert not is_batch_function(unannotated)
    assert isinstance(processor_for(batch_fn), BatchFunction)
    assert isinstance(processor_for(record_fn), RecordFunction)
    assert isinstance(processor_for(None), Identity)
    with pytest.raises(ConfigError, match="takes no parameter"):
        is_batch_function(lambda: None)


def test_no_function_writes_key_value_headers_and_timestamp_as_read() -> None:
    batch = kafka_batch([b"a", None, b"c", b"d"])
    out = Identity().apply(batch)
    assert out.failures == []
    assert rows(out.batch) == [(m.key, m.value, m.headers, m.timestamp_ms) for m in messages(batch)]
    assert rows(out.batch)[2] == (None, b"c", (("trace", b"t2"),), 1_700_000_000_002)


# -- record functions -------------------------------------------------------------------


def test_a_record_function_maps_filters_and_flat_maps() -> None:
    def fn(record: Message) -> Any:
        if record.value == b"drop":
            return None
        if record.value == b"split":
            return [record.replace(value="x"), Message(value=b"y", key=b"new")]
        return record.replace(value={"v": (record.value or b"").decode()})

    out = processor_for(fn).apply(kafka_batch([b"a", b"drop", b"split"]))
    assert [(key, value) for key, value, _, _ in rows(out.batch)] == [
        (None, b'{"v":"a"}'),
        (None, b"x"),
        (b"new", b"y"),
    ]
    # a record the function made has no timestamp: the broker stamps it
    assert [t for _, _, _, t in rows(out.batch)] == [1_700_000_000_000, 1_700_000_000_002, None]


def failing_on_b(record: Message) -> Message:
    if record.value == b"b":
        raise ValueError("cannot parse b")
    return record


def test_fail_names_the_record_and_says_nothing_is_lost() -> None:
    with pytest.raises(ProcessingFailed) as failed:
        processor_for(failing_on_b).apply(kafka_batch([b"a", b"b", b"c"]))
    text = str(failed.value)
    assert "test_processing:failing_on_b failed on orders[3]@101: ValueError: cannot parse b" in text
    assert "restart reads it again" in text and "--on-process-error skip" in text


def test_skip_keeps_the_rest_and_reports_each_failed_record() -> None:
    processor = processor_for(failing_on_b, ErrorHandling(ErrorPolicy.SKIP))
    out = processor.apply(kafka_batch([b"a", b"b", b"c", b"b"]))
    assert [value for _, value, _, _ in rows(out.batch)] == [b"a", b"c"]
    assert [(f.record.offset, f.record.value, f.reason) for f in out.failures] == [
        (101, b"b", "ValueError: cannot parse b"),
        (103, b"b", "ValueError: cannot parse b"),
    ]


def test_a_wrong_return_is_a_failure_of_the_function() -> None:
    with pytest.raises(ProcessingFailed, match="returned dict: return a Message"):
        processor_for(lambda r: {"not": "a message"}).apply(kafka_batch([b"a"]))
    with pytest.raises(ProcessingFailed, match="holding str"):
        processor_for(lambda r: [r, "x"]).apply(kafka_batch([b"a"]))


def test_retry_tries_again_with_growing_waits_then_fails() -> None:
    waits: list[float] = []
    calls: list[bytes | None] = []

    def flaky(record: Message) -> Message:
        calls.append(record.value)
        if len(calls) < 3:
            raise ConnectionError("lookup down")
        return record

    processor = processor_for(flaky, ErrorHandling(ErrorPolicy.RETRY, retries=3, sleep=waits.append))
    out = processor.apply(kafka_batch([b"a"]))
    assert [value for _, value, _, _ in rows(out.batch)] == [b"a"]
    assert waits == [0.1, 0.2] and calls == [b"a"] * 3

    waits.clear()
    always = processor_for(failing_on_b, ErrorHandling(ErrorPolicy.RETRY, retries=2, sleep=waits.append))
    with pytest.raises(ProcessingFailed, match="cannot parse b"):
        always.apply(kafka_batch([b"b"]))
    assert waits == [0.1, 0.2]


# -- batch functions ----------------------------------------------------------------------


def upper(batch: pa.RecordBatch) -> pa.RecordBatch:
    values = batch.column("value")
    if pc.any(pc.equal(values, pa.scalar(b"bad", pa.binary()))).as_py():
        raise ValueError("a bad value in the batch")
    shouted = pc.utf8_upper(values.cast(pa.string()))
    return pa.RecordBatch.from_arrays([shouted, batch.column("key")], names=["value", "key"])


def test_a_batch_function_writes_its_batch_text_as_bytes() -> None:
    out = processor_for(upper).apply(kafka_batch([b"a", b"b"]))
    assert rows(out.batch) == [(None, b"A", (), None), (b"k1", b"B", (), None)]


def test_skip_isolates_the_failing_rows_of_a_batch_function() -> None:
    values: list[bytes | None] = [b"x%d" % i for i in range(37)]
    values[5] = values[30] = b"bad"
    out = processor_for(upper, ErrorHandling(ErrorPolicy.SKIP)).apply(kafka_batch(values))
    assert [v for _, v, _, _ in rows(out.batch)] == [v.upper() for v in values if v != b"bad"]  # type: ignore[union-attr]
    assert sorted(f.record.offset or -1 for f in out.failures) == [105, 130]
    assert all(f.reason == "ValueError: a bad value in the batch" for f in out.failures)


def test_fail_on_a_batch_function_names_the_batch() -> None:
    with pytest.raises(ProcessingFailed, match=r"failed on a batch of 2 records from orders\[3\]@100"):
        processor_for(upper).apply(kafka_batch([b"a", b"bad"]))


def test_what_a_batch_function_returns_is_checked() -> None:
    with pytest.raises(NotAnOutputBatch, match="no value column"):
        output_batch(pa.RecordBatch.from_pydict({"v": [b"a"]}))
    with pytest.raises(NotAnOutputBatch, match=r"expected a pyarrow\.RecordBatch, got list"):
        output_batch([1])
    with pytest.raises(NotAnOutputBatch, match="column key is int64"):
        output_batch(pa.RecordBatch.from_pydict({"value": [b"a"], "key": [1]}))
    table = pa.table({"value": ["a", "b"], "timestamp": [5, 6]})
    assert rows(output_batch(table)) == [(None, b"a", (), 5), (None, b"b", (), 6)]
    # columns of None only, as pyarrow infers them (type null)
    nulls = pa.RecordBatch.from_pydict({"value": [b"a"], "key": [None], "headers": [None], "timestamp": [None]})
    assert rows(output_batch(nulls)) == [(None, b"a", (), None)]


# -- connectors that read one record at a time -----------------------------------------------


def test_records_of_other_connectors_arrive_as_json_values_with_their_event_time() -> None:
    batch = records_batch([Record("s-1", {"n": 1}, 42), Record("s-2", "text", None), Record("s-3", b"\xff", 7)])
    seen = messages(batch)
    assert [(m.value, m.timestamp_ms, m.topic) for m in seen] == [
        (b'{"n":1}', 42, None),
        (b"text", None, None),
        (b"\xff", 7, None),
    ]
    assert batch.column("split_id").to_pylist() == ["s-1", "s-2", "s-3"]
    skipped = processor_for(failing_on_b, ErrorHandling(ErrorPolicy.SKIP)).apply(records_batch([Record("s-9", "b")]))
    assert [(f.split_id, f.record.where()) for f in skipped.failures] == [("s-9", "a record")]


# -- loading ------------------------------------------------------------------------------------


def test_a_function_is_loaded_by_module_and_name_and_a_bad_one_is_named() -> None:
    assert load_function("json:dumps").__name__ == "dumps"
    assert load_function("os.path:join.__call__") is not None
    for spec, said in [
        ("json", "expected module:function"),
        ("no_such_module_xyz:fn", "cannot import 'no_such_module_xyz'"),
        ("json:nope", "json has no 'nope'"),
        ("json:__doc__", "is a str, not a function"),
    ]:
        with pytest.raises(ConfigError, match="--process") as refused:
            load_function(spec)
        assert said in str(refused.value)


# -- outputs --------------------------------------------------------------------------------


def test_the_output_format_defaults_by_kind_and_is_checked(tmp_path: Any) -> None:
    from sluicegate.reader.output import OutputSpec

    assert OutputSpec.parse("kafka:out").format == "record"
    assert OutputSpec.parse(f"jsonl:{tmp_path}/o.jsonl").format == "envelope"
    assert OutputSpec.parse("kafka:out", "Envelope").format == "envelope"
    with pytest.raises(ConfigError, match="--output-format"):
        OutputSpec.parse("kafka:out", "avro")


def test_jsonl_writes_records_as_text_or_base64(tmp_path: Any) -> None:
    import asyncio

    import orjson

    from sluicegate.reader.output import JsonlOutput

    out = JsonlOutput(tmp_path / "o.jsonl")
    batch = Identity().apply(kafka_batch([b"plain", b"\xff\xfe"])).batch
    asyncio.run(out.write_batch(batch))
    asyncio.run(out.close())
    lines = [orjson.loads(line) for line in (tmp_path / "o.jsonl").read_bytes().splitlines()]
    assert lines == [
        {"key": None, "value": "plain", "headers": None, "timestamp": 1_700_000_000_000},
        {
            "key": "k1",
            "value": None,
            "value_base64": "//4=",
            "headers": [["trace", "t1"]],
            "timestamp": 1_700_000_000_001,
        },
    ]
    assert out.records_pending == 2


def test_a_function_with_the_envelope_format_is_refused_by_name() -> None:
    from sluicegate.reader.host import ReaderHost, ReaderSettings
    from sluicegate.reader.output import OutputSpec

    envelope = OutputSpec.parse("kafka:out", "envelope")
    with pytest.raises(ConfigError, match=r"--process.*--output-format envelope"):
        ReaderSettings("orders", 0, "sequence", envelope, "k:9092", process="json:dumps")
    settings = ReaderSettings("orders", 0, "sequence", envelope, "k:9092", options={"splits": "4"})
    with pytest.raises(ConfigError, match=r"--process.*--output-format envelope"):
        ReaderHost(settings, process=record_fn)
    with pytest.raises(ConfigError, match="--on-process-error"):
        ReaderSettings("orders", 0, "sequence", OutputSpec.parse("kafka:out"), "k:9092", on_process_error="ignore")


def test_kafka_writes_records_in_batches_partitioned_by_key() -> None:
    """Through aiokafka's own batch builder (its Cython one is strict about types), read
    back: each record whole in the partition Kafka's partitioner gives its key; keyless
    records of one batch together in one partition."""
    import asyncio

    from aiokafka.partitioner import murmur2
    from aiokafka.producer.message_accumulator import BatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    from sluicegate.reader.output import KafkaOutput

    sent: list[tuple[int, Any]] = []

    class Producer:
        async def partitions_for(self, topic: str) -> set[int]:
            return set(range(4))

        def create_batch(self) -> BatchBuilder:
            return BatchBuilder(512 * 1024, 0, is_transactional=True)

        async def send_batch(self, builder: BatchBuilder, topic: str, partition: int) -> asyncio.Future[None]:
            sent.append((partition, builder))
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future

    async def write() -> None:
        out = KafkaOutput("out", lambda: Producer())
        await out.write_batch(Identity().apply(kafka_batch([b"v%d" % i for i in range(9)])).batch)
        await out.flush()

    asyncio.run(write())
    written = []
    for partition, builder in sent:
        batch = MemoryRecords(bytes(builder._build())).next_batch()
        written += [(partition, r.key, r.value, tuple(r.headers), r.timestamp) for r in batch]
    assert sorted(w[2] for w in written) == [b"v%d" % i for i in range(9)]
    for partition, key, value, headers, timestamp in written:
        i = int(value[1:])
        assert timestamp == 1_700_000_000_000 + i
        assert headers == ((("trace", f"t{i}".encode()),) if i % 3 else ())
        if key is not None:
            assert partition == (murmur2(key) & 0x7FFFFFFF) % 4
    assert len({p for p, key, *_ in written if key is None}) == 1


def test_a_misspelled_run_reader_setting_fails_naming_the_closest() -> None:
    import sluicegate

    with pytest.raises(ConfigError) as refused:
        sluicegate.run_reader(source="orders", connector="sequence", output="kafka:out", checkpoint_interval_msec=500)
    text = str(refused.value)
    assert "checkpoint_interval_msec" in text and "did you mean 'checkpoint_interval_ms'?" in text


def test_run_reader_names_its_keywords_not_the_command_line_s_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "pass --bootstrap-servers" to a Python caller (issue 51 item 3)."""
    import sluicegate

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(ConfigError) as refused:
        sluicegate.run_reader(source="orders", connector="sequence", output="kafka:out")
    assert refused.value.setting == "bootstrap_servers"
    assert "--" not in str(refused.value) and "pass bootstrap_servers" in str(refused.value)
    with pytest.raises(ConfigError, match="'checkpoint_interval_ms'"):
        sluicegate.run_reader(
            source="orders",
            connector="sequence",
            output="kafka:out",
            bootstrap_servers="k:9092",
            checkpoint_interval_ms=1,
        )
