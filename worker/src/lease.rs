//! Writes the worker's Lease, built by [`swarm_protocol::lease::renewed`]: once at start (without
//! an acknowledgement, so a Lease left by a previous pod instance speaks for it no more) and once
//! per acknowledgement, and at no other time: fence reads and readiness, not renewals, keep
//! the worker's jobs. A failed write is retried and never stops a job.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use swarm_protocol::fence;
use swarm_protocol::lease::{Holder, renewed};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::backoff::Retry;
use crate::shed::Shed;

/// Writes the Lease with `permit` as its duration until `acked`'s sender is dropped: at once,
/// then whenever `acked` changes, retrying a failed write after a growing delay (a change
/// meanwhile is written at once), and holding every write while `shed` does. Each success is
/// published on `written`: the acknowledged version the Lease now carries.
pub(crate) async fn keep(
    api: Api<Lease>,
    holder: Holder,
    permit: Duration,
    mut acked: watch::Receiver<Option<u64>>,
    written: watch::Sender<Option<u64>>,
    shed: Arc<Shed>,
) {
    // Half the permit: a write that hangs is given up in time for another to land while the
    // operator still waits for the acknowledgement.
    let ceiling = fence::read_interval(permit);
    let mut current: Option<Lease> = None;
    let mut retry = Retry::default();
    loop {
        let pass = shed.admit().await;
        let want = *acked.borrow_and_update();
        let attempt = write(&api, &holder, &mut current, want, permit);
        let result = match tokio::time::timeout(ceiling, attempt).await {
            Ok(answer) => answer.map_err(WriteError::Api),
            Err(_) => Err(WriteError::TimedOut),
        };
        let was_shed = match &result {
            Ok(()) => pass.ended(None),
            Err(WriteError::Api(error)) => pass.ended(Some(error)),
            // No answer: dropped, the pass lets the next request probe.
            Err(WriteError::TimedOut) => {
                drop(pass);
                false
            }
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
                // A shed write waits for the worker's hold instead (see `Shed::admit`).
                let wait = if was_shed {
                    Duration::ZERO
                } else {
                    retry.next_delay(ceiling)
                };
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
