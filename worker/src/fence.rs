//! The fence, with no I/O: which jobs a worker may run, until when, whether it is ready, and
//! when it reads next, from the fence reads it sent and when.
//!
//! A fence read is a GET of the worker's own ConfigMap with no `resourceVersion`, a quorum read:
//! it shows every write answered before it was sent. A read sent at `s` gives the jobs of the
//! entry it shows a permit until `s + F` on the worker's monotonic clock; the operator grants a
//! job revoked from this worker elsewhere only once every such permit has lapsed (or the worker
//! acknowledged the revoke), so the worker runs exactly the jobs of its last fence read that
//! still hold a permit, and a process starts with none.
//!
//! The shell feeds [`Fence`] what happens (a read answered, a read failed, a watch event,
//! SIGTERM) with the instant it happened, then asks [`Fence::next`] what to do until it answers
//! `None`, carrying out each [`Action`] before it asks again. Every instant is the caller's, so a
//! simulation can drive it on virtual time.

use std::time::Duration;

use swarm_protocol::fence::{read_interval, ready_within, retry_delay, shed_retry_delay};
use tokio::time::Instant;

use crate::handoff::{Entry, Handoff};

/// What the worker does next; carry it out completely before calling [`Fence::next`] again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop these jobs and wait until each has stopped.
    Stop(Vec<String>),
    /// Set the permit of every running job to `until` (the jobs already running are listed by
    /// the read that gives it), then start `start` (possibly none) with it.
    Run {
        /// When the permit lapses: the read's send plus the permit `F`.
        until: Instant,
        /// Jobs to start, in the entry's order.
        start: Vec<String>,
    },
    /// Write the Lease acknowledging this version; report the write with [`Fence::written`].
    Acknowledge(u64),
}

/// A read answered and not yet fully applied.
#[derive(Clone, Debug)]
struct Shown {
    sent: Instant,
    entry: Entry,
}

/// One worker process's fence.
#[derive(Clone, Debug)]
pub struct Fence {
    permit: Duration,
    handoff: Handoff,
    /// When the running jobs' permit lapses; `None` while nothing runs.
    until: Option<Instant>,
    /// When the last successful read was sent.
    last_sent: Option<Instant>,
    /// Failed reads since the last success.
    failures: u32,
    next_read: Instant,
    /// The last watch event not yet covered by a read sent after it.
    wake: Option<Instant>,
    shown: Option<Shown>,
    /// The config version of the last read.
    version: Option<u64>,
}

impl Fence {
    /// The fence of a process started at `start` with permit `permit`: it runs nothing, is not
    /// ready, and reads at once.
    pub fn new(permit: Duration, start: Instant) -> Self {
        Self {
            permit,
            handoff: Handoff::new(),
            until: None,
            last_sent: None,
            failures: 0,
            next_read: start,
            wake: None,
            shown: None,
            version: None,
        }
    }

    /// A fence read sent at `sent` answered with `entry`; [`Fence::next`] applies it. The next
    /// read is due half a permit after `sent`, or at once for a watch event that came after it.
    pub fn read(&mut self, sent: Instant, entry: Entry) {
        self.last_sent = Some(self.last_sent.map_or(sent, |last| last.max(sent)));
        self.failures = 0;
        self.next_read = sent + read_interval(self.permit);
        match self.wake {
            Some(wake) if wake > sent => self.next_read = self.next_read.min(wake),
            _ => self.wake = None,
        }
        self.version = entry.version;
        self.shown = Some(Shown { sent, entry });
    }

    /// A fence read failed (or got no answer in time) at `now`: retry after 1 s, doubling, at
    /// most an eighth of the permit apart.
    pub fn read_failed(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        self.next_read = now + retry_delay(self.failures, self.permit);
    }

    /// The API server shed a fence read at `now` (429): the next read goes a quarter to half
    /// the permit later, at `draw` (in [0, 1)) between the two, not after the quick retries of
    /// a failure (see [`shed_retry_delay`]). It counts as a failure for the retries after it.
    pub fn read_shed(&mut self, now: Instant, draw: f64) {
        self.failures = self.failures.saturating_add(1);
        self.next_read = now + shed_retry_delay(self.permit, draw);
    }

    /// A watch event for the ConfigMap came at `now`: it proves nothing, but the next read is
    /// due at once.
    pub fn watched(&mut self, now: Instant) {
        self.wake = Some(now);
        self.next_read = self.next_read.min(now);
    }

    /// SIGTERM: nothing runs from here on (the stops come from [`Fence::next`]) and nothing
    /// starts again; the worker is not ready.
    pub fn terminate(&mut self) {
        self.handoff.terminate();
    }

    /// The Lease now carries `version` as acknowledged.
    pub fn written(&mut self, version: u64) {
        self.handoff.written(version);
    }

    /// What to do at `now`, or `None` once everything asked for is done: first stop jobs whose
    /// permit lapsed (or every job, terminating); then apply the last read: stop what it does
    /// not list, extend the permit and start what it adds, and acknowledge its version. A read
    /// answered (or applied) at or after its send plus the permit gives no permit.
    pub fn next(&mut self, now: Instant) -> Option<Action> {
        if self.until.is_some_and(|until| until <= now) || self.handoff.terminating() {
            let stop = self.handoff.stop_all();
            self.until = None;
            if !stop.is_empty() {
                return Some(Action::Stop(stop));
            }
        }
        let shown = self.shown.as_ref()?;
        let until = shown.sent + self.permit;
        let permitted = !self.handoff.terminating() && now < until;
        let wanted: &[String] = if permitted { &shown.entry.jobs } else { &[] };
        let stop = self.handoff.stop_unlisted(wanted);
        if self.handoff.running().is_empty() {
            self.until = None;
        }
        if !stop.is_empty() {
            return Some(Action::Stop(stop));
        }
        if !wanted.is_empty() {
            let start = self.handoff.start_missing(wanted);
            if self.until != Some(until) || !start.is_empty() {
                self.until = Some(until);
                return Some(Action::Run { until, start });
            }
        }
        let shown = self.shown.take()?;
        self.handoff
            .acknowledge(&shown.entry, permitted)
            .map(Action::Acknowledge)
    }

    /// The permit `F`.
    pub fn permit(&self) -> Duration {
        self.permit
    }

    /// The jobs that run (or are being started), in start order; a job leaves the list when
    /// its stop is handed out.
    pub fn running(&self) -> &[String] {
        self.handoff.running()
    }

    /// When the running jobs' permit lapses (call [`Fence::next`] then); `None` while nothing
    /// runs.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    /// When to send the next fence read (once the one in flight, if any, has answered).
    pub fn next_read_at(&self) -> Instant {
        self.next_read
    }

    /// Whether the worker answers ready at `now`: not terminating, and its last successful read
    /// was sent less than three fifths of the permit before.
    pub fn ready(&self, now: Instant) -> bool {
        self.ready_until().is_some_and(|until| now < until)
    }

    /// Until when the worker answers ready, if at all.
    pub fn ready_until(&self) -> Option<Instant> {
        let sent = self.last_sent.filter(|_| !self.handoff.terminating())?;
        Some(sent + ready_within(self.permit))
    }

    /// The config version of the last read, `None` before the first or when it found no
    /// config.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// The last version handed out to acknowledge.
    pub fn acknowledged(&self) -> Option<u64> {
        self.handoff.acknowledged()
    }

    /// Whether [`Fence::terminate`] was called.
    pub fn terminating(&self) -> bool {
        self.handoff.terminating()
    }

    /// Whether a terminating worker may exit: it runs nothing and its Lease carries a version
    /// whose entry has no jobs.
    pub fn done(&self) -> bool {
        self.handoff.done()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    /// Carries out every action due at `now` at once, as the traces assume; returns the
    /// acknowledgement among them.
    fn settle(fence: &mut Fence, now: Instant) -> Option<u64> {
        let mut ack = None;
        while let Some(action) = fence.next(now) {
            if let Action::Acknowledge(version) = action {
                assert_eq!(ack, None, "one acknowledgement per step");
                ack = Some(version);
            }
        }
        ack
    }

    fn strings(value: &Value) -> Vec<String> {
        let list = value.as_array().expect("a list of jobs");
        list.iter()
            .map(|job| job.as_str().unwrap().to_string())
            .collect()
    }

    /// One step of a trace: the event, then every expected field.
    fn step(
        fence: &mut Option<Fence>,
        permit: Duration,
        at: impl Fn(&Value) -> Instant,
        s: &Value,
    ) {
        let now = at(&s["at"]);
        let event = s["event"].as_str().unwrap();
        if event == "start" {
            *fence = Some(Fence::new(permit, now));
        }
        let fence = fence.as_mut().expect("the trace starts with start");
        match event {
            "read" => fence.read(
                at(&s["sentAt"]),
                Entry::new(s["version"].as_u64(), strings(&s["jobs"])),
            ),
            "readFailed" => fence.read_failed(now),
            "watch" => fence.watched(now),
            "sigterm" => fence.terminate(),
            "start" | "tick" => {}
            other => panic!("unknown event {other}"),
        }
        let ack = settle(fence, now);
        let want = &s["expect"];
        let mut running = fence.running().to_vec();
        running.sort();
        assert_eq!(running, strings(&want["running"]), "running");
        let seconds = |instant: Instant| {
            let zero = at(&Value::from(0));
            instant.duration_since(zero).as_secs_f64()
        };
        let close = |got: Option<Instant>, want: &Value| match (got, want.as_f64()) {
            (None, None) => true,
            (Some(got), Some(want)) => (seconds(got) - want).abs() < 1e-6,
            _ => false,
        };
        assert!(
            close(fence.until(), &want["until"]),
            "until {:?}",
            fence.until().map(seconds)
        );
        assert_eq!(fence.ready(now), want["ready"].as_bool().unwrap(), "ready");
        assert_eq!(ack, want["ack"].as_u64(), "ack");
        let next = fence.next_read_at();
        assert!(
            close(Some(next), &want["nextReadAt"]),
            "nextReadAt {}",
            seconds(next)
        );
    }

    /// `protocol/vectors/fence.json`'s traces, which the Go and Python workers replay too.
    #[test]
    fn the_fence_follows_every_trace_of_the_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../protocol/vectors/fence.json"
        );
        let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let zero = Instant::now();
        let at = |value: &Value| zero + Duration::from_secs_f64(value.as_f64().unwrap());
        for trace in file["traces"].as_array().unwrap() {
            let name = trace["name"].as_str().unwrap();
            let permit = Duration::from_secs(trace["permitSeconds"].as_u64().unwrap());
            let mut fence = None;
            for (n, s) in trace["steps"].as_array().unwrap().iter().enumerate() {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    step(&mut fence, permit, at, s)
                }));
                if let Err(panic) = result {
                    let why = panic.downcast_ref::<String>().cloned().unwrap_or_default();
                    panic!("{name}, step {n} ({s}): {why}");
                }
            }
        }
    }

    #[test]
    fn a_shed_read_is_tried_again_a_quarter_to_half_the_permit_later_and_a_failure_soon() {
        let start = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(30), start);
        fence.read(start, Entry::new(Some(1), ["a"]));
        let shed_at = start + Duration::from_secs(15);
        fence.read_shed(shed_at, 0.5);
        assert_eq!(
            fence.next_read_at(),
            shed_at + Duration::from_millis(11_250)
        );
        // Still within the permit: one more read fits before it lapses at 30 s.
        assert!(fence.next_read_at() < start + Duration::from_secs(30));
        let failed_at = fence.next_read_at();
        fence.read_failed(failed_at);
        assert!(fence.next_read_at() - failed_at <= Duration::from_millis(3750));
    }

    #[test]
    fn a_read_that_drops_a_job_stops_it_before_the_permit_of_the_others_is_extended() {
        let start = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(30), start);
        fence.read(start, Entry::new(Some(1), ["a", "b"]));
        let until = start + Duration::from_secs(30);
        let run = Action::Run {
            until,
            start: jobs(&["a", "b"]),
        };
        assert_eq!(fence.next(start), Some(run));
        assert_eq!(fence.next(start), Some(Action::Acknowledge(1)));
        assert_eq!(fence.next(start), None);
        let sent = start + Duration::from_secs(15);
        fence.read(sent, Entry::new(Some(2), ["a", "c"]));
        assert_eq!(fence.next(sent), Some(Action::Stop(jobs(&["b"]))));
        assert_eq!(fence.until(), Some(until), "b's permit is not extended");
        let run = Action::Run {
            until: sent + Duration::from_secs(30),
            start: jobs(&["c"]),
        };
        assert_eq!(fence.next(sent), Some(run));
        assert_eq!(fence.next(sent), Some(Action::Acknowledge(2)));
    }

    #[test]
    fn a_read_that_lapses_while_its_stops_run_starts_nothing_and_stops_the_rest() {
        let start = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(10), start);
        fence.read(start, Entry::new(Some(1), ["a", "b"]));
        settle(&mut fence, start);
        let sent = start + Duration::from_secs(5);
        fence.read(sent, Entry::new(Some(2), ["a", "c"]));
        assert_eq!(fence.next(sent), Some(Action::Stop(jobs(&["b"]))));
        // b took 20 s to stop: a lapsed meanwhile, and the read gives no permit any more.
        let late = start + Duration::from_secs(25);
        assert_eq!(fence.next(late), Some(Action::Stop(jobs(&["a"]))));
        assert_eq!(
            fence.next(late),
            None,
            "nothing starts, nothing is acknowledged"
        );
        assert_eq!(fence.until(), None);
    }

    #[test]
    fn a_watch_event_during_a_read_in_flight_asks_for_another_read_at_once() {
        let start = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(30), start);
        let event = start + Duration::from_millis(100);
        fence.watched(event);
        // This read was sent before the event: it may not show the change the event reports.
        fence.read(start, Entry::new(Some(1), ["a"]));
        assert_eq!(fence.next_read_at(), event);
        fence.read(event, Entry::new(Some(2), ["a"]));
        assert_eq!(fence.next_read_at(), event + Duration::from_secs(15));
    }

    #[test]
    fn a_terminating_worker_is_done_once_the_lease_carries_an_empty_entry() {
        let start = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(30), start);
        fence.read(start, Entry::new(Some(1), ["a"]));
        settle(&mut fence, start);
        fence.written(1);
        fence.terminate();
        assert_eq!(fence.next(start), Some(Action::Stop(jobs(&["a"]))));
        assert!(!fence.done());
        fence.read(start, Entry::new(Some(2), Vec::<String>::new()));
        assert_eq!(settle(&mut fence, start), Some(2));
        assert!(!fence.done(), "not written yet");
        fence.written(2);
        assert!(fence.done());
    }
}
