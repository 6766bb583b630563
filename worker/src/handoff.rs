//! The worker's side of the acknowledged handoff as a state machine with no I/O: which jobs to
//! stop and start for a config version, and when that version may be acknowledged.
//!
//! The shell feeds it config versions ([`Handoff::offer`]) and the outcome of each stop and
//! start, and asks it what to acknowledge ([`Handoff::take_ack`]). Keeping every rule of the
//! protocol here lets the tests check them without an API server:
//! - a version at or below the one applied is a replay and is ignored;
//! - every stop of a version finishes before any of its starts begins;
//! - a version is acknowledged only once its stops and starts are done, and at once when it
//!   changes nothing;
//! - after [`Handoff::terminate`] nothing starts again and only versions whose own entry has no
//!   jobs are acknowledged; the worker is done once one such acknowledgement is written;
//! - after [`Handoff::fence`] nothing runs, and the next version offered is applied even if it
//!   is the one applied before.

/// What one config version asks of this worker: stop `stop` and wait, then start `start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The config version.
    pub version: u64,
    /// Running jobs the version's entry no longer lists, in the order they started.
    pub stop: Vec<String>,
    /// Jobs the entry lists that do not run yet, in the entry's order.
    pub start: Vec<String>,
}

impl Change {
    /// Whether the version leaves this worker's jobs as they are.
    pub fn is_empty(&self) -> bool {
        self.stop.is_empty() && self.start.is_empty()
    }
}

/// One pod instance's progress through the config versions.
#[derive(Clone, Debug, Default)]
pub struct Handoff {
    /// Jobs that run or are being started, in start order.
    running: Vec<String>,
    /// The highest version offered and not ignored.
    applied: Option<u64>,
    /// The version being applied.
    pending: Option<Pending>,
    /// The last acknowledgement handed to the Lease writer.
    sent: Option<Ack>,
    /// The last acknowledgement the Lease writer confirmed.
    acked: Option<Ack>,
    terminating: bool,
    /// Fenced: the version applied is to be applied again.
    reapply: bool,
}

#[derive(Clone, Debug)]
struct Pending {
    version: u64,
    /// Stops not confirmed yet.
    stop: Vec<String>,
    /// Starts not confirmed yet.
    start: Vec<String>,
    /// The version's own entry.
    wanted: Vec<String>,
    /// Whether `start` was handed out by [`Handoff::starting`].
    starting: bool,
    /// Whether the version's own entry has no jobs.
    empty: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ack {
    version: u64,
    /// Whether the version's own entry has no jobs.
    empty: bool,
}

impl Handoff {
    /// A worker that runs nothing and has applied no version.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers config version `version`, whose entry for this pod lists `entry` (empty when the
    /// config has no entry for it).
    ///
    /// Returns what to do, or `None` when the version is to be ignored: a replay (at or below
    /// the version applied, unless a fence asked for it to be applied again), or, while
    /// terminating, an entry that still lists jobs. A new offer replaces a version whose change
    /// has not finished.
    pub fn offer(&mut self, version: u64, entry: &[String]) -> Option<Change> {
        let fresh = match self.applied {
            None => true,
            Some(applied) => version > applied || (version == applied && self.reapply),
        };
        if !fresh {
            return None;
        }
        self.applied = Some(version);
        self.reapply = false;
        let mut wanted: Vec<String> = Vec::with_capacity(entry.len());
        for job in entry {
            if !wanted.contains(job) {
                wanted.push(job.clone());
            }
        }
        if self.terminating && !wanted.is_empty() {
            self.pending = None;
            return None;
        }
        let stop: Vec<String> = self
            .running
            .iter()
            .filter(|job| !wanted.contains(job))
            .cloned()
            .collect();
        let start: Vec<String> = wanted
            .iter()
            .filter(|job| !self.running.contains(job))
            .cloned()
            .collect();
        self.pending = Some(Pending {
            version,
            stop: stop.clone(),
            start: start.clone(),
            starting: false,
            empty: wanted.is_empty(),
            wanted,
        });
        Some(Change {
            version,
            stop,
            start,
        })
    }

    /// Records that `job` has stopped. A job the pending version lists (its stop was asked for
    /// by a version this one replaced) is to be started again.
    pub fn stopped(&mut self, job: &str) {
        self.running.retain(|running| running != job);
        if let Some(pending) = &mut self.pending {
            pending.stop.retain(|stop| stop != job);
            let wanted = pending.wanted.iter().any(|wanted| wanted == job);
            if wanted && !pending.starting && !pending.start.iter().any(|start| start == job) {
                pending.start.push(job.to_string());
            }
        }
    }

    /// The jobs of the pending version to start now, counted as running from here on (so a
    /// report written before they start never misses one). Empty until every stop of that
    /// version has finished, once handed out, and while terminating.
    pub fn starting(&mut self) -> Vec<String> {
        let Some(pending) = &mut self.pending else {
            return Vec::new();
        };
        if self.terminating || pending.starting || !pending.stop.is_empty() {
            return Vec::new();
        }
        pending.starting = true;
        for job in &pending.start {
            if !self.running.contains(job) {
                self.running.push(job.clone());
            }
        }
        pending.start.clone()
    }

    /// Records that `job`, handed out by [`Handoff::starting`], has started.
    pub fn started(&mut self, job: &str) {
        if let Some(pending) = &mut self.pending
            && pending.starting
        {
            pending.start.retain(|start| start != job);
        }
    }

    /// The version to acknowledge now, if the pending one has finished;
    /// handing it out clears it, so each version is handed out once.
    pub fn take_ack(&mut self) -> Option<u64> {
        let pending = self.pending.as_ref()?;
        let finished = pending.stop.is_empty() && pending.start.is_empty();
        if !finished {
            return None;
        }
        let pending = self.pending.take()?;
        let ack = Ack {
            version: pending.version,
            empty: pending.empty,
        };
        self.sent = Some(ack);
        Some(ack.version)
    }

    /// Records that the Lease now carries `version` as acknowledged.
    pub fn acked(&mut self, version: u64) {
        if let Some(sent) = self.sent
            && sent.version == version
        {
            self.acked = Some(sent);
        }
    }

    /// Starts terminating (SIGTERM): the pending version is abandoned, nothing starts again.
    /// Returns the jobs to stop, all of them; report each with [`Handoff::stopped`].
    pub fn terminate(&mut self) -> Vec<String> {
        self.terminating = true;
        self.pending = None;
        self.running.clone()
    }

    /// Fences the worker (its Lease may look expired): the pending version is abandoned and
    /// the next version offered is applied from scratch, even the one applied now. Returns the
    /// jobs to stop, all of them; report each with [`Handoff::stopped`].
    pub fn fence(&mut self) -> Vec<String> {
        self.pending = None;
        self.reapply = true;
        self.running.clone()
    }

    /// Whether the worker may exit: it terminates, runs nothing, and the Lease acknowledges a
    /// version in which its own entry has no jobs.
    pub fn done(&self) -> bool {
        self.terminating && self.running.is_empty() && self.acked.is_some_and(|ack| ack.empty)
    }

    /// Whether [`Handoff::terminate`] was called.
    pub fn terminating(&self) -> bool {
        self.terminating
    }

    /// The jobs running or being started, in start order.
    pub fn running(&self) -> &[String] {
        &self.running
    }

    /// The highest version applied (or being applied), if any.
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// The version the Lease acknowledges, as last confirmed.
    pub fn acknowledged(&self) -> Option<u64> {
        self.acked.map(|ack| ack.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    /// Runs a change to the end, as the shell does, and returns the version to acknowledge.
    fn apply(worker: &mut Handoff, change: &Change) -> Option<u64> {
        for job in &change.stop {
            worker.stopped(job);
        }
        for job in worker.starting() {
            worker.started(&job);
        }
        worker.take_ack()
    }

    #[test]
    fn a_first_version_starts_the_entry_and_is_acknowledged_after_the_starts() {
        let mut worker = Handoff::new();
        let change = worker.offer(1, &jobs(&["a", "b"])).expect("a change");
        assert_eq!(
            change,
            Change {
                version: 1,
                stop: vec![],
                start: jobs(&["a", "b"])
            }
        );
        assert_eq!(worker.take_ack(), None, "nothing started yet");
        let start = worker.starting();
        assert_eq!(start, jobs(&["a", "b"]));
        assert_eq!(worker.running(), jobs(&["a", "b"]).as_slice());
        worker.started("a");
        assert_eq!(worker.take_ack(), None, "b is not started yet");
        worker.started("b");
        assert_eq!(worker.take_ack(), Some(1));
        assert_eq!(worker.take_ack(), None, "each version is handed out once");
    }

    #[test]
    fn a_replayed_or_stale_version_is_ignored() {
        let mut worker = Handoff::new();
        let change = worker.offer(5, &jobs(&["a"])).unwrap();
        assert_eq!(apply(&mut worker, &change), Some(5));
        worker.acked(5);
        assert_eq!(worker.offer(5, &jobs(&["a"])), None, "a replay");
        assert_eq!(worker.offer(4, &jobs(&["b"])), None, "an older version");
        assert_eq!(worker.offer(3, &[]), None);
        assert_eq!(worker.running(), jobs(&["a"]).as_slice());
        assert_eq!(worker.applied(), Some(5));
        assert!(worker.offer(6, &jobs(&["b"])).is_some());
    }

    #[test]
    fn a_version_stops_what_its_entry_no_longer_lists_before_it_starts_anything() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a", "b", "c"])).unwrap();
        apply(&mut worker, &first);
        let change = worker.offer(2, &jobs(&["c", "d", "a"])).unwrap();
        assert_eq!(change.stop, jobs(&["b"]));
        assert_eq!(change.start, jobs(&["d"]));
        assert_eq!(worker.starting(), Vec::<String>::new(), "b still runs");
        assert_eq!(worker.take_ack(), None);
        worker.stopped("b");
        assert_eq!(worker.running(), jobs(&["a", "c"]).as_slice());
        assert_eq!(worker.starting(), jobs(&["d"]));
        assert_eq!(worker.starting(), Vec::<String>::new(), "handed out once");
        assert_eq!(worker.take_ack(), None, "d is not started yet");
        worker.started("d");
        assert_eq!(worker.take_ack(), Some(2));
        assert_eq!(worker.running(), jobs(&["a", "c", "d"]).as_slice());
    }

    #[test]
    fn a_version_is_acknowledged_only_after_its_stops_are_confirmed() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a", "b"])).unwrap();
        apply(&mut worker, &first);
        let change = worker.offer(2, &jobs(&["a"])).unwrap();
        assert_eq!(change.stop, jobs(&["b"]));
        assert!(change.start.is_empty());
        assert_eq!(worker.starting(), Vec::<String>::new());
        assert_eq!(worker.take_ack(), None, "b has not stopped");
        worker.stopped("b");
        assert_eq!(worker.take_ack(), Some(2));
    }

    #[test]
    fn a_version_that_changes_nothing_is_acknowledged_at_once() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a"])).unwrap();
        apply(&mut worker, &first);
        let same = worker.offer(2, &jobs(&["a"])).unwrap();
        assert!(same.is_empty());
        assert_eq!(worker.take_ack(), Some(2));
        let none = worker.offer(3, &[]).unwrap();
        assert_eq!(none.stop, jobs(&["a"]));
        apply(&mut worker, &none);
        let still_none = worker.offer(4, &[]).unwrap();
        assert!(still_none.is_empty());
        assert_eq!(worker.take_ack(), Some(4));
    }

    #[test]
    fn a_repeated_job_in_the_entry_starts_once() {
        let mut worker = Handoff::new();
        let change = worker.offer(1, &jobs(&["a", "a"])).unwrap();
        assert_eq!(change.start, jobs(&["a"]));
    }

    #[test]
    fn a_newer_version_replaces_one_whose_change_has_not_finished() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a", "b"])).unwrap();
        apply(&mut worker, &first);
        worker.offer(2, &jobs(&["a"])).unwrap();
        // b's stop is under way when version 3 arrives; it gives b back.
        let third = worker.offer(3, &jobs(&["a", "b", "c"])).unwrap();
        assert_eq!(third.stop, Vec::<String>::new());
        assert_eq!(third.start, jobs(&["c"]));
        worker.stopped("b");
        assert_eq!(worker.take_ack(), None, "b is to run again");
        assert_eq!(worker.starting(), jobs(&["c", "b"]));
        worker.started("c");
        worker.started("b");
        assert_eq!(worker.take_ack(), Some(3));
        assert_eq!(worker.running(), jobs(&["a", "c", "b"]).as_slice());
    }

    #[test]
    fn a_terminating_worker_stops_everything_and_never_starts_a_job_again() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a", "b"])).unwrap();
        apply(&mut worker, &first);
        worker.acked(1);
        assert_eq!(worker.terminate(), jobs(&["a", "b"]));
        worker.stopped("a");
        worker.stopped("b");
        assert!(!worker.done(), "version 1 still lists jobs");
        assert_eq!(worker.offer(2, &jobs(&["a", "c"])), None);
        assert_eq!(worker.starting(), Vec::<String>::new());
        assert_eq!(
            worker.take_ack(),
            None,
            "an entry with jobs is never acknowledged"
        );
        let empty = worker.offer(3, &[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(worker.take_ack(), Some(3));
        assert!(!worker.done(), "not written yet");
        worker.acked(3);
        assert!(worker.done());
        assert!(worker.running().is_empty());
    }

    #[test]
    fn a_terminating_worker_abandons_the_version_it_was_applying() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a"])).unwrap();
        apply(&mut worker, &first);
        worker.offer(2, &jobs(&["b"])).unwrap();
        worker.stopped("a");
        assert_eq!(worker.terminate(), Vec::<String>::new());
        assert_eq!(worker.starting(), Vec::<String>::new(), "b never starts");
        assert_eq!(worker.take_ack(), None);
        assert_eq!(worker.offer(2, &jobs(&["b"])), None, "a replay");
    }

    #[test]
    fn a_fenced_worker_stops_everything_and_applies_the_same_version_again_afterwards() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a", "b"])).unwrap();
        apply(&mut worker, &first);
        worker.acked(1);
        worker.offer(2, &jobs(&["a", "c"])).unwrap();
        assert_eq!(worker.fence(), jobs(&["a", "b"]), "version 2 is abandoned");
        worker.stopped("a");
        worker.stopped("b");
        assert!(worker.running().is_empty());
        assert_eq!(worker.starting(), Vec::<String>::new());
        assert_eq!(worker.take_ack(), None);
        assert_eq!(worker.offer(1, &jobs(&["a"])), None, "older than applied");
        let again = worker.offer(2, &jobs(&["a", "c"])).expect("applied again");
        assert_eq!(again.start, jobs(&["a", "c"]));
        assert_eq!(apply(&mut worker, &again), Some(2));
        assert_eq!(worker.offer(2, &jobs(&["a", "c"])), None, "a replay again");
    }

    #[test]
    fn an_acknowledgement_written_after_sigterm_for_an_entry_with_jobs_does_not_end_the_worker() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &jobs(&["a"])).unwrap();
        assert_eq!(apply(&mut worker, &first), Some(1));
        worker.terminate();
        worker.stopped("a");
        worker.acked(1);
        assert!(!worker.done());
        assert_eq!(worker.acknowledged(), Some(1));
    }

    #[test]
    fn a_worker_without_jobs_whose_empty_entry_is_acknowledged_is_done_at_sigterm() {
        let mut worker = Handoff::new();
        let first = worker.offer(7, &[]).unwrap();
        assert_eq!(apply(&mut worker, &first), Some(7));
        worker.acked(7);
        assert!(!worker.done());
        assert!(worker.terminate().is_empty());
        assert!(worker.done());
    }

    #[test]
    fn a_confirmation_of_another_version_than_the_one_sent_is_not_an_acknowledgement() {
        let mut worker = Handoff::new();
        let first = worker.offer(1, &[]).unwrap();
        apply(&mut worker, &first);
        worker.acked(9);
        assert_eq!(worker.acknowledged(), None);
        worker.acked(1);
        assert_eq!(worker.acknowledged(), Some(1));
    }
}
