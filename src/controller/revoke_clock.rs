//! The revoke logs of every pool this operator process reconciles (see
//! [`crate::state::revokes`]), kept between reconciles on its monotonic clock. It is memory
//! only, on purpose: a process that starts or takes over the leadership knows nothing, so every
//! revoke wait starts again at its first sight of the worker's ConfigMap, never earlier.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::state::revokes::{RevokeLog, RevokeWaits};
use crate::state::slice_summary::SliceSummary;

/// The revoke log of each pool, by namespace and name.
#[derive(Debug, Default)]
pub struct RevokeClock {
    logs: Mutex<HashMap<(String, String), RevokeLog>>,
}

impl RevokeClock {
    /// Notes the pool's workers' ConfigMaps `slices` as known at `now`, and returns since when
    /// each has shown each version.
    pub fn waits<'s>(
        &self,
        namespace: &str,
        pool: &str,
        slices: impl Iterator<Item = &'s SliceSummary>,
        now: Instant,
    ) -> RevokeWaits {
        let mut logs = self.logs.lock().expect("revoke clock lock poisoned");
        let log = logs
            .entry((namespace.to_owned(), pool.to_owned()))
            .or_default();
        log.note(slices, now);
        log.at(now)
    }

    /// Forgets a deleted pool.
    pub fn forget(&self, namespace: &str, pool: &str) {
        self.logs
            .lock()
            .expect("revoke clock lock poisoned")
            .remove(&(namespace.to_owned(), pool.to_owned()));
    }
}
