//! sluicegate._native: Kafka records of one partition range straight into Arrow.
//!
//! Policy (data loss, time-outs, messages) stays in Python
//! (`connectors/kafka/ranges.py::RangeReader`); this module only runs the per-record loop:
//! messages from librdkafka appended to Arrow builders with the GIL released, one
//! `pyarrow.RecordBatch` handed back per call through the Arrow C data interface.
//!
//! Two ways to take messages from librdkafka are kept, chosen per consumer (`mode`):
//! - `"batch"` (the default, chosen by measurement, see native/README.md): a raw librdkafka
//!   consumer (rdkafka-sys) and `rd_kafka_consume_batch_queue` on its consumer queue, as
//!   confluent-kafka's `consume()` does, minus the Python objects;
//! - `"poll"`: the `rdkafka` crate's `BaseConsumer::poll`, one event per message, the
//!   `BorrowedMessage`'s bytes appended without a copy. Its error type drops the offset of a
//!   partition EOF and librdkafka's error text, so it reports EOF at offset -1: a prototype
//!   kept for the benchmark only.

mod partitioner;
mod partitions;

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_pyarrow::ToPyArrow;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, Timestamp};
use rdkafka_sys as rd;

/// librdkafka's RD_KAFKA_RESP_ERR__PARTITION_EOF.
const PARTITION_EOF: i32 = -191;
/// Messages asked of librdkafka per call: it hands out a few hundred at a time far faster
/// than tens of thousands.
const CONSUME_CHUNK: usize = 1_000;

struct Raw(*mut rd::rd_kafka_message_t);
// SAFETY: a consumed librdkafka message is owned by whoever holds it until destroyed.
unsafe impl Send for Raw {}
impl Drop for Raw {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_message_destroy(self.0) }
    }
}

struct RawHandle {
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
}
// SAFETY: librdkafka handles and queues are thread-safe.
unsafe impl Send for RawHandle {}
unsafe impl Sync for RawHandle {}
impl Drop for RawHandle {
    fn drop(&mut self) {
        unsafe {
            rd::rd_kafka_queue_destroy(self.queue);
            rd::rd_kafka_consumer_close(self.rk);
            rd::rd_kafka_destroy(self.rk);
        }
    }
}

enum Backend {
    Batch(RawHandle),
    Poll(BaseConsumer),
}

/// What ended a fill early: librdkafka's error code (-191: partition EOF), its text and
/// the message's offset (-1: unknown).
type Event = (i32, String, i64);

struct Builders {
    key: BinaryBuilder,
    value: BinaryBuilder,
    offset: Vec<i64>,
    timestamp: Vec<i64>,
    kind: Vec<i32>,
    headers: ListBuilder<StructBuilder>,
    with_headers: bool,
    /// Each row's topic and partition, for a batch of several partitions (None: one
    /// partition, given to `finish`).
    origins: Option<(StringBuilder, Vec<i32>)>,
}

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

/// Spark's Kafka source schema; the `headers` column only when asked for
/// (Spark's `includeHeaders`).
fn schema(with_headers: bool) -> Schema {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if with_headers {
        let headers = DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(header_fields()),
            true,
        )));
        fields.push(Field::new("headers", headers, true));
    }
    Schema::new(fields)
}

impl Builders {
    fn new(capacity: usize, with_headers: bool) -> Self {
        let structs = StructBuilder::new(
            header_fields(),
            vec![
                Box::new(StringBuilder::new()),
                Box::new(BinaryBuilder::new()),
            ],
        );
        Builders {
            key: BinaryBuilder::with_capacity(capacity, capacity * 16),
            value: BinaryBuilder::with_capacity(capacity, capacity * 128),
            offset: Vec::with_capacity(capacity),
            timestamp: Vec::with_capacity(capacity),
            kind: Vec::with_capacity(capacity),
            headers: ListBuilder::new(structs),
            with_headers,
            origins: None,
        }
    }

    /// Rows of several partitions: each row's topic and partition are kept.
    fn with_origins(mut self) -> Self {
        self.origins = Some((StringBuilder::new(), Vec::with_capacity(self.offset.capacity())));
        self
    }

    fn len(&self) -> usize {
        self.offset.len()
    }

    /// Kafka's timestamp type numbering (0 CreateTime, 1 LogAppendTime) from librdkafka's
    /// (1 create, 2 log append, 0 not available); the timestamp in µs (-1 ms when none).
    fn append_meta(&mut self, offset: i64, ts_ms: i64, log_append: bool) {
        self.offset.push(offset);
        self.timestamp.push(ts_ms * 1000);
        self.kind.push(if log_append { 1 } else { 0 });
    }

    fn header(&mut self, name: &[u8], value: Option<&[u8]>) {
        let structs = self.headers.values();
        structs
            .field_builder::<StringBuilder>(0)
            .expect("key builder")
            .append_value(String::from_utf8_lossy(name));
        structs
            .field_builder::<BinaryBuilder>(1)
            .expect("value builder")
            .append_option(value);
        structs.append(true);
    }

    /// One raw librdkafka message (no error).
    unsafe fn append_raw(&mut self, m: *mut rd::rd_kafka_message_t) {
        let msg = &*m;
        if let Some((topics, partitions)) = self.origins.as_mut() {
            topics.append_value(CStr::from_ptr(rd::rd_kafka_topic_name(msg.rkt)).to_string_lossy());
            partitions.push(msg.partition);
        }
        self.key.append_option(bytes(msg.key, msg.key_len));
        self.value.append_option(bytes(msg.payload, msg.len));
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        let ts = rd::rd_kafka_message_timestamp(m, &mut kind);
        self.append_meta(
            msg.offset,
            ts,
            kind == rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME,
        );
        if !self.with_headers {
            return;
        }
        let mut hdrs: *mut rd::rd_kafka_headers_t = ptr::null_mut();
        if rd::rd_kafka_message_headers(m, &mut hdrs)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            self.headers.append(false);
            return;
        }
        let mut idx = 0usize;
        loop {
            let mut name: *const c_char = ptr::null();
            let mut value: *const c_void = ptr::null();
            let mut size = 0usize;
            if rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size)
                != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                break;
            }
            self.header(
                CStr::from_ptr(name).to_bytes(),
                bytes(value as *mut c_void, size),
            );
            idx += 1;
        }
        self.headers.append(true);
    }

    fn append_borrowed(&mut self, m: &rdkafka::message::BorrowedMessage<'_>) {
        self.key.append_option(m.key());
        self.value.append_option(m.payload());
        let (ts, log_append) = match m.timestamp() {
            Timestamp::NotAvailable => (-1, false),
            Timestamp::CreateTime(t) => (t, false),
            Timestamp::LogAppendTime(t) => (t, true),
        };
        self.append_meta(m.offset(), ts, log_append);
        if !self.with_headers {
            return;
        }
        match m.headers() {
            Some(headers) => {
                for h in headers.iter() {
                    self.header(h.key.as_bytes(), h.value);
                }
                self.headers.append(true);
            }
            None => self.headers.append(false),
        }
    }

    fn finish(mut self, topic: &str, partition: i32) -> RecordBatch {
        let n = self.len();
        let (topics, partitions): (ArrayRef, ArrayRef) = match self.origins.take() {
            Some((mut topics, partitions)) => (Arc::new(topics.finish()), Arc::new(Int32Array::from(partitions))),
            None => (
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(topic, n))),
                Arc::new(Int32Array::from(vec![partition; n])),
            ),
        };
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            topics,
            partitions,
            Arc::new(Int64Array::from(self.offset)),
            Arc::new(TimestampMicrosecondArray::from(self.timestamp).with_timezone("UTC")),
            Arc::new(Int32Array::from(self.kind)),
        ];
        if self.with_headers {
            columns.push(Arc::new(self.headers.finish()));
        }
        RecordBatch::try_new(Arc::new(schema(self.with_headers)), columns)
            .expect("columns match the schema")
    }
}

unsafe fn bytes<'a>(data: *mut c_void, len: usize) -> Option<&'a [u8]> {
    if data.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(data as *const u8, len))
    }
}

fn err_name(code: rd::rd_kafka_resp_err_t) -> String {
    unsafe {
        CStr::from_ptr(rd::rd_kafka_err2str(code))
            .to_string_lossy()
            .into_owned()
    }
}

fn cstring(text: &str) -> PyResult<CString> {
    CString::new(text).map_err(|_| PyValueError::new_err(format!("NUL in {text:?}")))
}

/// A raw librdkafka consumer with ``config`` (passed through unchanged) and its consumer
/// queue, taken from with `rd_kafka_consume_batch_queue`.
fn raw_consumer(config: &[(String, String)]) -> PyResult<RawHandle> {
    unsafe {
        let conf = rd::rd_kafka_conf_new();
        let mut errstr = [0 as c_char; 512];
        for (k, v) in config.iter() {
            let (ck, cv) = (cstring(k)?, cstring(v)?);
            if rd::rd_kafka_conf_set(
                conf,
                ck.as_ptr(),
                cv.as_ptr(),
                errstr.as_mut_ptr(),
                512,
            ) != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK
            {
                rd::rd_kafka_conf_destroy(conf);
                let e = CStr::from_ptr(errstr.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                return Err(PyValueError::new_err(e));
            }
        }
        // librdkafka's own log lines go nowhere (the Python path sends them to a quiet
        // logger); what a read needs to know comes back as events.
        rd::rd_kafka_conf_set_log_cb(conf, None);
        let rk = rd::rd_kafka_new(
            rd::rd_kafka_type_t::RD_KAFKA_CONSUMER,
            conf,
            errstr.as_mut_ptr(),
            512,
        );
        if rk.is_null() {
            rd::rd_kafka_conf_destroy(conf);
            let e = CStr::from_ptr(errstr.as_ptr())
                .to_string_lossy()
                .into_owned();
            return Err(PyRuntimeError::new_err(e));
        }
        rd::rd_kafka_poll_set_consumer(rk);
        let queue = rd::rd_kafka_queue_get_consumer(rk);
        Ok(RawHandle { rk, queue })
    }
}

/// A Kafka consumer that reads offset ranges of one assigned partition into Arrow.
#[pyclass(frozen, module = "sluicegate._native")]
struct NativeRangeConsumer {
    backend: Backend,
    /// Messages taken from librdkafka and not used yet (after an event ended a fill).
    pending: Mutex<VecDeque<Raw>>,
}

impl NativeRangeConsumer {
    fn rk(&self) -> *mut rd::rd_kafka_t {
        match &self.backend {
            Backend::Batch(h) => h.rk,
            Backend::Poll(c) => {
                use rdkafka::consumer::Consumer;
                c.client().native_ptr()
            }
        }
    }

    fn fill_batch(
        &self,
        h: &RawHandle,
        b: &mut Builders,
        position: &mut i64,
        end: i64,
        max_rows: usize,
        wait: Duration,
    ) -> Option<Event> {
        let mut pending = self.pending.lock().unwrap();
        let mut idle_since = Instant::now();
        let mut buf: Vec<*mut rd::rd_kafka_message_t> = vec![ptr::null_mut(); CONSUME_CHUNK];
        while b.len() < max_rows && *position < end {
            let Some(raw) = pending.pop_front() else {
                let left = wait.saturating_sub(idle_since.elapsed());
                if left.is_zero() {
                    return None;
                }
                let want = CONSUME_CHUNK
                    .min(max_rows - b.len())
                    .min((end - *position) as usize)
                    .max(1);
                let n = unsafe {
                    rd::rd_kafka_consume_batch_queue(
                        h.queue,
                        left.as_millis().max(1) as i32,
                        buf.as_mut_ptr(),
                        want,
                    )
                };
                if n < 0 {
                    let code = unsafe { rd::rd_kafka_last_error() };
                    return Some((code as i32, err_name(code), -1));
                }
                if n > 0 {
                    idle_since = Instant::now();
                }
                pending.extend(buf[..n as usize].iter().map(|&m| Raw(m)));
                continue;
            };
            let msg = unsafe { &*raw.0 };
            if msg.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                let text = unsafe { CStr::from_ptr(rd::rd_kafka_message_errstr(raw.0)) }
                    .to_string_lossy()
                    .into_owned();
                return Some((msg.err as i32, text, msg.offset));
            }
            if msg.offset >= end {
                *position = end;
                pending.clear();
                return None;
            }
            unsafe { b.append_raw(raw.0) };
            *position = msg.offset + 1;
        }
        None
    }

    fn fill_poll(
        c: &BaseConsumer,
        b: &mut Builders,
        position: &mut i64,
        end: i64,
        max_rows: usize,
        wait: Duration,
    ) -> Option<Event> {
        let mut idle_since = Instant::now();
        while b.len() < max_rows && *position < end {
            let left = wait.saturating_sub(idle_since.elapsed());
            if left.is_zero() {
                return None;
            }
            match c.poll(left) {
                None => {}
                Some(Ok(m)) => {
                    idle_since = Instant::now();
                    if m.offset() >= end {
                        *position = end;
                        return None;
                    }
                    b.append_borrowed(&m);
                    *position = m.offset() + 1;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    return Some((PARTITION_EOF, "Broker: No more messages".into(), -1));
                }
                Some(Err(e)) => {
                    let code = e.rdkafka_error_code().map(|c| c as i32).unwrap_or(-1);
                    return Some((code, e.to_string(), -1));
                }
            }
        }
        None
    }
}

#[pymethods]
impl NativeRangeConsumer {
    /// ``config``: librdkafka settings, passed through unchanged. ``mode``: "batch" or "poll".
    #[new]
    #[pyo3(signature = (config, mode = "batch"))]
    fn new(config: Vec<(String, String)>, mode: &str) -> PyResult<Self> {
        let backend = match mode {
            "batch" => Backend::Batch(raw_consumer(&config)?),
            "poll" => {
                let mut cc = ClientConfig::new();
                for (k, v) in &config {
                    cc.set(k, v);
                }
                Backend::Poll(
                    cc.create()
                        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
                )
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be batch or poll, got {other:?}"
                )))
            }
        };
        Ok(NativeRangeConsumer {
            backend,
            pending: Mutex::new(VecDeque::new()),
        })
    }

    /// Read ``partition`` of ``topic`` from ``offset`` on (the only assignment).
    fn assign(&self, topic: &str, partition: i32, offset: i64) -> PyResult<()> {
        self.pending.lock().unwrap().clear();
        let ctopic = cstring(topic)?;
        let err = unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp = rd::rd_kafka_topic_partition_list_add(list, ctopic.as_ptr(), partition);
            (*tp).offset = offset;
            let err = rd::rd_kafka_assign(self.rk(), list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            err
        };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(PyRuntimeError::new_err(format!(
                "assign {topic}-{partition}: {}",
                err_name(err)
            )));
        }
        Ok(())
    }

    fn unassign(&self) -> PyResult<()> {
        self.pending.lock().unwrap().clear();
        let err = unsafe { rd::rd_kafka_assign(self.rk(), ptr::null()) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(PyRuntimeError::new_err(format!(
                "unassign: {}",
                err_name(err)
            )));
        }
        Ok(())
    }

    /// (low, high) watermarks of a partition, asked of the broker.
    fn watermarks(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        timeout_ms: i32,
    ) -> PyResult<(i64, i64)> {
        let ctopic = cstring(topic)?;
        let rk = self.rk() as usize;
        let (err, low, high) = py.detach(|| unsafe {
            let (mut low, mut high) = (0i64, 0i64);
            let err = rd::rd_kafka_query_watermark_offsets(
                rk as *mut rd::rd_kafka_t,
                ctopic.as_ptr(),
                partition,
                &mut low,
                &mut high,
                timeout_ms,
            );
            (err, low, high)
        });
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(PyRuntimeError::new_err(format!(
                "watermarks of {topic}-{partition}: {}",
                err_name(err)
            )));
        }
        Ok((low, high))
    }

    /// Records of the assigned partition from ``position`` (the consumer's position) up to
    /// ``end``, at most ``max_rows``, into one batch. Returns (batch or None, the next
    /// position, an event or None). It returns early on an event (librdkafka's error code,
    /// text and offset: -191 is the partition's end) and when no message came for
    /// ``wait_ms``. A message at or past ``end`` ends the range (position = end).
    #[pyo3(signature = (topic, partition, position, end, max_rows, wait_ms = 500, headers = true))]
    #[allow(clippy::too_many_arguments)]
    fn fill<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        partition: i32,
        position: i64,
        end: i64,
        max_rows: usize,
        wait_ms: u64,
        headers: bool,
    ) -> PyResult<(Option<Bound<'py, PyAny>>, i64, Option<Event>)> {
        let max_rows = max_rows.max(1);
        let wait = Duration::from_millis(wait_ms);
        let (batch, position, event) = py.detach(|| {
            let capacity = max_rows.min((end - position).max(0) as usize).min(1 << 20);
            let mut b = Builders::new(capacity, headers);
            let mut pos = position;
            let event = match &self.backend {
                Backend::Batch(h) => self.fill_batch(h, &mut b, &mut pos, end, max_rows, wait),
                Backend::Poll(c) => Self::fill_poll(c, &mut b, &mut pos, end, max_rows, wait),
            };
            let batch = if b.len() > 0 {
                Some(b.finish(topic, partition))
            } else {
                None
            };
            (batch, pos, event)
        });
        let batch = match batch {
            Some(b) => Some(b.to_pyarrow(py)?),
            None => None,
        };
        Ok((batch, position, event))
    }
}

#[pymodule]
#[pyo3(name = "_native")]
fn sluicegate_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeRangeConsumer>()?;
    m.add_class::<partitions::NativePartitionsConsumer>()?;
    m.add_function(wrap_pyfunction!(partitioner::key_partitions, m)?)?;
    m.add("LIBRDKAFKA_VERSION", unsafe {
        CStr::from_ptr(rd::rd_kafka_version_str())
            .to_string_lossy()
            .into_owned()
    })?;
    Ok(())
}
