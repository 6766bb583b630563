//! A worker process under `rollout.policy: Acknowledge`: its own monotonic clock, running at a
//! rate within [`swarm_protocol::fence::CLOCK_RATE_BOUND`] of real time, the worker library's
//! real [`Fence`] on that clock, its one fence read in flight and its Lease writes, each with
//! the real instants at which it takes effect on the API server and is answered.

use std::sync::OnceLock;
use std::time::Duration;

use swarm_protocol::fence::{self, DEFAULT_PERMIT};
use swarm_worker::fence::{Action, Fence};
use swarm_worker::handoff::Entry;
use tokio::time::Instant;

/// The workers' permit `F`: the library's default (30 s).
pub const PERMIT: Duration = DEFAULT_PERMIT;
/// The rate of every clock is within this many millionths of real time: the protocol's bound.
pub const RATE_BOUND_PPM: u64 = (fence::CLOCK_RATE_BOUND * 1e6) as u64;
/// Real milliseconds: never (a request that hangs until something heals).
pub const NEVER: u64 = u64::MAX;

/// A deliberately wrong worker, to show that the simulation notices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerBugs {
    /// Renews its permit from its informer's cache (what its watch delivered), not a quorum
    /// read: a read that always succeeds, at once.
    pub cached_read: bool,
    /// Counts a read's permit from its answer, not its send.
    pub permit_from_answer: bool,
    /// Answers ready while fenced (until SIGTERM).
    pub ready_while_fenced: bool,
}

/// An instant of a clock running at `rate_ppm` millionths of real time, at real millisecond
/// `millis` (only differences between instants of one clock mean anything).
pub fn instant(rate_ppm: u64, millis: u64) -> Instant {
    Instant::from_std(base() + Duration::from_nanos(millis * rate_ppm))
}

/// The first real millisecond at which the clock at `rate_ppm` shows `at` or later.
pub fn real_at(rate_ppm: u64, at: Instant) -> u64 {
    let nanos = at.into_std().saturating_duration_since(base()).as_nanos() as u64;
    nanos.div_ceil(rate_ppm)
}

/// Far enough after the test process's start that the operator's clock can be set back.
pub fn base() -> std::time::Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    *BASE.get_or_init(|| std::time::Instant::now() + Duration::from_secs(86_400))
}

/// A clock rate within the bound, in millionths of real time, picked by `seed`: the extremes
/// half the time, since they are where the protocol's margins are thinnest.
pub fn rate(seed: u64) -> u64 {
    let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    match mixed % 4 {
        0 => 1_000_000 - RATE_BOUND_PPM,
        1 => 1_000_000 + RATE_BOUND_PPM,
        _ => 1_000_000 - RATE_BOUND_PPM + (mixed >> 2) % (2 * RATE_BOUND_PPM + 1),
    }
}

/// The fence read in flight.
#[derive(Clone, Debug)]
pub struct Read {
    /// When it was sent, on the worker's clock, and in real time.
    pub sent: Instant,
    /// When it takes effect on the API server ([`NEVER`] while it hangs).
    pub linearize_at: u64,
    /// How long after that its answer arrives.
    pub answer_after: u64,
    /// The entry it showed, once it took effect.
    pub shown: Option<Entry>,
    /// When the worker gives up on it (a permit after the send, on its clock).
    pub timeout_at: u64,
    /// It failed (a refused connection): the failure arrives at `linearize_at`.
    pub fails: bool,
}

impl Read {
    /// When its answer (or failure) reaches the worker, if it ever does before the timeout.
    pub fn answer_at(&self) -> u64 {
        if self.fails {
            return self.linearize_at;
        }
        match self.shown {
            Some(_) => self.linearize_at.saturating_add(self.answer_after),
            None => NEVER,
        }
    }
}

/// A Lease write in flight: the acknowledgement it carries (`None`: the write at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseWrite {
    pub acked: Option<u64>,
    /// When it takes effect, or fails, in real time.
    pub at: u64,
    pub fails: bool,
}

/// One worker process.
#[derive(Clone, Debug)]
pub struct Process {
    /// Its clock's rate, in millionths of real time.
    pub rate: u64,
    pub fence: Fence,
    /// Stopped (SIGSTOP): no timer fires, nothing is sent or received, and no job does any
    /// work; requests already sent still take effect on the API server.
    pub paused: bool,
    /// SIGTERM was sent while it was stopped: it arrives on SIGCONT.
    pub sigterm_pending: bool,
    /// A terminating worker that acknowledged an empty entry has exited.
    pub exited: bool,
    pub read: Option<Read>,
    /// The Lease write in flight, and the acknowledgement waiting for it to finish.
    pub lease: Option<LeaseWrite>,
    pub lease_next: Option<Option<u64>>,
    /// When a failed Lease write is retried, and how many failed in a row.
    pub lease_retry_at: Option<u64>,
    pub lease_failures: u32,
    /// What its ConfigMap informer holds: the content the watch last delivered.
    pub cache: Option<Entry>,
    pub bugs: WorkerBugs,
}

impl Process {
    /// A process started at real millisecond `millis`: it runs nothing, is not ready, reads
    /// at once and writes its Lease (without an acknowledgement).
    pub fn start(rate: u64, millis: u64, bugs: WorkerBugs) -> Process {
        Process {
            rate,
            fence: Fence::new(PERMIT, instant(rate, millis)),
            paused: false,
            sigterm_pending: false,
            exited: false,
            read: None,
            lease: None,
            lease_next: Some(None),
            lease_retry_at: Some(millis),
            lease_failures: 0,
            cache: None,
            bugs,
        }
    }

    pub fn now(&self, millis: u64) -> Instant {
        instant(self.rate, millis)
    }

    /// The jobs that do work at real millisecond `millis`: those the fence runs, while their
    /// permit holds and the process is not stopped.
    pub fn running(&self, millis: u64) -> &[String] {
        let holds = self.fence.until().is_some_and(|u| u > self.now(millis));
        if self.paused || self.exited || !holds {
            return &[];
        }
        self.fence.running()
    }

    /// What `/readyz` answers at `millis` (a stopped process answers nothing: not ready).
    pub fn ready(&self, millis: u64) -> bool {
        if self.paused || self.exited {
            return false;
        }
        if self.bugs.ready_while_fenced {
            return !self.fence.terminating();
        }
        self.fence.ready(self.now(millis))
    }

    /// Carries out everything the fence asks for at `millis`: stops and starts take no time;
    /// an acknowledgement becomes the next Lease write.
    pub fn act(&mut self, millis: u64) {
        let now = self.now(millis);
        while let Some(action) = self.fence.next(now) {
            if let Action::Acknowledge(version) = action {
                self.lease_next = Some(Some(version));
                self.lease_retry_at.get_or_insert(millis);
            }
        }
        if self.fence.done() {
            self.exited = true;
        }
    }

    /// SIGTERM (delivered once the process runs).
    pub fn terminate(&mut self, millis: u64) {
        if self.paused {
            self.sigterm_pending = true;
            return;
        }
        self.fence.terminate();
        self.act(millis);
    }

    /// SIGCONT: a pending SIGTERM arrives, and every permit is checked before any job works.
    pub fn resume(&mut self, millis: u64) {
        self.paused = false;
        if std::mem::take(&mut self.sigterm_pending) {
            self.fence.terminate();
        }
        self.act(millis);
    }

    /// When the next read is due, in real time, if none is in flight.
    pub fn read_due(&self) -> Option<u64> {
        if self.read.is_some() || self.exited {
            return None;
        }
        Some(real_at(self.rate, self.fence.next_read_at()))
    }

    /// A read's answer at `millis`: the fence learns what it showed, from its send (or, for a
    /// deliberately wrong worker, from now).
    pub fn answered(&mut self, millis: u64, entry: Entry, sent: Instant) {
        let sent = if self.bugs.permit_from_answer {
            self.now(millis)
        } else {
            sent
        };
        self.fence.read(sent, entry);
        self.act(millis);
    }

    /// A read failed (or timed out) at `millis`.
    pub fn read_failed(&mut self, millis: u64) {
        self.fence.read_failed(self.now(millis));
    }

    /// The Lease write in flight took effect (or failed) at `millis`; returns the
    /// acknowledgement it wrote, `Some(None)` for the write at start.
    pub fn lease_done(&mut self, millis: u64) -> Option<Option<u64>> {
        let write = self.lease.take()?;
        if write.fails {
            self.lease_failures += 1;
            let backoff = 1000u64 << self.lease_failures.min(4);
            let cap = fence::read_interval(PERMIT).as_millis() as u64;
            self.lease_next.get_or_insert(write.acked);
            self.lease_retry_at = Some(millis + backoff.min(cap));
            return None;
        }
        self.lease_failures = 0;
        if let Some(version) = write.acked {
            self.fence.written(version);
            self.act(millis);
        }
        if self.lease_next.is_some() {
            self.lease_retry_at = Some(millis);
        }
        Some(write.acked)
    }
}
