//! Keeps the worker's Lease, built by [`swarm_protocol::lease::renewed`]: `keep` writes it whenever
//! the acknowledged version changes and otherwise every quarter of its duration
//! ([`swarm_protocol::fence::renew_interval`]: one write per 10 s with the default 40 s), and
//! reports when each successful write was sent, for the fence.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use swarm_protocol::fence;
use swarm_protocol::lease::{Holder, renewed};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

/// A successful Lease write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// The acknowledged version the Lease now carries.
    pub(crate) acked: Option<u64>,
    /// When the accepted request was sent: the renewal counts from here, not from the answer.
    pub(crate) sent: Instant,
    /// When the current run of renewals began: the first success after a gap of `timeout` or
    /// more since the one before (or since `start`), for a reader that missed some.
    pub(crate) streak: Instant,
}

/// Writes the Lease until `acked`'s sender is dropped: at once, whenever `acked` changes, and
/// every quarter of `duration` after the last success (sooner after a failure), each write given
/// up after `timeout` (the fence limit). Each success is published on `written`; `start` counts
/// as the first.
pub(crate) async fn keep(
    api: Api<Lease>,
    holder: Holder,
    duration: Duration,
    timeout: Duration,
    start: Instant,
    mut acked: watch::Receiver<Option<u64>>,
    written: watch::Sender<Option<Written>>,
) {
    // A quarter: a renewal that fails has most of the duration left for its retries before
    // the fence (at `duration - margin`) stops the jobs.
    let renew_every = fence::renew_interval(duration);
    let mut current: Option<Lease> = None;
    let mut retry = Retry::default();
    let (mut last, mut streak) = (start, start);
    loop {
        let want = *acked.borrow_and_update();
        let attempt = write(&api, &holder, &mut current, want, duration);
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(answer) => answer.map_err(WriteError::Api),
            Err(_) => Err(WriteError::TimedOut),
        };
        let wait = match result {
            Ok(sent) => {
                retry = Retry::default();
                if sent.saturating_duration_since(last) >= timeout {
                    streak = sent;
                }
                last = sent;
                written.send_replace(Some(Written {
                    acked: want,
                    sent,
                    streak,
                }));
                renew_every
            }
            Err(error) => {
                // The Lease read is kept: a write that timed out but landed makes the next one
                // conflict, which reads it again; a re-read on every failure would double the
                // requests of every worker at the moment the API server is slowest.
                let wait = retry.next_delay(renew_every);
                warn!(lease = %holder.pod, %error, retry_in = ?wait, "cannot write the worker Lease");
                wait
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            changed = acked.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// The delays between failed writes: 1 s doubling up to the renewal interval, each drawn at
/// random from its upper half, so that thousands of workers that lost the API server at once
/// come back spread out and no faster than they renew, instead of all every second.
#[derive(Debug, Default)]
struct Retry {
    failures: u32,
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);

    fn next_delay(&mut self, ceiling: Duration) -> Duration {
        let doubled = Self::FIRST.saturating_mul(1 << self.failures.min(16));
        self.failures = self.failures.saturating_add(1);
        let delay = doubled.min(ceiling);
        delay / 2 + delay.mul_f64(jitter() / 2.0)
    }
}

/// A number in [0, 1) that differs between workers and between calls (no cryptography
/// needed: only a spread).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    let bits = RandomState::new().hash_one(std::time::SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Why a Lease write failed.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error(transparent)]
    Api(kube::Error),
    // An answer later than this would come too late to keep the worker from fencing.
    #[error("no answer in time")]
    TimedOut,
}

/// One read-modify-write, retried from a fresh read on a conflict.
async fn write(
    api: &Api<Lease>,
    holder: &Holder,
    current: &mut Option<Lease>,
    acked: Option<u64>,
    duration: Duration,
) -> Result<Instant, kube::Error> {
    const ATTEMPTS: usize = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        if current.is_none() {
            *current = api.get_opt(&holder.pod).await?;
        }
        let lease = renewed(current.as_ref(), holder, acked, duration, Timestamp::now());
        let sent = Instant::now();
        let result = match current {
            None => api.create(&PostParams::default(), &lease).await,
            Some(_) => {
                api.replace(&holder.pod, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(stored) => {
                *current = Some(stored);
                return Ok(sent);
            }
            // Someone else wrote it (or created or deleted it) since it was read, or a write
            // that timed out landed after all: read it again.
            Err(kube::Error::Api(status))
                if (status.is_conflict() || status.is_already_exists() || status.code == 404)
                    && attempt < ATTEMPTS =>
            {
                debug!(lease = %holder.pod, "Lease changed since read; retrying");
                *current = None;
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_to_the_renewal_interval_with_jitter() {
        let ceiling = Duration::from_secs(10);
        let mut retry = Retry::default();
        let delays: Vec<Duration> = (0..8).map(|_| retry.next_delay(ceiling)).collect();
        for (delay, upper) in delays.iter().zip([1, 2, 4, 8, 10, 10, 10, 10]) {
            let upper = Duration::from_secs(upper);
            assert!(
                *delay >= upper / 2 && *delay <= upper,
                "{delay:?} not in {:?}..={upper:?}: {delays:?}",
                upper / 2
            );
        }
        let spread: std::collections::BTreeSet<_> = (0..20)
            .map(|_| Retry::default().next_delay(ceiling))
            .collect();
        assert!(spread.len() > 1, "no jitter: {spread:?}");
    }

    #[test]
    fn a_short_lease_retries_within_its_renewal_interval() {
        let mut retry = Retry::default();
        for _ in 0..5 {
            assert!(retry.next_delay(Duration::from_millis(500)) <= Duration::from_millis(500));
        }
    }
}
