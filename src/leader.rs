//! Leader election (`--leader-elect`): of several replicas, one reconciles and the others
//! stand by.
//!
//! The replicas share a Lease in the operator's namespace, held through kube-lease-manager:
//! the holder renews it before `duration` runs out; a standby takes it over once it expires
//! (the leader was killed or cut off) or is released (the leader shut down). A replica that
//! sees it no longer holds the lease must stop writing at once; the caller exits the process.
//! A write already decided when the lease was lost cannot land either: every ConfigMap write
//! is fenced by the resourceVersion it was decided on (see [`crate::fenced_write`]).

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// Where and how long the lease is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease (the operator's own).
    pub namespace: String,
    /// Lease name, shared by every replica of one install.
    pub name: String,
    /// This replica's identity (its pod name in a cluster).
    pub identity: String,
    /// How long a lease stays valid after its last renewal; a standby waits this long after
    /// a leader stops renewing.
    pub duration: Duration,
}

impl LeaseConfig {
    /// How long before expiry the holder renews: a third of the duration (at least 1 s), so
    /// two renewals can fail before the lease expires.
    pub fn renew_before_expiry(&self) -> Duration {
        (self.duration / 3).max(Duration::from_secs(1))
    }
}

/// This replica's identity: `POD_NAME` in a cluster, else the host name and process id.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "swarm-operator".to_owned());
    format!("{host}-{}", std::process::id())
}

/// The lease, held by this replica.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

/// Waits until this replica holds the lease of `config` (creating the Lease if needed).
pub async fn acquire(
    client: Client,
    config: &LeaseConfig,
) -> Result<Leadership, LeaseManagerError> {
    let manager = LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration.as_secs().max(1))
        .with_grace(config.renew_before_expiry().as_secs())
        .build()
        .await?;
    let (mut leading, task) = manager.watch().await;
    info!(
        lease = %config.name,
        namespace = %config.namespace,
        identity = %config.identity,
        "standing by for the lease"
    );
    if leading.wait_for(|held| *held).await.is_err() {
        // The lease task ended before ever holding the lease: report why.
        return Err(match task.await {
            Ok(Err(error)) => error,
            _ => LeaseManagerError::InconsistentState("the lease task stopped".into()),
        });
    }
    info!(lease = %config.name, identity = %config.identity, "acquired the lease; leading");
    Ok(Leadership { leading, task })
}

impl Leadership {
    /// Resolves once this replica no longer holds the lease (taken over, or the lease task
    /// failed).
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|held| !*held).await;
    }

    /// Gives the lease up, so that a standby takes over at once instead of after it expires.
    pub async fn release(self) {
        // Closing the channel makes the lease task release the lease and end.
        drop(self.leading);
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => info!("released the lease"),
            Ok(Ok(Err(error))) => {
                warn!(%error, "could not release the lease; it expires on its own")
            }
            _ => warn!("releasing the lease timed out; it expires on its own"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_renews_a_third_of_the_duration_before_expiry() {
        let config = |secs| LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: Duration::from_secs(secs),
        };
        assert_eq!(config(15).renew_before_expiry(), Duration::from_secs(5));
        assert_eq!(config(2).renew_before_expiry(), Duration::from_secs(1));
    }
}
