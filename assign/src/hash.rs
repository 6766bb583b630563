//! The stable job hash and jump consistent hash.
//!
//! Both are fixed functions of their inputs on every platform and in every release: assignments
//! computed by one operator version must be reproduced by the next, and workers using the
//! `Consistent` strategy may compute their share themselves.

use std::cmp::Ordering;

use xxhash_rust::xxh64::xxh64;

/// Seed of the job hash. Changing it reassigns every `Consistent` job: never do that.
const SEED: u64 = 0;

/// The stable 64-bit hash of a job name: xxHash64 with seed 0 over its UTF-8 bytes.
pub fn job_hash(job: &str) -> u64 {
    xxh64(job.as_bytes(), SEED)
}

/// Jump consistent hash (Lamping and Veach, 2014): the bucket in `0..buckets` of `key`.
///
/// Moving from `n` to `n + 1` buckets moves about `1/(n+1)` of the keys, all into the new bucket.
/// The floating point steps are single IEEE 754 operations, so the result is the same on every
/// platform. Returns 0 when `buckets` is 0.
pub fn jump_hash(mut key: u64, buckets: usize) -> usize {
    let buckets = i64::try_from(buckets).unwrap_or(i64::MAX);
    let (mut bucket, mut next) = (0_i64, 0_i64);
    while next < buckets {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // Truncation is the algorithm: the next candidate bucket.
        next = ((bucket + 1) as f64 * ((1_u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    usize::try_from(bucket).unwrap_or(0)
}

/// The order used to break ties between jobs: by stable hash, then by name.
pub(crate) fn job_order(a: (u64, &str), b: (u64, &str)) -> Ordering {
    a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1))
}
