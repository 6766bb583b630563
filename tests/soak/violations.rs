//! The guarantees the soak found broken, each with when (seconds since the start) and what.
//! A continuous check that keeps failing is recorded once per key, with its first time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Inner {
    /// (when, what), in the order found.
    found: Vec<(f64, String)>,
    /// Keys already recorded.
    keys: BTreeSet<String>,
}

#[derive(Clone, Default)]
pub struct Violations(Arc<Mutex<Inner>>);

impl Violations {
    /// Records `what` at `at`, unless a violation with the same `key` is already recorded.
    pub fn add(&self, key: &str, at: f64, what: String) {
        let mut inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if inner.keys.insert(key.to_owned()) {
            eprintln!("soak: VIOLATION at t={at:.1}s: {what}");
            inner.found.push((at, what));
        }
    }

    /// Every violation, in time order.
    pub fn all(&self) -> Vec<(f64, String)> {
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .found
            .clone();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all
    }
}
