//! The operator: a pod cache that lags, loses and repeats watch events, a memory of the pods it
//! asked to delete, and the reconcile loop of `controller::reconcile_pool` around the real pure
//! planner. It can crash after any number of its writes and restart with empty memory.

use kube::ResourceExt;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use swarm_operator::crd::SwarmPool;
use swarm_operator::planner::{self, Observed, VERSION_ANNOTATION};
use swarm_operator::pod_summary::PodSummary;

use super::cluster::{Cluster, NS};

/// The controller's planning rounds per reconcile (`MAX_PLAN_ROUNDS`).
const MAX_PLAN_ROUNDS: usize = 8;

/// What the operator did, for the invariants.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Delete requests that reached an existing instance, by uid.
    pub deletes: BTreeMap<String, usize>,
    /// The config version of every ConfigMap write, in order.
    pub versions: Vec<u64>,
}

/// The operator process.
#[derive(Clone, Debug)]
pub struct Operator {
    pub pool: SwarmPool,
    /// The pod cache: what the watch has delivered, by pod name.
    cache: BTreeMap<String, Pod>,
    /// Uids this process asked to delete.
    deleting: BTreeSet<String>,
}

impl Operator {
    pub fn start(pool: SwarmPool, cluster: &Cluster) -> Operator {
        let mut operator = Operator {
            pool,
            cache: BTreeMap::new(),
            deleting: BTreeSet::new(),
        };
        operator.relist(cluster);
        operator
    }

    /// The watch delivers the pending events of the pods whose ordinal is in `mask`; the events
    /// of the others stay pending (late), or are lost until the next relist.
    pub fn deliver(&mut self, cluster: &Cluster, mask: u8) {
        // A StatefulSet's pods by ordinal, a Deployment's by a hash of the name.
        let in_mask = |name: &str| {
            let tail = name.rsplit_once('-').unwrap().1;
            let bit = tail
                .parse::<u32>()
                .unwrap_or_else(|_| tail.bytes().map(u32::from).sum::<u32>() % 8);
            bit < 8 && mask & (1 << bit) != 0
        };
        let api: BTreeMap<String, Pod> = cluster
            .api_pods()
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        let names: BTreeSet<String> = api.keys().chain(self.cache.keys()).cloned().collect();
        for name in names.into_iter().filter(|n| in_mask(n)) {
            match api.get(&name) {
                Some(pod) => self.cache.insert(name, pod.clone()),
                None => self.cache.remove(&name),
            };
        }
    }

    /// A fresh list and watch: the cache equals the API.
    pub fn relist(&mut self, cluster: &Cluster) {
        self.cache = cluster
            .api_pods()
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
    }

    /// The process dies and a new one starts: no memory, a cold cache that lists everything.
    pub fn crash(&mut self, cluster: &Cluster) {
        self.deleting.clear();
        self.relist(cluster);
    }

    /// One reconcile as `controller::reconcile_pool` runs it. With `crash_after = Some(k)` the
    /// process dies right after its k-th write (ConfigMap apply, pod delete or status patch).
    /// Returns the phase it reported, if it got that far.
    pub fn reconcile(
        &mut self,
        cluster: &mut Cluster,
        record: &mut Record,
        crash_after: Option<usize>,
    ) -> Option<String> {
        let mut writes = 0;
        let crash = |writes: usize| crash_after == Some(writes);
        if crash(writes) {
            self.crash(cluster);
            return None;
        }
        let statefulset = cluster.statefulset();
        let deployment = cluster.deployment();
        let replica_sets = cluster.replica_sets();
        let mut pods: Vec<Pod> = self.cache.values().cloned().collect();
        let mut pods_are_live = false;
        let mut rounds = 0;
        let plan = loop {
            rounds += 1;
            assert!(rounds <= MAX_PLAN_ROUNDS, "planning did not settle");
            let config_map = cluster.config_map.clone();
            let summaries: Vec<PodSummary> = pods.iter().map(PodSummary::from).collect();
            let mut plan = planner::plan(&Observed {
                pool: &self.pool,
                statefulsets: statefulset.iter().collect(),
                deployments: deployment.iter().collect(),
                replica_sets: replica_sets.iter().collect(),
                pods: summaries.iter().collect(),
                other_pools: Vec::new(),
                pods_are_live,
                config_map: config_map.as_ref(),
                deleting: &self.deleting,
                now: cluster.now(),
            });
            if let Some(desired) = plan.apply.take() {
                let unresolved = planner::records_unresolved(&desired);
                let version = desired.metadata.annotations.as_ref().unwrap()[VERSION_ANNOTATION]
                    .parse()
                    .unwrap();
                cluster.apply(desired);
                record.versions.push(version);
                writes += 1;
                if crash(writes) {
                    self.crash(cluster);
                    return None;
                }
                if unresolved {
                    pods_are_live = false;
                }
                continue;
            }
            if plan.needs_live_pods && !pods_are_live {
                // Only the pods the plan names, as the controller lists them.
                pods = cluster
                    .api_pods()
                    .into_iter()
                    .filter(|pod| plan.live_pods.contains(&pod.name_any()))
                    .collect();
                pods_are_live = true;
                continue;
            }
            break plan;
        };
        for delete in &plan.deletes {
            if cluster.delete(&delete.uid) {
                *record.deletes.entry(delete.uid.clone()).or_default() += 1;
            }
            self.deleting.insert(delete.uid.clone());
            writes += 1;
            if crash(writes) {
                self.crash(cluster);
                return None;
            }
        }
        let phase = plan.status.phase.map(|p| p.to_string());
        self.pool.status = Some(plan.status);
        writes += 1;
        if crash(writes) {
            self.crash(cluster);
        }
        debug_assert_eq!(self.pool.metadata.namespace.as_deref(), Some(NS));
        phase
    }
}
