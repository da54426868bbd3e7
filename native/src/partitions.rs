//! The standalone reader's consumer: whatever its assigned partitions deliver, several
//! partitions in one Arrow batch (a `topic` and `partition` per row), the GIL released
//! while the batch fills. Partitions are added and removed one by one (incremental
//! assignment, no consumer group), as the coordinator hands splits out and back.
//!
//! What a message that is an error means (a partition's end, data loss, a deleted topic)
//! is decided in Python (`connectors/kafka/reader.py`): such messages come back as events
//! with their topic, partition and offset, and the fill goes on.

use std::ffi::{CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use arrow_pyarrow::ToPyArrow;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use rdkafka_sys as rd;

use crate::{cstring, err_name, raw_consumer, Builders, Raw, RawHandle, CONSUME_CHUNK};

/// A message that is an error: its topic, partition, librdkafka's code and text, offset.
type PartitionEvent = (String, i32, i32, String, i64);

/// A partition list for librdkafka, destroyed when dropped.
struct PartitionList(*mut rd::rd_kafka_topic_partition_list_t);

impl PartitionList {
    fn of(parts: &[(String, i32, i64)]) -> PyResult<Self> {
        let names = parts.iter().map(|(t, _, _)| cstring(t)).collect::<PyResult<Vec<CString>>>()?;
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(parts.len().max(1) as i32);
            for ((_, partition, offset), name) in parts.iter().zip(&names) {
                let tp = rd::rd_kafka_topic_partition_list_add(list, name.as_ptr(), *partition);
                (*tp).offset = *offset;
            }
            Ok(PartitionList(list))
        }
    }
}

impl Drop for PartitionList {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_topic_partition_list_destroy(self.0) }
    }
}

/// An `rd_kafka_error_t` as a Python error (None when there is none), destroyed.
unsafe fn checked(what: &str, error: *mut rd::rd_kafka_error_t) -> PyResult<()> {
    if error.is_null() {
        return Ok(());
    }
    let text = CStr::from_ptr(rd::rd_kafka_error_string(error)).to_string_lossy().into_owned();
    rd::rd_kafka_error_destroy(error);
    Err(PyRuntimeError::new_err(format!("{what}: {text}")))
}

fn checked_err(what: &str, err: rd::rd_kafka_resp_err_t) -> PyResult<()> {
    if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(PyRuntimeError::new_err(format!("{what}: {}", err_name(err))))
    }
}

const UNSET: i64 = rd::RD_KAFKA_OFFSET_INVALID as i64;

/// A Kafka consumer of several assigned partitions that reads whatever they deliver.
#[pyclass(frozen, module = "sluicegate._native")]
pub struct NativePartitionsConsumer {
    handle: RawHandle,
}

#[pymethods]
impl NativePartitionsConsumer {
    /// ``config``: librdkafka settings, passed through unchanged.
    #[new]
    fn new(config: Vec<(String, String)>) -> PyResult<Self> {
        Ok(NativePartitionsConsumer { handle: raw_consumer(&config)? })
    }

    /// Start reading these (topic, partition, offset) too.
    fn assign(&self, parts: Vec<(String, i32, i64)>) -> PyResult<()> {
        let list = PartitionList::of(&parts)?;
        unsafe { checked("assign", rd::rd_kafka_incremental_assign(self.handle.rk, list.0)) }
    }

    /// Stop reading these (topic, partition).
    fn unassign(&self, parts: Vec<(String, i32)>) -> PyResult<()> {
        let parts: Vec<_> = parts.into_iter().map(|(t, p)| (t, p, UNSET)).collect();
        let list = PartitionList::of(&parts)?;
        unsafe { checked("unassign", rd::rd_kafka_incremental_unassign(self.handle.rk, list.0)) }
    }

    fn pause(&self, parts: Vec<(String, i32)>) -> PyResult<()> {
        let parts: Vec<_> = parts.into_iter().map(|(t, p)| (t, p, UNSET)).collect();
        let list = PartitionList::of(&parts)?;
        checked_err("pause", unsafe { rd::rd_kafka_pause_partitions(self.handle.rk, list.0) })
    }

    fn resume(&self, parts: Vec<(String, i32)>) -> PyResult<()> {
        let parts: Vec<_> = parts.into_iter().map(|(t, p)| (t, p, UNSET)).collect();
        let list = PartitionList::of(&parts)?;
        checked_err("resume", unsafe { rd::rd_kafka_resume_partitions(self.handle.rk, list.0) })
    }

    /// Read an assigned partition from ``offset`` on.
    fn seek(&self, py: Python<'_>, topic: String, partition: i32, offset: i64) -> PyResult<()> {
        let list = PartitionList::of(&[(topic, partition, offset)])?;
        let rk = self.handle.rk as usize;
        let address = list.0 as usize;
        let error = py.detach(|| unsafe {
            rd::rd_kafka_seek_partitions(rk as *mut rd::rd_kafka_t, address as *mut _, 10_000) as usize
        });
        unsafe { checked("seek", error as *mut rd::rd_kafka_error_t) }
    }

    /// (low, high) watermarks of a partition: asked of the broker, or with ``cached`` as
    /// the last fetch response reported them ((-1, -1) when none came yet).
    #[pyo3(signature = (topic, partition, timeout_ms = 10_000, cached = false))]
    fn watermarks(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        timeout_ms: i32,
        cached: bool,
    ) -> PyResult<(i64, i64)> {
        let ctopic = cstring(topic)?;
        let rk = self.handle.rk as usize;
        let (err, low, high) = py.detach(|| unsafe {
            let (mut low, mut high) = (-1i64, -1i64);
            let rk = rk as *mut rd::rd_kafka_t;
            let err = if cached {
                rd::rd_kafka_get_watermark_offsets(rk, ctopic.as_ptr(), partition, &mut low, &mut high)
            } else {
                rd::rd_kafka_query_watermark_offsets(rk, ctopic.as_ptr(), partition, &mut low, &mut high, timeout_ms)
            };
            (err, low, high)
        });
        checked_err(&format!("watermarks of {topic}-{partition}"), err)?;
        Ok((low, high))
    }

    /// Up to ``max_rows`` messages of the assigned partitions in one batch of Spark's Kafka
    /// schema, waiting up to ``wait_ms`` for the first; it returns as soon as librdkafka
    /// has no more ready. Returns (batch or None, the events met on the way).
    #[pyo3(signature = (max_rows, wait_ms = 50, headers = true))]
    fn fill<'py>(
        &self,
        py: Python<'py>,
        max_rows: usize,
        wait_ms: u64,
        headers: bool,
    ) -> PyResult<(Option<Bound<'py, PyAny>>, Vec<PartitionEvent>)> {
        let max_rows = max_rows.max(1);
        let queue = self.handle.queue as usize;
        let (batch, events) = py.detach(|| {
            let queue = queue as *mut rd::rd_kafka_queue_t;
            let mut b = Builders::new(max_rows.min(CONSUME_CHUNK * 8), headers).with_origins();
            let mut events: Vec<PartitionEvent> = Vec::new();
            let mut buf: Vec<*mut rd::rd_kafka_message_t> = vec![ptr::null_mut(); CONSUME_CHUNK];
            let deadline = Instant::now() + Duration::from_millis(wait_ms);
            while b.len() < max_rows {
                let nothing_yet = b.len() == 0 && events.is_empty();
                let timeout = if nothing_yet { deadline.saturating_duration_since(Instant::now()) } else { Duration::ZERO };
                let want = CONSUME_CHUNK.min(max_rows - b.len());
                let n = unsafe {
                    rd::rd_kafka_consume_batch_queue(queue, timeout.as_millis() as i32, buf.as_mut_ptr(), want)
                };
                if n < 0 {
                    let code = unsafe { rd::rd_kafka_last_error() };
                    events.push((String::new(), -1, code as i32, err_name(code), -1));
                    break;
                }
                for &m in &buf[..n as usize] {
                    let raw = Raw(m);
                    let msg = unsafe { &*raw.0 };
                    if msg.err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                        unsafe { b.append_raw(raw.0) };
                        continue;
                    }
                    let topic = if msg.rkt.is_null() {
                        String::new()
                    } else {
                        unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(msg.rkt)) }.to_string_lossy().into_owned()
                    };
                    let text = unsafe { CStr::from_ptr(rd::rd_kafka_message_errstr(raw.0)) }
                        .to_string_lossy()
                        .into_owned();
                    events.push((topic, msg.partition, msg.err as i32, text, msg.offset));
                }
                if (n as usize) < want || (nothing_yet && n == 0 && Instant::now() >= deadline) {
                    break;
                }
            }
            let batch = if b.len() > 0 { Some(b.finish("", 0)) } else { None };
            (batch, events)
        });
        let batch = match batch {
            Some(b) => Some(b.to_pyarrow(py)?),
            None => None,
        };
        Ok((batch, events))
    }
}
