//! A small deadline queue: controllers schedule keys and collect those that are due.

use std::collections::BTreeSet;

use tokio::time::Instant;

/// Keys scheduled at instants; the same key may be scheduled more than once.
pub(crate) struct Timers<K: Ord> {
    // (deadline, insertion sequence, key): the sequence keeps equal deadlines distinct.
    queue: BTreeSet<(Instant, u64, K)>,
    seq: u64,
}

impl<K: Ord + Clone> Timers<K> {
    pub(crate) fn new() -> Self {
        Self {
            queue: BTreeSet::new(),
            seq: 0,
        }
    }

    /// Schedules `key` to be due at `at`.
    pub(crate) fn schedule(&mut self, at: Instant, key: K) {
        self.seq += 1;
        self.queue.insert((at, self.seq, key));
    }

    /// Removes and returns every key due at or before `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        while let Some(first) = self.queue.first() {
            if first.0 > now {
                break;
            }
            if let Some((_, _, key)) = self.queue.pop_first() {
                due.push(key);
            }
        }
        due
    }

    /// The earliest deadline still queued.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|(at, _, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pops_only_due_keys_in_deadline_order() {
        let base = Instant::now();
        let mut timers = Timers::new();
        timers.schedule(base + Duration::from_secs(2), "late");
        timers.schedule(base + Duration::from_secs(1), "early");
        timers.schedule(base + Duration::from_secs(1), "early-too");
        assert_eq!(timers.next(), Some(base + Duration::from_secs(1)));
        assert_eq!(
            timers.pop_due(base + Duration::from_secs(1)),
            ["early", "early-too"]
        );
        assert_eq!(timers.next(), Some(base + Duration::from_secs(2)));
        assert!(timers.pop_due(base).is_empty());
        assert_eq!(timers.pop_due(base + Duration::from_secs(3)), ["late"]);
        assert_eq!(timers.next(), None);
    }
}
