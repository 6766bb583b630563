//! Leader election (`--leader-elect`): of several replicas, one reconciles and the others
//! stand by.
//!
//! The replicas share a Lease in the operator's namespace, held through kube-lease-manager:
//! the holder renews it before `duration` runs out; a standby takes it over once it expires
//! (the leader was killed or cut off) or is released (the leader shut down). A replica that
//! sees it no longer holds the lease must stop writing at once; the caller exits the process.
//! A write already decided when the lease was lost cannot land either: every ConfigMap write
//! is fenced by the resourceVersion it was decided on (see [`crate::controller::fenced_write`]).
//!
//! A leader cut off from the API server (a network partition, a frozen process) cannot learn
//! that a standby took over. So it steps down on its own clock, as client-go's renew deadline
//! does: it reads its Lease often, and once the last renewal it saw (`renewTime`, written from
//! its own clock) is older than the duration less a margin, its [`LeaseGuard`] turns invalid,
//! every write is refused and the process exits, before a standby can take over.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
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
    /// How long before expiry the holder renews: half the duration (at least 1 s), so a
    /// renewal can fail before the lease expires and the leader sees each renewal well
    /// before its own step-down deadline.
    pub fn renew_before_expiry(&self) -> Duration {
        (self.duration / 2).max(Duration::from_secs(1))
    }

    /// How far before the lease's expiry the leader stops writing: a tenth of the duration,
    /// at least 1 s, for the standby's clock running a little fast.
    pub fn step_down_margin(&self) -> Duration {
        (self.duration / 10).max(Duration::from_secs(1))
    }

    /// How often the leader reads its Lease to see its renewals.
    pub fn check_every(&self) -> Duration {
        (self.duration / 6).max(Duration::from_millis(500))
    }
}

/// Whether this replica may still write: valid until its last seen renewal plus the lease
/// duration less [`LeaseConfig::step_down_margin`], on this replica's own clock. Cloned into
/// whatever writes; a replica without leader election holds one that never expires.
#[derive(Clone, Debug)]
pub struct LeaseGuard {
    /// Milliseconds since the epoch; `i64::MAX` without leader election.
    valid_until: Arc<AtomicI64>,
}

impl LeaseGuard {
    /// A guard that never expires (no leader election).
    pub fn unelected() -> Self {
        Self {
            valid_until: Arc::new(AtomicI64::new(i64::MAX)),
        }
    }

    fn until(at: Timestamp) -> Self {
        Self {
            valid_until: Arc::new(AtomicI64::new(at.as_millisecond())),
        }
    }

    /// Whether the lease is still this replica's at `now`.
    pub fn is_valid_at(&self, now: Timestamp) -> bool {
        now.as_millisecond() < self.valid_until.load(Ordering::Acquire)
    }

    /// Whether the lease is still this replica's now.
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(Timestamp::now())
    }

    /// Extends the guard to `until`, never shortening it (reads may arrive out of order).
    fn extend(&self, until: Timestamp) {
        self.valid_until
            .fetch_max(until.as_millisecond(), Ordering::AcqRel);
    }

    /// Ends the guard at once (another replica holds the lease).
    fn revoke(&self) {
        self.valid_until.store(i64::MIN, Ordering::Release);
    }
}

/// What a read of the Lease says about this replica's guard: extend it to the renewal's
/// expiry less the margin, revoke it (another holder), or nothing (no renewal recorded).
fn judge(lease: &Lease, config: &LeaseConfig) -> Option<Result<Timestamp, ()>> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Some(Err(()));
    }
    let renewed = spec.renew_time.as_ref()?.0;
    let valid = config.duration.saturating_sub(config.step_down_margin());
    renewed.checked_add(valid).ok().map(Ok)
}

/// The pod (or host) name in a holder identity of [`default_identity`]'s form: what precedes
/// its last underscore.
pub fn identity_pod(identity: &str) -> &str {
    identity.rsplit_once('_').map_or(identity, |(pod, _)| pod)
}

/// This replica's identity: `POD_NAME` in a cluster (else the host name), an underscore, and
/// a suffix drawn at each start, as client-go's leader election does. A replica restarted under
/// the same name must not take the Lease its previous life held for its own: it stands by
/// until that one expires like any other.
pub fn default_identity() -> String {
    let name = std::env::var("POD_NAME")
        .ok()
        .filter(|pod| !pod.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "swarm-operator".to_owned());
    format!("{name}_{:08x}", crate::random_bits() >> 32)
}

/// The lease, held by this replica.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
    guard: LeaseGuard,
    watchdog: JoinHandle<()>,
}

/// Waits until this replica holds the lease of `config` (creating the Lease if needed). An API
/// server that cannot be reached, or refuses for a while, is waited out with the watches'
/// capped backoff: a standby that exited instead would be restarted in a tight loop.
pub async fn acquire(
    client: Client,
    config: &LeaseConfig,
) -> Result<Leadership, LeaseManagerError> {
    let mut delays = crate::runtime::retry::backoff();
    loop {
        match try_acquire(client.clone(), config).await {
            Ok(Some(leadership)) => return Ok(leadership),
            // Released while standing by: stand for it again at once.
            Ok(None) => {}
            Err(error) => {
                let delay = delays.next().unwrap_or(crate::runtime::retry::MAX_DELAY);
                warn!(%error, retry_in_ms = delay.as_millis() as u64, "leader election failed; trying again");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// One attempt of [`acquire`]: the lease, or `None` when a leader released it while this
/// replica stood by.
///
/// kube-lease-manager's standby sleeps until the expiry it last read, so a lease released by a
/// leader shutting down (its holder cleared) would wait out the whole duration. The standby
/// reads the Lease itself every [`LeaseConfig::check_every`], and once it sees no holder it
/// drops its manager and stands again: the new one takes the free lease on its first step.
/// Should the old manager have taken the lease in that moment, the new one, of the same
/// identity, holds and renews it.
async fn try_acquire(
    client: Client,
    config: &LeaseConfig,
) -> Result<Option<Leadership>, LeaseManagerError> {
    let manager = LeaseManagerBuilder::new(client.clone(), &config.name)
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
    let leases: Api<Lease> = Api::namespaced(client, &config.namespace);
    tokio::select! {
        held = leading.wait_for(|held| *held) => {
            if held.is_err() {
                // The lease task ended before ever holding the lease: report why.
                return Err(match task.await {
                    Ok(Err(error)) => error,
                    _ => LeaseManagerError::InconsistentState("the lease task stopped".into()),
                });
            }
        }
        () = released(&leases, config) => {
            task.abort();
            info!(lease = %config.name, "the leader released the lease; standing for it at once");
            return Ok(None);
        }
    }
    info!(lease = %config.name, identity = %config.identity, "acquired the lease; leading");
    // Just renewed: valid for the duration less the margin from about now.
    let guard = LeaseGuard::until(
        Timestamp::now()
            .checked_add(config.duration.saturating_sub(config.step_down_margin()))
            .unwrap_or_else(|_| Timestamp::now()),
    );
    let watchdog = tokio::spawn(watch_renewals(leases, config.clone(), guard.clone()));
    Ok(Some(Leadership {
        leading,
        task,
        guard,
        watchdog,
    }))
}

/// Returns once a read of the Lease shows it without a holder (released); failed reads are
/// retried at the next tick.
async fn released(leases: &Api<Lease>, config: &LeaseConfig) {
    let every = config.check_every();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Ok(Ok(Some(lease))) = tokio::time::timeout(every, leases.get_opt(&config.name)).await
            && is_released(&lease)
        {
            return;
        }
    }
}

/// A Lease its holder gave up: no holder identity.
fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Reads the Lease every [`LeaseConfig::check_every`] and moves the guard with each renewal
/// seen; a read that fails or hangs (cut off from the API server) moves nothing, so the guard
/// runs out on its own.
async fn watch_renewals(leases: Api<Lease>, config: LeaseConfig, guard: LeaseGuard) {
    let every = config.check_every();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match tokio::time::timeout(every, leases.get_opt(&config.name)).await {
            Ok(Ok(Some(lease))) => match judge(&lease, &config) {
                Some(Ok(until)) => guard.extend(until),
                Some(Err(())) => {
                    warn!(lease = %config.name, "the lease has another holder");
                    guard.revoke();
                }
                None => {}
            },
            Ok(Ok(None)) => guard.revoke(),
            Ok(Err(error)) => warn!(%error, lease = %config.name, "could not read the lease"),
            Err(_) => warn!(lease = %config.name, "reading the lease timed out"),
        }
    }
}

impl Leadership {
    /// The guard every write checks.
    pub fn guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    /// Resolves once this replica no longer holds the lease (taken over, or the lease task
    /// failed) or can no longer be sure it does (no renewal seen in time).
    pub async fn lost(&mut self) {
        let guard = self.guard.clone();
        let expired = async {
            loop {
                if !guard.is_valid() {
                    warn!("no renewal of the lease seen in time; stepping down");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            _ = self.leading.wait_for(|held| !*held) => {}
            () = expired => {}
        }
    }

    /// Gives the lease up, so that a standby takes over at once instead of after it expires.
    pub async fn release(self) {
        self.watchdog.abort();
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
    fn each_start_has_its_own_identity_under_the_pod_name() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b, "two starts, two identities");
        let (name, suffix) = a.rsplit_once('_').expect("name_suffix");
        assert!(!name.is_empty() && suffix.len() == 8, "{a}");
    }

    #[test]
    fn the_holder_renews_half_the_duration_before_expiry() {
        let config = |secs| LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: Duration::from_secs(secs),
        };
        assert_eq!(
            config(15).renew_before_expiry(),
            Duration::from_millis(7500)
        );
        assert_eq!(config(2).renew_before_expiry(), Duration::from_secs(1));
    }

    fn lease(holder: &str, renewed: Timestamp) -> Lease {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_without_a_holder_is_released() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        assert!(!is_released(&lease("a", t0)));
        assert!(is_released(&lease("", t0)));
        let mut cleared = lease("a", t0);
        cleared.spec.as_mut().unwrap().holder_identity = None;
        assert!(is_released(&cleared));
        assert!(is_released(&Lease::default()), "no spec at all");
    }

    #[test]
    fn the_leader_stops_writing_a_margin_before_its_last_seen_renewal_expires() {
        let config = LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
        };
        let t0 = Timestamp::from_second(1_000).unwrap();
        let at = |s: i64| Timestamp::from_second(1_000 + s).unwrap();
        let guard = LeaseGuard::until(t0);
        let Some(Ok(until)) = judge(&lease("a", t0), &config) else {
            panic!("our own renewal extends the guard");
        };
        guard.extend(until);
        assert!(guard.is_valid_at(at(13)));
        assert!(!guard.is_valid_at(at(14)), "15 s less a 1.5 s margin");
        // An older renewal read late never shortens it.
        guard.extend(t0);
        assert!(guard.is_valid_at(at(12)));
        // Another holder ends it at once.
        assert_eq!(judge(&lease("b", at(5)), &config), Some(Err(())));
        guard.revoke();
        assert!(!guard.is_valid_at(at(1)));
        assert!(LeaseGuard::unelected().is_valid());
    }
}
