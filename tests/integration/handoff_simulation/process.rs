//! A worker process under Lease faults: its own clock, which drifts from real time within
//! [`DRIFT_PERMILLE`], the worker library's real [`Fence`] on that clock, and whether it is
//! paused (SIGSTOP) or cut off from the API server.

use std::sync::OnceLock;
use std::time::Duration;
use swarm_operator::api::crd::DEFAULT_LEASE_GRACE_SECONDS;
use swarm_protocol::fence;

use swarm_worker::fence::Fence;
use tokio::time::Instant;

/// The workers' Lease duration under Lease faults: the worker library's default (40 s).
pub const LEASE_DURATION: Duration = fence::DEFAULT_DURATION;
/// `spec.rollout.leaseGraceSeconds` of the simulated pools under Lease faults: the default (2).
pub const LEASE_GRACE_SECONDS: i64 = DEFAULT_LEASE_GRACE_SECONDS;
/// Every clock (each worker process's, the operator's) runs at a rate within this many
/// thousandths of real time. The protocol holds while
/// `(duration - margin) / (1 - drift) < (duration + grace) / (1 + drift)`: with the defaults,
/// 32 s of the worker's clock (40 s less a margin of 8) against 42 s of the operator's, so up
/// to 10/74 (about 13.5%); here 10%, so the worker fences within 35.6 s of real time and the
/// operator judges the Lease expired no sooner than 38.2 s.
pub const DRIFT_PERMILLE: u64 = 100;

/// A monotonic clock running at `rate` thousandths of real time, read at real millisecond
/// `millis`: an instant of the process that owns it (only differences matter).
pub fn instant(rate: u64, millis: u64) -> Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    let base = *BASE.get_or_init(std::time::Instant::now);
    Instant::from_std(base + Duration::from_millis(millis * rate / 1000))
}

/// A clock rate within the drift bound, picked by `seed`.
pub fn rate(seed: u64) -> u64 {
    let span = 2 * DRIFT_PERMILLE + 1;
    1000 - DRIFT_PERMILLE + (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % span
}

/// One worker process.
#[derive(Clone, Debug)]
pub struct Process {
    /// Its clock's rate, in thousandths of real time.
    pub rate: u64,
    pub fence: Fence,
    /// Stopped (SIGSTOP): no clock tick reaches it, it writes and reads nothing, and it runs
    /// nothing until it resumes.
    pub paused: bool,
    /// Cut off from the API server: its Lease writes and reads fail.
    pub partitioned: bool,
    /// Local time of the last successful Lease write, and of the first of its run of writes.
    last_renewal: Instant,
    streak: Instant,
    /// The fence's read in flight: its tag, and the config the API server served it.
    pub read: Option<(u64, Option<swarm_protocol::config::WorkerConfig>)>,
}

impl Process {
    /// A process started at real millisecond `millis` with a clock at `rate`.
    pub fn start(rate: u64, millis: u64) -> Process {
        let now = instant(rate, millis);
        Process {
            rate,
            fence: Fence::new(limit(), now),
            paused: false,
            partitioned: false,
            last_renewal: now,
            streak: now,
            read: None,
        }
    }

    /// A process started the way the worker library did before it started fenced: its start
    /// counts as a renewal, and it runs its entry at once.
    pub fn start_live(rate: u64, millis: u64) -> Process {
        let mut process = Process::start(rate, millis);
        let now = process.now(millis);
        let read = process.fence.renewed(now, now, now).read.expect("a read");
        assert!(process.fence.read(read, now));
        process
    }

    pub fn now(&self, millis: u64) -> Instant {
        instant(self.rate, millis)
    }

    /// Whether it reaches the API server now.
    pub fn connected(&self) -> bool {
        !self.paused && !self.partitioned
    }

    /// Its Lease write sent and answered at real millisecond `millis` succeeded: the fence
    /// learns of it; returns whether the worker just fenced itself (it stops every job). A read
    /// the fence asks for is served the config `current`.
    pub fn renewed(
        &mut self,
        millis: u64,
        current: Option<swarm_protocol::config::WorkerConfig>,
    ) -> bool {
        let now = self.now(millis);
        if now.saturating_duration_since(self.last_renewal) >= limit() {
            self.streak = now;
        }
        self.last_renewal = now;
        let renewal = self.fence.renewed(now, self.streak, now);
        if let Some(tag) = renewal.read {
            self.read = Some((tag, current));
        }
        renewal.newly_fenced
    }
}

/// How long after its last successful Lease write a worker may run jobs, on its own clock:
/// the Lease duration less the default margin, 32 s.
fn limit() -> Duration {
    fence::limit(LEASE_DURATION, fence::default_margin(LEASE_DURATION))
}
