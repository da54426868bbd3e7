//! Kafka's default partitioner for a column of keys: murmur2 of each key, as the Java
//! client's `Utils.murmur2`, positive, modulo the partition count. The reader host's
//! Kafka output calls it once per batch (reader/output.py); in Python it cost ~4.6 µs a
//! key, more than the rest of writing a record.

use arrow_array::{Array, BinaryArray, Int32Array};
use arrow_data::ArrayData;
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Kafka's murmur2 (seed 0x9747b28c), as `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of each key of a `pyarrow.BinaryArray` among `partitions`; a null key
/// gets null (the caller chooses for keyless records).
#[pyfunction]
pub fn key_partitions<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    partitions: i32,
) -> PyResult<Bound<'py, PyAny>> {
    if partitions <= 0 {
        return Err(PyValueError::new_err("partitions must be > 0"));
    }
    let data = ArrayData::from_pyarrow_bound(keys)?;
    let keys = BinaryArray::from(data);
    let out: Int32Array = py.detach(|| {
        keys.iter()
            .map(|key| key.map(|k| ((murmur2(k) & 0x7fff_ffff) % partitions as u32) as i32))
            .collect()
    });
    out.into_data().to_pyarrow(py)
}
