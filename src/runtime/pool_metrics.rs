//! Per-pool gauges, read from each pool's status at every scrape (as kube-state-metrics does
//! for built-in objects): the series always agree with `kubectl get swarmpools`, and a pool
//! that is deleted is a series gone, with no bookkeeping to forget.
//!
//! Only the replica that reconciles has a pool cache, so a standby exports none of them and an
//! alert never sees a pool twice. The per-pool counters ([`PoolCounter`]) are dropped at the
//! first scrape after their pool is gone from the cache.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};

use kube::ResourceExt as _;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::api::crd::{Phase, SwarmPool, SwarmPoolStatus};
use crate::runtime::metrics::PoolLabels;

/// Every phase, in the order the state-set lists them.
pub const PHASES: [Phase; 5] = [
    Phase::Pending,
    Phase::RollingOut,
    Phase::Balanced,
    Phase::Degraded,
    Phase::Failed,
];

/// Label set of the phase state-set: one series per phase, 1 for the pool's phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Namespace of the pool.
    pub namespace: String,
    /// Name of the pool.
    pub pool: String,
    /// A [`Phase`] name.
    pub phase: &'static str,
}

/// The gauges of one status field: metric name (after the `swarm_operator_` prefix), help,
/// and how to read the value.
struct StatusGauge {
    name: &'static str,
    help: &'static str,
    value: fn(&SwarmPoolStatus) -> i64,
}

const STATUS_GAUGES: [StatusGauge; 7] = [
    StatusGauge {
        name: "pool_jobs",
        help: "Jobs in the pool's spec",
        value: |s| s.jobs.into(),
    },
    StatusGauge {
        name: "pool_workers",
        help: "Workers the pool shares its jobs over: the workload's desired replicas",
        value: |s| s.workers.into(),
    },
    StatusGauge {
        name: "pool_ready_workers",
        help: "Workers whose pod is Ready",
        value: |s| s.ready_workers.into(),
    },
    StatusGauge {
        name: "pool_unassigned_jobs",
        help: "Jobs no worker holds and none is handing over",
        value: |s| s.unassigned_jobs.into(),
    },
    StatusGauge {
        name: "pool_jobs_in_transit",
        help: "Jobs revoked from their old worker and not yet granted to the new one",
        value: |s| s.jobs_in_transit.into(),
    },
    StatusGauge {
        name: "pool_stale_workers",
        help: "Workers still running an older job set, waiting to be restarted",
        value: |s| s.stale_workers.len().try_into().unwrap_or(i64::MAX),
    },
    StatusGauge {
        name: "pool_config_version",
        help: "The config version now in the pool's ConfigMap",
        value: |s| s.version.unwrap_or(0),
    },
];

/// What a per-pool counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolCounter {
    /// Worker pods deleted so they restart on a new config.
    Refreshes,
    /// Versions workers acknowledged (`rollout.policy: Acknowledge`).
    Acknowledgements,
    /// Workers that did not acknowledge within `ackTimeoutSeconds`.
    AckTimeouts,
    /// Worker pods deleted because they did not acknowledge in time.
    AckFallbackDeletes,
    /// Workers taken out of the pool: pod NotReady, node Lease silent (`Acknowledge`).
    Unavailable,
    /// Workers taken out of the pool while they held jobs, their jobs handed to the others.
    Failovers,
}

impl PoolCounter {
    const ALL: [PoolCounter; 6] = [
        PoolCounter::Refreshes,
        PoolCounter::Acknowledgements,
        PoolCounter::AckTimeouts,
        PoolCounter::AckFallbackDeletes,
        PoolCounter::Unavailable,
        PoolCounter::Failovers,
    ];

    /// Metric name (after the `swarm_operator_` prefix, before `_total`) and help.
    fn describe(self) -> (&'static str, &'static str) {
        match self {
            PoolCounter::Refreshes => (
                "worker_refreshes",
                "Worker pods deleted so they restart on a new config, by pool",
            ),
            PoolCounter::Acknowledgements => (
                "worker_acknowledgements",
                "Config versions that changed a worker's jobs, acknowledged in its Lease, by pool",
            ),
            PoolCounter::AckTimeouts => (
                "worker_ack_timeouts",
                "Workers that did not acknowledge their jobs within ackTimeoutSeconds, by pool",
            ),
            PoolCounter::AckFallbackDeletes => (
                "worker_ack_fallback_deletes",
                "Worker pods deleted because they did not acknowledge in time, by pool",
            ),
            PoolCounter::Unavailable => (
                "worker_unavailable",
                "Workers taken out of the pool (pod NotReady for the pool's grace, node Lease silent), by pool",
            ),
            PoolCounter::Failovers => (
                "worker_failovers",
                "Workers taken out of the pool while they held jobs, their jobs handed to the others, by pool",
            ),
        }
    }
}

/// The per-pool series of the pools in a cache, once the controller has one.
#[derive(Clone, Debug, Default)]
pub struct PoolGauges {
    pools: Arc<OnceLock<Store<SwarmPool>>>,
    /// One family per [`PoolCounter`], in its order.
    counters: [Family<PoolLabels, Counter>; 6],
    /// The pools the counters have a series for (a `Family` does not list its keys).
    counted_pools: Arc<Mutex<BTreeSet<PoolLabels>>>,
}

impl PoolGauges {
    /// Reads the pools from `store` from now on (the controller's pool cache).
    pub fn watch(&self, store: Store<SwarmPool>) {
        // Set once per process: the controller runs once.
        let _ = self.pools.set(store);
    }

    /// Counts one `counter` of `pool`.
    pub fn count(&self, counter: PoolCounter, pool: PoolLabels) {
        let index = PoolCounter::ALL
            .iter()
            .position(|c| *c == counter)
            .expect("every counter is listed");
        self.counters[index].get_or_create(&pool).inc();
        self.counted_pools
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(pool);
    }

    /// Counts a worker pod of `pool` deleted for a refresh.
    pub fn refreshed(&self, pool: PoolLabels) {
        self.count(PoolCounter::Refreshes, pool);
    }

    /// Drops the counters of pools no longer in `pools`.
    fn forget_deleted(&self, pools: &[Arc<SwarmPool>]) {
        let live: BTreeSet<(String, String)> = pools
            .iter()
            .map(|pool| (pool.namespace().unwrap_or_default(), pool.name_any()))
            .collect();
        let mut counted = self
            .counted_pools
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counted.retain(|labels| {
            let keep = live.contains(&(labels.namespace.clone(), labels.pool.clone()));
            if !keep {
                for family in &self.counters {
                    family.remove(labels);
                }
            }
            keep
        });
    }
}

impl Collector for PoolGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let pools = match self.pools.get() {
            Some(store) => {
                let pools = store.state();
                self.forget_deleted(&pools);
                pools
            }
            None => Vec::new(),
        };
        for (counter, family) in PoolCounter::ALL.iter().zip(&self.counters) {
            let (name, help) = counter.describe();
            family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)?;
        }
        encode_pools(&pools, encoder)
    }
}

/// Encodes the gauges of every pool that has a status (one the operator has reconciled).
pub fn encode_pools(
    pools: &[Arc<SwarmPool>],
    mut encoder: DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let reported: Vec<(PoolLabels, &SwarmPoolStatus)> = pools
        .iter()
        .filter_map(|pool| {
            let status = pool.status.as_ref().filter(|s| s.phase.is_some())?;
            let labels = PoolLabels {
                namespace: pool.namespace().unwrap_or_default(),
                pool: pool.name_any(),
            };
            Some((labels, status))
        })
        .collect();
    for gauge in &STATUS_GAUGES {
        let family = Family::<PoolLabels, Gauge>::default();
        for (labels, status) in &reported {
            family.get_or_create(labels).set((gauge.value)(status));
        }
        family.encode(encoder.encode_descriptor(
            gauge.name,
            gauge.help,
            None,
            family.metric_type(),
        )?)?;
    }
    let phases = Family::<PhaseLabels, Gauge>::default();
    for (labels, status) in &reported {
        for phase in PHASES {
            phases
                .get_or_create(&PhaseLabels {
                    namespace: labels.namespace.clone(),
                    pool: labels.pool.clone(),
                    phase: phase.as_str(),
                })
                .set((status.phase == Some(phase)).into());
        }
    }
    phases.encode(encoder.encode_descriptor(
        "pool_phase",
        "The pool's phase: 1 for the phase it is in, 0 for the others",
        None,
        phases.metric_type(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher;
    use prometheus_client::registry::Registry;

    fn pool(namespace: &str, name: &str, status: Option<SwarmPoolStatus>) -> SwarmPool {
        let mut pool: SwarmPool = serde_json::from_value(serde_json::json!({
            "apiVersion": "swarm.io/v1alpha1",
            "kind": "SwarmPool",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")},
            "spec": {"jobs": ["a"], "selector": {"matchLabels": {"app": "w"}}},
        }))
        .unwrap();
        pool.status = status;
        pool
    }

    fn balanced() -> SwarmPoolStatus {
        SwarmPoolStatus {
            phase: Some(Phase::Balanced),
            jobs: 27,
            workers: 3,
            ready_workers: 2,
            unassigned_jobs: 1,
            jobs_in_transit: 4,
            stale_workers: vec!["w-0".into(), "w-2".into()],
            version: Some(12),
            ..SwarmPoolStatus::default()
        }
    }

    fn scrape(gauges: &PoolGauges) -> String {
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("swarm_operator")
            .register_collector(Box::new(gauges.clone()));
        crate::runtime::metrics::encode(&registry)
    }

    #[test]
    fn each_status_field_is_a_gauge_labelled_with_namespace_and_pool() {
        let (store, mut writer) = reflector::store::<SwarmPool>();
        writer.apply_watcher_event(&watcher::Event::Apply(pool("swarm", "p", Some(balanced()))));
        let gauges = PoolGauges::default();
        gauges.watch(store);
        let text = scrape(&gauges);
        for line in [
            "# TYPE swarm_operator_pool_jobs gauge",
            "swarm_operator_pool_jobs{namespace=\"swarm\",pool=\"p\"} 27",
            "swarm_operator_pool_workers{namespace=\"swarm\",pool=\"p\"} 3",
            "swarm_operator_pool_ready_workers{namespace=\"swarm\",pool=\"p\"} 2",
            "swarm_operator_pool_unassigned_jobs{namespace=\"swarm\",pool=\"p\"} 1",
            "swarm_operator_pool_jobs_in_transit{namespace=\"swarm\",pool=\"p\"} 4",
            "swarm_operator_pool_stale_workers{namespace=\"swarm\",pool=\"p\"} 2",
            "swarm_operator_pool_config_version{namespace=\"swarm\",pool=\"p\"} 12",
            "swarm_operator_pool_phase{namespace=\"swarm\",pool=\"p\",phase=\"Balanced\"} 1",
            "swarm_operator_pool_phase{namespace=\"swarm\",pool=\"p\",phase=\"Failed\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        let phases = text
            .lines()
            .filter(|l| l.starts_with("swarm_operator_pool_phase{"))
            .count();
        assert_eq!(phases, PHASES.len(), "one series per phase\n{text}");
    }

    #[test]
    fn a_deleted_pool_and_a_pool_never_reconciled_have_no_series() {
        let (store, mut writer) = reflector::store::<SwarmPool>();
        let kept = pool("swarm", "kept", Some(balanced()));
        let deleted = pool("other", "gone", Some(balanced()));
        writer.apply_watcher_event(&watcher::Event::Apply(kept));
        writer.apply_watcher_event(&watcher::Event::Apply(deleted.clone()));
        writer.apply_watcher_event(&watcher::Event::Apply(pool("swarm", "new", None)));
        let gauges = PoolGauges::default();
        gauges.watch(store);
        for (namespace, pool) in [("swarm", "kept"), ("other", "gone")] {
            gauges.refreshed(PoolLabels {
                namespace: namespace.into(),
                pool: pool.into(),
            });
        }
        let kept = PoolLabels {
            namespace: "swarm".into(),
            pool: "kept".into(),
        };
        gauges.count(PoolCounter::Acknowledgements, kept.clone());
        gauges.count(PoolCounter::Acknowledgements, kept.clone());
        gauges.count(PoolCounter::AckTimeouts, kept.clone());
        gauges.count(PoolCounter::AckFallbackDeletes, kept);
        let text = scrape(&gauges);
        assert!(
            text.contains("pool_jobs{namespace=\"other\",pool=\"gone\"} 27"),
            "{text}"
        );
        assert!(
            text.contains("worker_refreshes_total{namespace=\"other\",pool=\"gone\"} 1"),
            "{text}"
        );

        writer.apply_watcher_event(&watcher::Event::Delete(deleted));
        let text = scrape(&gauges);
        assert!(
            text.contains("pool_jobs{namespace=\"swarm\",pool=\"kept\"}"),
            "{text}"
        );
        assert!(
            text.contains("worker_refreshes_total{namespace=\"swarm\",pool=\"kept\"} 1"),
            "{text}"
        );
        for line in [
            "worker_acknowledgements_total{namespace=\"swarm\",pool=\"kept\"} 2",
            "worker_ack_timeouts_total{namespace=\"swarm\",pool=\"kept\"} 1",
            "worker_ack_fallback_deletes_total{namespace=\"swarm\",pool=\"kept\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("pool=\"gone\""), "{text}");
        assert!(!text.contains("pool=\"new\""), "{text}");
    }

    #[test]
    fn without_a_pool_cache_only_the_descriptions_are_exported() {
        let text = scrape(&PoolGauges::default());
        assert!(
            text.contains("# TYPE swarm_operator_pool_phase gauge"),
            "{text}"
        );
        assert!(!text.contains("pool=\""), "{text}");
    }
}
