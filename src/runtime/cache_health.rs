//! Whether each watch cache follows the cluster.
//!
//! A reflector cache is only as good as its watch: while the watch fails (the API server is
//! restarting, etcd is frozen, the connection is cut), the cache keeps serving the last state
//! it saw, and a reconcile on it would report that state as current. Each cache records here
//! its last successful event or relist and, while its watch fails, since when and why. The
//! controller decides nothing while a cache has been failing for [`STALE_AFTER`] (it reports
//! the pool's status as unknown instead), `/readyz` fails, and `/metrics` exports the age of
//! each cache's last success.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::watcher;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::sync::watch;

/// How long a watch may fail before its cache counts as stale. A watch the API server closes
/// is re-established with a relist well within it, so ordinary reconnects change nothing.
pub const STALE_AFTER: Duration = Duration::from_secs(3);

/// The watch caches the reconciler reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cache {
    /// SwarmPools.
    Pools,
    /// StatefulSets.
    StatefulSets,
    /// Pods of StatefulSets.
    Pods,
    /// The pools' ConfigMaps.
    ConfigMaps,
    /// The workers' own ConfigMaps (`rollout.policy: Acknowledge`).
    WorkerConfigMaps,
    /// Deployments.
    Deployments,
    /// ReplicaSets.
    ReplicaSets,
    /// Pods of Deployments.
    DeploymentPods,
    /// The workers' Leases.
    Leases,
    /// The ConfigMaps pools read jobs from (`spec.jobsFrom`, label `swarm.io/jobs-source`).
    JobsSources,
    /// The kubelets' node Leases (`kube-node-lease`; cluster-wide operators only).
    NodeLeases,
}

impl Cache {
    /// Every cache, in the order the metrics list them.
    pub const ALL: [Cache; 11] = [
        Cache::Pools,
        Cache::StatefulSets,
        Cache::Pods,
        Cache::ConfigMaps,
        Cache::WorkerConfigMaps,
        Cache::Deployments,
        Cache::ReplicaSets,
        Cache::DeploymentPods,
        Cache::Leases,
        Cache::JobsSources,
        Cache::NodeLeases,
    ];

    /// The name in metrics, logs and status messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Cache::Pools => "swarmpools",
            Cache::StatefulSets => "statefulsets",
            Cache::Pods => "statefulset-pods",
            Cache::ConfigMaps => "configmaps",
            Cache::WorkerConfigMaps => "worker-configmaps",
            Cache::Deployments => "deployments",
            Cache::ReplicaSets => "replicasets",
            Cache::DeploymentPods => "deployment-pods",
            Cache::Leases => "leases",
            Cache::JobsSources => "jobs-sources",
            Cache::NodeLeases => "node-leases",
        }
    }
}

impl std::fmt::Display for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one cache's watch last did.
#[derive(Clone, Debug, Default)]
struct Tracked {
    /// The first complete list is done.
    synced: bool,
    /// The last successful watch event or relist.
    last_success: Option<Instant>,
    /// Since when, and why, the watch has been failing (no success since).
    failing: Option<Failing>,
    /// Failed lists or watches so far.
    errors: u64,
    /// Complete lists so far (the first one included).
    lists: u64,
}

/// An ongoing failure of one watch.
#[derive(Clone, Debug)]
struct Failing {
    since: Instant,
    cause: Cause,
    error: String,
}

/// What kind of failure a watch error is. The full text carries addresses and times that
/// change on every retry; the cause changes only when the reason does (the API server came
/// back but now refuses the read), which is worth a fresh status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The API server answered with this HTTP status.
    Status(u16),
    /// No answer: connecting, TLS, a cut or timed-out connection.
    Transport,
    /// Anything else (an undecodable answer, a watch without a resource version).
    Other,
}

impl Cause {
    /// The cause of a watcher's error.
    pub fn of(error: &watcher::Error) -> Self {
        match error {
            watcher::Error::InitialListFailed(error)
            | watcher::Error::WatchStartFailed(error)
            | watcher::Error::WatchFailed(error) => match error {
                kube::Error::Api(status) => Cause::Status(status.code),
                kube::Error::HyperError(_)
                | kube::Error::Service(_)
                | kube::Error::ReadEvents(_) => Cause::Transport,
                _ => Cause::Other,
            },
            watcher::Error::WatchError(status) => Cause::Status(status.code),
            watcher::Error::NoResourceVersion => Cause::Other,
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Status(code) => write!(f, "HTTP {code}"),
            Cause::Transport => f.write_str("connection failed"),
            Cause::Other => f.write_str("other error"),
        }
    }
}

/// A cache whose watch has failed for [`STALE_AFTER`] or longer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleCache {
    /// Which cache.
    pub cache: Cache,
    /// How long its watch has been failing.
    pub failing_for: Duration,
    /// The kind of the last error.
    pub cause: Cause,
    /// The last error.
    pub error: String,
}

impl std::fmt::Display for StaleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} watch has failed for {} s ({})",
            self.cache,
            self.failing_for.as_secs(),
            self.error
        )
    }
}

/// The health of every cache, shared by the watches, the reconciler, `/readyz` and
/// `/metrics`.
#[derive(Clone)]
pub struct CacheHealth {
    caches: Arc<Mutex<BTreeMap<Cache, Tracked>>>,
    /// Bumped whenever a cache starts or stops following, or fails for a new cause, so pools
    /// can be reconciled (and their status say why) at once.
    changes: watch::Sender<u64>,
}

impl Default for CacheHealth {
    fn default() -> Self {
        Self {
            caches: Arc::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl std::fmt::Debug for CacheHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheHealth").finish_non_exhaustive()
    }
}

impl CacheHealth {
    /// Starts tracking `cache` (not synced until its first complete list).
    pub fn register(&self, cache: Cache) {
        self.lock().entry(cache).or_default();
    }

    /// A successful watch event of `cache`; `listed` when it completes a (re)list.
    pub fn succeeded(&self, cache: Cache, listed: bool, now: Instant) {
        let recovered = {
            let mut caches = self.lock();
            let tracked = caches.entry(cache).or_default();
            tracked.last_success = Some(now);
            if listed {
                tracked.synced = true;
                tracked.lists += 1;
            }
            // Only a complete list proves the cache holds the cluster's state again: events
            // of a resumed watch may follow a gap.
            if listed {
                tracked.failing.take().is_some()
            } else {
                false
            }
        };
        if recovered || listed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// A failed list or watch of `cache`, for `cause`.
    pub fn failed(&self, cache: Cache, cause: Cause, error: String, now: Instant) {
        let news = {
            let mut caches = self.lock();
            let tracked = caches.entry(cache).or_default();
            tracked.errors += 1;
            match &mut tracked.failing {
                Some(failing) => {
                    let new_cause = failing.cause != cause;
                    failing.cause = cause;
                    failing.error = error;
                    new_cause
                }
                None => {
                    tracked.failing = Some(Failing {
                        since: now,
                        cause,
                        error,
                    });
                    true
                }
            }
        };
        if news {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// Whether every registered cache has completed its first list.
    pub fn all_synced(&self) -> bool {
        self.lock().values().all(|t| t.synced)
    }

    /// The caches whose watch has been failing for [`STALE_AFTER`] or longer at `now`.
    pub fn stale(&self, now: Instant) -> Vec<StaleCache> {
        self.lock()
            .iter()
            .filter_map(|(&cache, tracked)| {
                let failing = tracked.failing.as_ref()?;
                let failing_for = now.saturating_duration_since(failing.since);
                (failing_for >= STALE_AFTER).then(|| StaleCache {
                    cache,
                    failing_for,
                    cause: failing.cause,
                    error: failing.error.clone(),
                })
            })
            .collect()
    }

    /// Whether some cache's watch is failing now, however briefly.
    pub fn any_failing(&self) -> bool {
        self.lock().values().any(|t| t.failing.is_some())
    }

    /// Why the operator is not ready: caches not synced yet or stale; `None` when it is.
    pub fn not_ready(&self, now: Instant) -> Option<String> {
        let unsynced: Vec<&str> = self
            .lock()
            .iter()
            .filter(|(_, t)| !t.synced)
            .map(|(c, _)| c.as_str())
            .collect();
        if !unsynced.is_empty() {
            return Some(format!("caches not synced: {}", unsynced.join(", ")));
        }
        let stale = self.stale(now);
        if stale.is_empty() {
            return None;
        }
        let reasons: Vec<String> = stale.iter().map(ToString::to_string).collect();
        Some(format!(
            "caches not following the cluster: {}",
            reasons.join("; ")
        ))
    }

    /// Resolves once every registered cache has completed its first list.
    pub async fn wait_synced(&self) {
        let mut changes = self.subscribe();
        while !self.all_synced() {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Notified whenever a cache starts failing, fails for a new cause, completes a list, or
    /// recovers.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Cache, Tracked>> {
        self.caches
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Label set of the per-cache series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

/// `/metrics`: per cache, the age of its last success, whether it is stale, and its errors and
/// lists, read at each scrape.
impl Collector for CacheHealth {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let caches: Vec<(Cache, Tracked)> =
            self.lock().iter().map(|(c, t)| (*c, t.clone())).collect();
        let stale: Vec<Cache> = self.stale(now).into_iter().map(|s| s.cache).collect();
        family(
            &mut encoder,
            "swarm_operator_cache_last_success_age_seconds",
            "Seconds since the cache's last successful watch event or relist (grows on a quiet cluster; see swarm_operator_cache_stale)",
            MetricType::Gauge,
            &caches,
            |_, t| {
                ConstGauge::new(t.last_success.map_or(f64::NAN, |at| {
                    now.saturating_duration_since(at).as_secs_f64()
                }))
            },
        )?;
        family(
            &mut encoder,
            "swarm_operator_cache_stale",
            "1 while the cache's watch has been failing for 3 s or more: it may not hold the cluster's state",
            MetricType::Gauge,
            &caches,
            |cache, _| ConstGauge::new(i64::from(stale.contains(&cache))),
        )?;
        family(
            &mut encoder,
            "swarm_operator_watch_errors",
            "Failed lists and watches of the cache",
            MetricType::Counter,
            &caches,
            |_, t| ConstCounter::new(t.errors),
        )?;
        family(
            &mut encoder,
            "swarm_operator_cache_lists",
            "Complete lists of the cache: the first, and one after every failed watch",
            MetricType::Counter,
            &caches,
            |_, t| ConstCounter::new(t.lists),
        )
    }
}

/// One metric family with a series per cache, each valued by `value`.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    caches: &[(Cache, Tracked)],
    value: impl Fn(Cache, &Tracked) -> M,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (cache, tracked) in caches {
        let labels = CacheLabels {
            cache: cache.as_str(),
        };
        value(*cache, tracked).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_failing_watch_is_stale_only_after_the_grace_and_until_a_complete_list() {
        let health = CacheHealth::default();
        let t0 = Instant::now();
        health.register(Cache::Pods);
        health.succeeded(Cache::Pods, true, t0);
        assert!(health.not_ready(t0).is_none());

        health.failed(
            Cache::Pods,
            Cause::Transport,
            "client error (Connect)".into(),
            t0 + secs(1),
        );
        assert!(health.any_failing());
        assert!(health.stale(t0 + secs(2)).is_empty(), "within the grace");
        let stale = health.stale(t0 + secs(5));
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].cache, Cache::Pods);
        assert_eq!(stale[0].failing_for, secs(4));
        let why = health.not_ready(t0 + secs(5)).unwrap();
        assert!(
            why.contains("statefulset-pods") && why.contains("Connect"),
            "{why}"
        );

        // An event of a resumed watch may follow a gap: still stale.
        health.succeeded(Cache::Pods, false, t0 + secs(6));
        assert_eq!(health.stale(t0 + secs(7)).len(), 1);
        // A relist replaces the whole cache: following again.
        health.succeeded(Cache::Pods, true, t0 + secs(8));
        assert!(health.stale(t0 + secs(9)).is_empty());
        assert!(!health.any_failing());
        assert!(health.not_ready(t0 + secs(9)).is_none());
    }

    #[test]
    fn not_ready_until_every_registered_cache_has_listed() {
        let health = CacheHealth::default();
        let now = Instant::now();
        health.register(Cache::Pools);
        health.register(Cache::ConfigMaps);
        health.succeeded(Cache::Pools, true, now);
        let why = health.not_ready(now).unwrap();
        assert_eq!(why, "caches not synced: configmaps");
        health.succeeded(Cache::ConfigMaps, true, now);
        assert!(health.all_synced());
    }

    #[test]
    fn subscribers_hear_of_failures_lists_and_recoveries() {
        let health = CacheHealth::default();
        let mut changes = health.subscribe();
        let now = Instant::now();
        health.failed(
            Cache::Pods,
            Cause::Transport,
            "connect to 10.0.0.1".into(),
            now,
        );
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        health.failed(
            Cache::Pods,
            Cause::Transport,
            "connect to 10.0.0.2".into(),
            now,
        );
        assert!(
            !changes.has_changed().unwrap(),
            "still failing for the same cause: no news"
        );
        health.failed(
            Cache::Pods,
            Cause::Status(403),
            "pods is forbidden".into(),
            now,
        );
        assert!(
            changes.has_changed().unwrap(),
            "back, but refusing: the status must say why now"
        );
        changes.mark_unchanged();
        let stale = health.stale(now + STALE_AFTER);
        assert_eq!(stale[0].cause, Cause::Status(403));
        assert!(stale[0].to_string().contains("forbidden"), "{:?}", stale[0]);
        health.failed(
            Cache::Pods,
            Cause::Status(403),
            "pods is forbidden".into(),
            now,
        );
        assert!(!changes.has_changed().unwrap());
        health.succeeded(Cache::Pods, false, now);
        assert!(
            !changes.has_changed().unwrap(),
            "a watch event alone proves nothing"
        );
        health.succeeded(Cache::Pods, true, now);
        assert!(changes.has_changed().unwrap());
    }

    #[test]
    fn metrics_show_age_staleness_errors_and_lists_per_cache() {
        let health = CacheHealth::default();
        let now = Instant::now();
        health.succeeded(Cache::Pods, true, now);
        health.failed(
            Cache::Pods,
            Cause::Status(410),
            "gone".into(),
            now - secs(10),
        );
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(health));
        let text = crate::runtime::metrics::encode(&registry);
        assert!(
            text.contains("swarm_operator_cache_stale{cache=\"statefulset-pods\"} 1"),
            "{text}"
        );
        assert!(text.contains("swarm_operator_watch_errors_total{cache=\"statefulset-pods\"} 1"));
        assert!(text.contains("swarm_operator_cache_lists_total{cache=\"statefulset-pods\"} 1"));
        assert!(text.contains(
            "swarm_operator_cache_last_success_age_seconds{cache=\"statefulset-pods\"} 0."
        ));
    }
}
