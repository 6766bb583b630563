//! Which jobs a worker runs and which config version it acknowledges, with no clock and no I/O.
//!
//! [`crate::fence::Fence`] decides, from the time of each fence read, which jobs of an entry may
//! run; this part keeps the rules that do not depend on time:
//! - a worker runs each job at most once, stopping what an entry no longer lists before it
//!   starts what the entry adds;
//! - it acknowledges a version higher than the last it acknowledged, and only once it runs
//!   exactly that version's entry (or the entry has no jobs, which it then runs exactly too);
//! - after [`Handoff::terminate`] nothing starts again, and it is done once the Lease carries a
//!   version whose entry has no jobs.

/// This pod's entry as a fence read showed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The config version; `None` when the read found no ConfigMap or no config in it.
    pub version: Option<u64>,
    /// The entry's jobs, each once, in the entry's order; empty when the config has no entry
    /// for this pod.
    pub jobs: Vec<String>,
}

impl Entry {
    /// The entry of `version` listing `jobs`, each kept once (the first time it is listed).
    pub fn new<S: Into<String>>(version: Option<u64>, jobs: impl IntoIterator<Item = S>) -> Self {
        let mut unique: Vec<String> = Vec::new();
        for job in jobs {
            let job = job.into();
            if !unique.contains(&job) {
                unique.push(job);
            }
        }
        Self {
            version,
            jobs: unique,
        }
    }
}

/// An acknowledgement handed to the Lease writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ack {
    version: u64,
    /// Whether the version's own entry has no jobs.
    empty: bool,
}

/// One pod instance's jobs and acknowledgements.
#[derive(Clone, Debug, Default)]
pub struct Handoff {
    /// Jobs that run or are being started, in start order; a job leaves it when its stop is
    /// handed out.
    running: Vec<String>,
    /// The last acknowledgement handed out.
    acked: Option<Ack>,
    /// The last version the Lease writer confirmed.
    written: Option<u64>,
    terminating: bool,
}

impl Handoff {
    /// A worker that runs nothing and has acknowledged nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running jobs that `wanted` does not list, in start order, counted as stopped from
    /// here on: stop each and wait before anything else.
    pub fn stop_unlisted(&mut self, wanted: &[String]) -> Vec<String> {
        let (keep, stop) = self.running.drain(..).partition(|job| wanted.contains(job));
        self.running = keep;
        stop
    }

    /// Every running job, counted as stopped from here on.
    pub fn stop_all(&mut self) -> Vec<String> {
        std::mem::take(&mut self.running)
    }

    /// The jobs of `wanted` that do not run yet, in its order, counted as running from here on
    /// (so that a report written before they start never misses one); none while terminating.
    pub fn start_missing(&mut self, wanted: &[String]) -> Vec<String> {
        if self.terminating {
            return Vec::new();
        }
        let mut start = Vec::new();
        for job in wanted {
            if !self.running.contains(job) {
                self.running.push(job.clone());
                start.push(job.clone());
            }
        }
        start
    }

    /// The version of `entry` to acknowledge, once every stop and start for it has finished:
    /// its version, if it has one higher than the last acknowledged, and the worker runs
    /// exactly the entry: `runs_entry` (a read that gave a permit while not terminating) or an
    /// entry with no jobs. Each version is handed out once.
    pub fn acknowledge(&mut self, entry: &Entry, runs_entry: bool) -> Option<u64> {
        let version = entry.version?;
        let newer = self.acked.is_none_or(|acked| version > acked.version);
        if !newer || !(runs_entry || entry.jobs.is_empty()) {
            return None;
        }
        self.acked = Some(Ack {
            version,
            empty: entry.jobs.is_empty(),
        });
        Some(version)
    }

    /// Records that the Lease now carries `version` as acknowledged.
    pub fn written(&mut self, version: u64) {
        self.written = Some(version);
    }

    /// Starts terminating (SIGTERM): nothing starts again; stop every job with
    /// [`Handoff::stop_all`].
    pub fn terminate(&mut self) {
        self.terminating = true;
    }

    /// Whether the worker may exit: it terminates, runs nothing, and the Lease carries the
    /// last acknowledgement handed out, of a version whose entry has no jobs.
    pub fn done(&self) -> bool {
        self.terminating
            && self.running.is_empty()
            && self
                .acked
                .is_some_and(|ack| ack.empty && self.written == Some(ack.version))
    }

    /// Whether [`Handoff::terminate`] was called.
    pub fn terminating(&self) -> bool {
        self.terminating
    }

    /// The jobs running or being started, in start order.
    pub fn running(&self) -> &[String] {
        &self.running
    }

    /// The last version handed out to acknowledge, if any.
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

    #[test]
    fn an_entry_lists_each_job_once_in_its_order() {
        assert_eq!(Entry::new(Some(1), ["b", "a", "b"]).jobs, jobs(&["b", "a"]));
    }

    #[test]
    fn a_change_stops_what_the_entry_no_longer_lists_and_starts_only_what_it_adds() {
        let mut worker = Handoff::new();
        assert_eq!(
            worker.start_missing(&jobs(&["a", "b", "c"])),
            jobs(&["a", "b", "c"])
        );
        let wanted = jobs(&["c", "d", "a"]);
        assert_eq!(worker.stop_unlisted(&wanted), jobs(&["b"]));
        assert_eq!(worker.running(), jobs(&["a", "c"]).as_slice());
        assert_eq!(worker.start_missing(&wanted), jobs(&["d"]));
        assert_eq!(worker.start_missing(&wanted), Vec::<String>::new());
        assert_eq!(worker.running(), jobs(&["a", "c", "d"]).as_slice());
    }

    #[test]
    fn only_a_newer_version_the_worker_runs_exactly_is_acknowledged() {
        let mut worker = Handoff::new();
        let two = Entry::new(Some(2), ["a"]);
        assert_eq!(worker.acknowledge(&two, false), None, "a runs nowhere");
        assert_eq!(worker.acknowledge(&two, true), Some(2));
        assert_eq!(worker.acknowledge(&two, true), None, "handed out once");
        assert_eq!(worker.acknowledge(&Entry::new(Some(1), ["a"]), true), None);
        assert_eq!(worker.acknowledge(&Entry::new(None, ["a"]), true), None);
        let empty = Entry::new(Some(3), Vec::<String>::new());
        assert_eq!(worker.acknowledge(&empty, false), Some(3), "nothing runs");
        assert_eq!(worker.acknowledged(), Some(3));
    }

    #[test]
    fn a_terminating_worker_starts_nothing_and_is_done_once_an_empty_entry_is_written() {
        let mut worker = Handoff::new();
        worker.start_missing(&jobs(&["a", "b"]));
        worker.acknowledge(&Entry::new(Some(1), ["a", "b"]), true);
        worker.written(1);
        worker.terminate();
        assert_eq!(worker.stop_all(), jobs(&["a", "b"]));
        assert!(worker.start_missing(&jobs(&["a"])).is_empty());
        assert!(!worker.done(), "version 1 lists jobs");
        let empty = Entry::new(Some(2), Vec::<String>::new());
        assert_eq!(worker.acknowledge(&empty, false), Some(2));
        assert!(!worker.done(), "not written yet");
        worker.written(2);
        assert!(worker.done());
    }

    #[test]
    fn a_worker_whose_last_acknowledged_entry_is_empty_is_done_at_sigterm() {
        let mut worker = Handoff::new();
        worker.acknowledge(&Entry::new(Some(7), Vec::<String>::new()), true);
        worker.written(7);
        assert!(!worker.done());
        worker.terminate();
        assert!(worker.done());
    }
}
