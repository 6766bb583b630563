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
    // A quarter: a renewal that fails is retried twice more before the fence.
    let renew_every = fence::renew_interval(duration);
    let mut current: Option<Lease> = None;
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
                warn!(lease = %holder.pod, %error, "cannot write the worker Lease; retrying");
                current = None;
                renew_every.min(Duration::from_secs(1))
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
            // Someone else wrote it (or created it) since it was read: read it again.
            Err(kube::Error::Api(status))
                if (status.is_conflict() || status.is_already_exists()) && attempt < ATTEMPTS =>
            {
                debug!(lease = %holder.pod, "Lease changed since read; retrying");
                *current = None;
            }
            Err(error) => return Err(error),
        }
    }
}
