//! Prometheus metrics of the controller, served on `/metrics`.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime::api_requests::RequestCounter;
use crate::runtime::cache_health::CacheHealth;
use crate::runtime::pool_metrics::{PoolCounter, PoolGauges};

/// Label set of the failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`crate::Error::metric_label`] of the failure.
    pub error: String,
}

/// Label set of the warning counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Reason of the Warning event (a [`crate::api::conditions::reason`] constant).
    pub reason: String,
}

/// Label set of per-pool series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PoolLabels {
    /// Namespace of the pool.
    pub namespace: String,
    /// Name of the pool.
    pub pool: String,
}

/// The controller's metrics, all prefixed `swarm_operator_`.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciliations started.
    pub reconciliations: Counter,
    /// Reconciliations that failed, by error.
    pub failures: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// ConfigMap writes (server-side applies).
    pub config_writes: Counter,
    /// Stale worker pods deleted.
    pub pod_refreshes: Counter,
    /// Warning events about pools, by reason (a pool entering a failure).
    pub warnings: Family<ReasonLabels, Counter>,
    /// Seconds a job spent in transit (revoked, not yet granted) during a handoff.
    pub handoff_unheld: Histogram,
    /// Requests to the API server, by verb and resource.
    pub api_requests: RequestCounter,
    /// Per-pool series: gauges read from the pools' status at each scrape, and the worker
    /// refreshes of each pool.
    pub pools: PoolGauges,
    /// Whether each watch cache follows the cluster, read at each scrape.
    pub caches: CacheHealth,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciliations: Counter::default(),
            failures: Family::default(),
            duration: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            config_writes: Counter::default(),
            pod_refreshes: Counter::default(),
            warnings: Family::default(),
            handoff_unheld: Histogram::new([
                0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
            ]),
            api_requests: RequestCounter::default(),
            pools: PoolGauges::default(),
            caches: CacheHealth::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric in `registry` under the `swarm_operator` prefix.
    pub fn register(self, registry: &mut Registry) -> Self {
        let r = registry.sub_registry_with_prefix("swarm_operator");
        r.register(
            "reconciliations",
            "Reconciliations started",
            self.reconciliations.clone(),
        );
        r.register(
            "reconcile_failures",
            "Reconciliations that failed, by error",
            self.failures.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration in seconds",
            self.duration.clone(),
        );
        r.register(
            "config_writes",
            "ConfigMap writes",
            self.config_writes.clone(),
        );
        r.register(
            "warnings",
            "Warning events about pools, by reason",
            self.warnings.clone(),
        );
        r.register(
            "pod_refreshes",
            "Stale worker pods deleted",
            self.pod_refreshes.clone(),
        );
        r.register(
            "handoff_unheld_seconds",
            "Seconds a job spent in transit during a handoff: from its revocation to its grant",
            self.handoff_unheld.clone(),
        );
        r.register(
            "api_requests",
            "Requests to the Kubernetes API server, by verb and resource",
            self.api_requests.clone(),
        );
        r.register_collector(Box::new(self.pools.clone()));
        // Names its series in full (`swarm_operator_cache_*`, `swarm_operator_watch_*`).
        registry.register_collector(Box::new(self.caches.clone()));
        self
    }

    /// Counts a worker pod deleted for a refresh.
    pub fn refreshed(&self, namespace: &str, pool: &str) {
        self.pod_refreshes.inc();
        self.pools.refreshed(PoolLabels {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        });
    }

    /// Counts one `counter` of a pool.
    pub fn count(&self, counter: PoolCounter, namespace: &str, pool: &str) {
        self.pools.count(
            counter,
            PoolLabels {
                namespace: namespace.to_owned(),
                pool: pool.to_owned(),
            },
        );
    }

    /// Records how long each granted job spent in transit.
    pub fn granted(&self, after_seconds: &[f64]) {
        for &seconds in after_seconds {
            self.handoff_unheld.observe(seconds);
        }
    }

    /// Counts a reconcile and returns a guard that records its duration when dropped.
    pub fn reconcile_started(&self) -> ReconcileTimer {
        self.reconciliations.inc();
        ReconcileTimer {
            start: Instant::now(),
            histogram: self.duration.clone(),
        }
    }

    /// Counts a Warning event.
    pub fn warned(&self, reason: &str) {
        self.warnings
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a failed reconcile.
    pub fn reconcile_failed(&self, error: &crate::Error) {
        self.failures
            .get_or_create(&ErrorLabels {
                error: error.metric_label().to_owned(),
            })
            .inc();
    }
}

/// Records the reconcile duration on drop.
pub struct ReconcileTimer {
    start: Instant,
    histogram: Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

/// The registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing to a String cannot fail");
    out
}

/// OpenMetrics text (as [`encode`] writes it) in the classic Prometheus text format 0.0.4, for
/// scrapers and tools (`promtool check metrics`) that do not ask for OpenMetrics: a counter's
/// family is named after its `_total` sample, and there is no `# UNIT` or `# EOF` line.
pub fn openmetrics_to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match descriptor {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{total} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exposed_with_the_operator_prefix() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        drop(metrics.reconcile_started());
        metrics.reconcile_failed(&crate::Error::MissingNamespace);
        metrics.warned("ConfigMapConflict");
        let text = encode(&registry);
        assert!(
            text.contains("swarm_operator_reconciliations_total 1"),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_reconcile_failures_total{error=\"missing_namespace\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_reconcile_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_warnings_total{reason=\"ConfigMapConflict\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_classic_text_format_names_counter_families_after_their_samples() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        metrics.config_writes.inc();
        let text = openmetrics_to_prometheus_text(&encode(&registry));
        assert!(
            text.contains(
                "# HELP swarm_operator_config_writes_total ConfigMap writes.\n\
                 # TYPE swarm_operator_config_writes_total counter\n\
                 swarm_operator_config_writes_total 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE swarm_operator_reconcile_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE swarm_operator_pool_jobs gauge\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn refreshes_are_counted_per_pool_and_time_in_transit_per_granted_job() {
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        metrics.refreshed("swarm", "pool-a");
        metrics.refreshed("swarm", "pool-a");
        metrics.refreshed("other", "pool-b");
        metrics.granted(&[3.0, 45.0]);
        let text = encode(&registry);
        assert!(
            text.contains(
                "swarm_operator_worker_refreshes_total{namespace=\"swarm\",pool=\"pool-a\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_pod_refreshes_total 3"),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_handoff_unheld_seconds_count 2"),
            "{text}"
        );
        assert!(
            text.contains("swarm_operator_handoff_unheld_seconds_bucket{le=\"5.0\"} 1"),
            "{text}"
        );
    }
}
