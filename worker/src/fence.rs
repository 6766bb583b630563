//! Self-fencing, with no I/O: when a worker must stop every job because its Lease may look
//! expired to the operator, and when it may run jobs again.
//!
//! The operator treats a worker whose Lease has gone unrenewed for `leaseDurationSeconds` plus a
//! grace, on its own clock, as gone and hands its jobs to others. The worker fences itself
//! earlier, on its own monotonic clock: once `duration - margin` has passed since it *sent* its
//! last successful Lease write, it stops every job. Sending precedes the operator's observation
//! of the renewal, so the worker's view is never the fresher one.
//!
//! Fenced, it runs nothing until a Lease write succeeds again and then a ConfigMap GET issued
//! after that success has been read ([`Fence::renewed`] hands out the read to issue,
//! [`Fence::read`] lifts the fence): the entry may have changed while the worker was out of
//! touch. A process starts fenced: a restarted container keeps its pod's uid, so the operator
//! cannot tell its start from the old process's last renewal, and may be handing its jobs away
//! at that very moment.

use std::time::Duration;

use tokio::time::Instant;

/// What a successful Lease write means for the fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Renewal {
    /// This renewal revealed that the Lease was expired meanwhile: stop every job now.
    pub newly_fenced: bool,
    /// Fenced and renewed in time: GET the ConfigMap now and hand the answer to
    /// [`Fence::read`] with this tag.
    pub read: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    Fenced,
    /// Fenced, renewed since, awaiting the GET tagged `read`.
    Reading {
        read: u64,
    },
}

/// One worker's fence.
#[derive(Clone, Debug)]
pub struct Fence {
    limit: Duration,
    /// When the last successful Lease write was sent, or the worker started.
    renewed: Instant,
    state: State,
    reads: u64,
}

impl Fence {
    /// The fence of a worker process started at `start`: fenced until its first Lease write
    /// succeeds and a read after it answers, then fenced again once `limit` passes without a
    /// renewal.
    pub fn new(limit: Duration, start: Instant) -> Self {
        Self {
            limit,
            renewed: start,
            state: State::Fenced,
            reads: 0,
        }
    }

    /// Whether the worker may run jobs.
    pub fn is_live(&self) -> bool {
        self.state == State::Live
    }

    /// When to check the fence next; `None` while fenced.
    pub fn deadline(&self) -> Option<Instant> {
        self.is_live().then(|| self.renewed + self.limit)
    }

    /// Whether the last renewal is too old at `now` for jobs to run.
    pub fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.renewed) >= self.limit
    }

    /// Fences the worker if its renewal is too old at `now`; true when it just did (stop
    /// every job now).
    pub fn check(&mut self, now: Instant) -> bool {
        if self.is_live() && self.expired(now) {
            self.state = State::Fenced;
            return true;
        }
        false
    }

    /// Records a successful Lease write sent at `sent`, learnt at `now`, the last of a run of
    /// renewals that began at `streak`: the first success after a gap of the limit or more
    /// since the one before (or the start).
    ///
    /// A live worker whose run of renewals began after the last renewal it knew of was expired
    /// in between (a process paused, say), even if no check ran meanwhile: it fences.
    pub fn renewed(&mut self, sent: Instant, streak: Instant, now: Instant) -> Renewal {
        let gap = streak > self.renewed;
        self.renewed = self.renewed.max(sent);
        let newly_fenced = self.is_live() && (gap || self.expired(now));
        if newly_fenced {
            self.state = State::Fenced;
        }
        let read = (self.state == State::Fenced && !self.expired(now)).then(|| {
            self.reads += 1;
            self.state = State::Reading { read: self.reads };
            self.reads
        });
        Renewal { newly_fenced, read }
    }

    /// Whether the ConfigMap read tagged `read` and answered at `now` lifts the fence. A read
    /// that is not the awaited one changes nothing; the awaited one answered too late fences
    /// again until the next renewal.
    pub fn read(&mut self, read: u64, now: Instant) -> bool {
        if self.state != (State::Reading { read }) {
            return false;
        }
        if self.expired(now) {
            self.state = State::Fenced;
            return false;
        }
        self.state = State::Live;
        true
    }

    /// The read tagged `read` failed: stay fenced until the next renewal asks for another.
    pub fn read_failed(&mut self, read: u64) {
        if self.state == (State::Reading { read }) {
            self.state = State::Fenced;
        }
    }
}

#[cfg(test)]
mod tests {
    use swarm_protocol::fence::{default_margin, limit};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(8);

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A fence that renewed and read at `start` (read 1): live.
    fn live_from(start: Instant) -> Fence {
        let mut fence = Fence::new(LIMIT, start);
        assert_eq!(fence.renewed(start, start, start).read, Some(1));
        assert!(fence.read(1, start));
        fence
    }

    #[test]
    fn a_new_process_runs_nothing_before_its_first_renewal_and_a_read_after_it() {
        let start = Instant::now();
        let mut fence = Fence::new(LIMIT, start);
        assert!(!fence.is_live(), "its start is no renewal the operator saw");
        assert_eq!(fence.deadline(), None);
        assert!(!fence.check(start + secs(1.0)), "fenced already");
        let renewal = fence.renewed(start + secs(0.5), start + secs(0.5), start + secs(0.6));
        assert_eq!(
            renewal,
            Renewal {
                newly_fenced: false,
                read: Some(1)
            }
        );
        assert!(!fence.is_live(), "not before the read");
        assert!(fence.read(1, start + secs(0.7)));
        assert_eq!(fence.deadline(), Some(start + secs(0.5) + LIMIT));
    }

    #[test]
    fn the_margin_is_at_least_two_seconds_a_fifth_of_the_duration_and_at_most_half() {
        assert_eq!(default_margin(secs(10.0)), secs(2.0));
        assert_eq!(default_margin(secs(30.0)), secs(6.0));
        assert_eq!(limit(secs(10.0), default_margin(secs(10.0))), secs(8.0));
        assert_eq!(limit(secs(30.0), default_margin(secs(30.0))), secs(24.0));
        assert_eq!(limit(secs(2.0), default_margin(secs(2.0))), secs(1.0));
        assert_eq!(limit(secs(10.0), secs(9.0)), secs(5.0), "held to half");
    }

    #[test]
    fn a_worker_renewing_in_time_stays_live() {
        let start = Instant::now();
        let mut fence = live_from(start);
        assert_eq!(fence.deadline(), Some(start + LIMIT));
        assert!(!fence.check(start + secs(7.9)));
        assert_eq!(
            fence.renewed(start + secs(2.5), start, start + secs(7.9)),
            Renewal::default()
        );
        assert_eq!(fence.deadline(), Some(start + secs(10.5)));
        assert!(!fence.check(start + secs(10.0)));
        assert!(fence.is_live());
    }

    #[test]
    fn no_renewal_within_the_limit_fences_once() {
        let start = Instant::now();
        let mut fence = live_from(start);
        assert!(fence.check(start + LIMIT), "at the limit, not after it");
        assert!(!fence.is_live());
        assert_eq!(fence.deadline(), None);
        assert!(!fence.check(start + secs(20.0)), "fenced already");
    }

    #[test]
    fn the_send_time_counts_not_the_answer_time() {
        let start = Instant::now();
        let mut fence = live_from(start);
        // Sent at 1 s, answered at 6 s: the worker may run until 9 s, not 14 s.
        assert_eq!(
            fence.renewed(start + secs(1.0), start, start + secs(6.0)),
            Renewal::default()
        );
        assert!(fence.check(start + secs(9.0)));
    }

    #[test]
    fn renewals_missed_by_a_busy_reader_count_if_they_came_without_a_gap() {
        let start = Instant::now();
        let mut fence = live_from(start);
        // Renewed every 2.5 s from the start; the reader learns of the one sent at 20 s.
        assert_eq!(
            fence.renewed(start + secs(20.0), start, start + secs(20.1)),
            Renewal::default()
        );
        // A run that began at 30 s after a gap: expired in between.
        assert_eq!(
            fence.renewed(start + secs(40.0), start + secs(30.0), start + secs(40.1)),
            Renewal {
                newly_fenced: true,
                read: Some(2)
            }
        );
    }

    #[test]
    fn a_renewal_answered_after_the_limit_fences_even_without_a_check() {
        let start = Instant::now();
        let mut fence = live_from(start);
        // Sent before a pause, answered after it.
        assert_eq!(
            fence.renewed(start + secs(1.0), start, start + secs(30.0)),
            Renewal {
                newly_fenced: true,
                read: None
            },
            "stop every job, and wait for a renewal in time"
        );
        assert!(!fence.is_live());
    }

    #[test]
    fn a_renewal_sent_after_a_gap_longer_than_the_limit_fences_then_asks_for_a_read() {
        let start = Instant::now();
        let mut fence = live_from(start);
        // Paused from 1 s to 30 s: the first write after the pause succeeds before any check.
        let renewal = fence.renewed(start + secs(30.0), start + secs(30.0), start + secs(30.1));
        assert_eq!(
            renewal,
            Renewal {
                newly_fenced: true,
                read: Some(2)
            }
        );
        assert!(!fence.is_live());
        assert!(fence.read(2, start + secs(30.2)));
        assert!(fence.is_live());
    }

    #[test]
    fn a_fence_lifts_only_after_a_renewal_and_then_the_read_it_asked_for() {
        let start = Instant::now();
        let mut fence = live_from(start);
        assert!(fence.check(start + secs(9.0)));
        assert!(!fence.read(0, start + secs(9.5)), "no read was asked for");
        let renewal = fence.renewed(start + secs(10.0), start + secs(10.0), start + secs(10.1));
        assert!(!renewal.newly_fenced);
        let read = renewal
            .read
            .expect("a renewal of a fenced worker asks for a fresh read");
        assert_eq!(
            fence.renewed(start + secs(11.0), start + secs(11.0), start + secs(11.1)),
            Renewal::default(),
            "one read at a time"
        );
        assert!(
            !fence.read(read + 1, start + secs(11.2)),
            "not the awaited read"
        );
        assert!(!fence.is_live());
        assert!(fence.read(read, start + secs(11.3)));
        assert!(fence.is_live());
        assert_eq!(fence.deadline(), Some(start + secs(19.0)));
    }

    #[test]
    fn a_read_answered_after_the_renewal_expired_again_keeps_the_fence() {
        let start = Instant::now();
        let mut fence = live_from(start);
        fence.check(start + secs(9.0));
        let read = fence
            .renewed(start + secs(10.0), start + secs(10.0), start + secs(10.0))
            .read
            .expect("a read is asked for");
        assert!(!fence.read(read, start + secs(18.0)));
        assert!(!fence.is_live());
        let renewal = fence.renewed(start + secs(18.5), start + secs(18.5), start + secs(18.6));
        assert_eq!(renewal.read, Some(read + 1));
    }

    #[test]
    fn a_failed_read_waits_for_the_next_renewal() {
        let start = Instant::now();
        let mut fence = live_from(start);
        fence.check(start + secs(9.0));
        let read = fence
            .renewed(start + secs(10.0), start + secs(10.0), start + secs(10.0))
            .read
            .expect("a read is asked for");
        fence.read_failed(read);
        assert!(!fence.read(read, start + secs(10.5)));
        assert_eq!(
            fence.renewed(start + secs(11.0), start + secs(11.0), start + secs(11.0)),
            Renewal {
                newly_fenced: false,
                read: Some(read + 1)
            }
        );
    }
}
