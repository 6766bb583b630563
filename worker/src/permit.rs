//! The permit a worker's jobs check before each unit of work.
//!
//! The worker stops every job whose permit lapsed (no fence read that listed it was sent less
//! than the permit ago, [`crate::fence`]), but a process paused by SIGSTOP resumes all its
//! threads at once: a job's thread may run before the worker's timer stops it. A job that checks its permit before each unit of work
//! (each message consumed, each chunk written) does nothing once the permit has lapsed, whichever
//! thread runs first: the permit is a deadline on the monotonic clock, not a flag someone must
//! clear.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// Whether this worker may still work on its jobs. Clones share one deadline.
#[derive(Clone, Debug, Default)]
pub struct Permit {
    /// Nanoseconds after [`base`] until which the permit holds, plus one; 0: not held.
    until: Arc<AtomicU64>,
}

/// An instant before every deadline of this process.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Permit {
    /// Whether the permit holds now: a fence read that listed the job was sent recently enough
    /// that the operator cannot have granted it to another worker.
    pub fn holds(&self) -> bool {
        self.until().is_some_and(|until| Instant::now() < until)
    }

    /// Until when the permit holds, if it is held at all.
    pub fn until(&self) -> Option<Instant> {
        match self.until.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(base() + std::time::Duration::from_nanos(nanos - 1)),
        }
    }

    /// Sets the deadline: the last fence read's send plus the permit, or `None` while nothing
    /// may run.
    pub(crate) fn set(&self, until: Option<Instant>) {
        let nanos = until.map_or(0, |until| {
            let since = until.saturating_duration_since(base()).as_nanos();
            u64::try_from(since).unwrap_or(u64::MAX - 1) + 1
        });
        self.until.store(nanos, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_permit_holds_until_its_deadline_and_not_while_unset() {
        let permit = Permit::default();
        assert!(!permit.holds(), "not held before the first read");
        let now = Instant::now();
        permit.set(Some(now + Duration::from_secs(60)));
        assert!(permit.clone().holds(), "clones share the deadline");
        assert_eq!(permit.until(), Some(now + Duration::from_secs(60)));
        permit.set(Some(now));
        assert!(!permit.holds(), "lapsed");
        permit.set(None);
        assert_eq!(permit.until(), None);
    }
}
