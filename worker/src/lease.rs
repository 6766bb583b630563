//! Writes the worker's Lease, built by [`swarm_protocol::lease::renewed`]: once at start (without
//! an acknowledgement, so a Lease left by a previous pod instance speaks for it no more) and once
//! per acknowledgement, and at no other time: fence reads and readiness, not renewals, keep
//! the worker's jobs. A failed write is retried and never stops a job.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use swarm_protocol::fence;
use swarm_protocol::lease::{Holder, renewed};
use tokio::sync::watch;
use tracing::{debug, warn};

/// Writes the Lease with `permit` as its duration until `acked`'s sender is dropped: at once,
/// then whenever `acked` changes, retrying a failed write after a growing delay (a change
/// meanwhile is written at once). Each success is published on `written`: the acknowledged
/// version the Lease now carries.
pub(crate) async fn keep(
    api: Api<Lease>,
    holder: Holder,
    permit: Duration,
    mut acked: watch::Receiver<Option<u64>>,
    written: watch::Sender<Option<u64>>,
) {
    // Half the permit: a write that hangs is given up in time for another to land while the
    // operator still waits for the acknowledgement.
    let ceiling = fence::read_interval(permit);
    let mut current: Option<Lease> = None;
    let mut retry = Retry::default();
    loop {
        let want = *acked.borrow_and_update();
        let attempt = write(&api, &holder, &mut current, want, permit);
        let result = match tokio::time::timeout(ceiling, attempt).await {
            Ok(answer) => answer.map_err(WriteError::Api),
            Err(_) => Err(WriteError::TimedOut),
        };
        match result {
            Ok(()) => {
                retry = Retry::default();
                written.send_replace(want);
                if acked.changed().await.is_err() {
                    return;
                }
            }
            Err(error) => {
                // The Lease read is kept: a write that timed out but landed makes the next one
                // conflict, which reads it again; a re-read on every failure would double the
                // requests of every worker at the moment the API server is slowest.
                let wait = retry.next_delay(ceiling);
                warn!(lease = %holder.pod, %error, retry_in = ?wait, "cannot write the worker Lease");
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
    }
}

/// The delays between failed writes: 1 s doubling up to half the permit, each drawn at random
/// from its upper half, so that thousands of workers that lost the API server at once come back
/// spread out instead of all every second.
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
) -> Result<(), kube::Error> {
    const ATTEMPTS: usize = 5;
    let mut attempt = 0;
    loop {
        attempt += 1;
        if current.is_none() {
            *current = api.get_opt(&holder.pod).await?;
        }
        let lease = renewed(current.as_ref(), holder, acked, duration, Timestamp::now());
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
                return Ok(());
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
    fn retries_back_off_from_a_second_to_half_the_permit_with_jitter() {
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
    fn a_short_permit_retries_within_half_of_it() {
        let mut retry = Retry::default();
        for _ in 0..5 {
            assert!(retry.next_delay(Duration::from_millis(500)) <= Duration::from_millis(500));
        }
    }
}
