//! The operator: a pod cache that lags, loses and repeats watch events, a memory of the pods it
//! asked to delete, and the operator's own round protocol (`drive`) around the real pure
//! planner. It can crash after any number of its writes and restart with empty memory.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use swarm_operator::crd::SwarmPool;
use swarm_operator::drive::memory::{MemoryCluster, MemoryError, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::{Observed, VERSION_ANNOTATION};
use swarm_operator::pod_summary::PodSummary;
use swarm_operator::state::lease::{Ack, Acks};

use super::cluster::{Cluster, NS};

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
    /// What the workers' Leases acknowledge (under `rollout.policy: Acknowledge`), as the
    /// Lease cache last saw them.
    acks: Acks,
    /// Added to every acknowledged version the operator reads: 0 for the real protocol; 1 for
    /// a deliberately wrong operator that grants on the acknowledgement of the version before.
    pub ack_skew: u64,
}

impl Operator {
    pub fn start(pool: SwarmPool, cluster: &Cluster) -> Operator {
        let mut operator = Operator {
            pool,
            cache: BTreeMap::new(),
            deleting: BTreeSet::new(),
            acks: Acks::default(),
            ack_skew: 0,
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
        self.read_leases(cluster);
    }

    /// The Lease cache catches up with the workers' Leases.
    pub fn read_leases(&mut self, cluster: &Cluster) {
        self.acks = Acks::new(cluster.leases.iter().map(|(pod, (holder, version))| {
            let ack = Ack {
                holder: holder.clone(),
                version: version + self.ack_skew,
            };
            (pod.clone(), ack)
        }));
    }

    /// A fresh list and watch: the cache equals the API.
    pub fn relist(&mut self, cluster: &Cluster) {
        self.cache = cluster
            .api_pods()
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        self.read_leases(cluster);
    }

    /// The process dies and a new one starts: no memory, a cold cache that lists everything.
    pub fn crash(&mut self, cluster: &Cluster) {
        self.deleting.clear();
        self.relist(cluster);
    }

    /// One reconcile through the operator's own round protocol ([`drive`]). With
    /// `crash_after = Some(k)` the process dies right after its k-th write (ConfigMap apply, pod
    /// delete or status patch). Returns the phase it reported, if it got that far.
    pub fn reconcile(
        &mut self,
        cluster: &mut Cluster,
        record: &mut Record,
        crash_after: Option<usize>,
    ) -> Option<String> {
        if crash_after == Some(0) {
            self.crash(cluster);
            return None;
        }
        let statefulset = cluster.statefulset();
        let deployment = cluster.deployment();
        let replica_sets = cluster.replica_sets();
        let cached: Vec<PodSummary> = self.cache.values().map(PodSummary::from).collect();
        // The API server's side, in memory for the length of this reconcile (no time passes).
        let mut api = MemoryCluster {
            config_map: cluster.config_map.clone(),
            pods: cluster.api_pods().iter().map(PodSummary::from).collect(),
            crash_after,
            ..MemoryCluster::new(cluster.now())
        };
        let driven = block_on(drive(
            &mut api,
            &Observed {
                pool: &self.pool,
                jobs_unresolved: None,
                statefulsets: statefulset.iter().collect(),
                deployments: deployment.iter().collect(),
                replica_sets: replica_sets.iter().collect(),
                pods: cached.iter().collect(),
                other_pools: Vec::new(),
                pods_are_live: false,
                config_map: cluster.config_map.as_ref(),
                deleting: &self.deleting,
                acks: &self.acks,
                now: cluster.now(),
            },
            &mut Journal::default(),
        ));
        for written in &api.written {
            let version = written.metadata.annotations.as_ref().unwrap()[VERSION_ANNOTATION]
                .parse()
                .unwrap();
            record.versions.push(version);
        }
        cluster.config_map = api.config_map;
        for delete in &api.delete_requests {
            if cluster.delete(&delete.uid) {
                *record.deletes.entry(delete.uid.clone()).or_default() += 1;
            }
            self.deleting.insert(delete.uid.clone());
        }
        let outcome = match driven {
            Ok(Driven::Done(outcome)) => outcome,
            Err(MemoryError::Crashed) => {
                self.crash(cluster);
                return None;
            }
            other => panic!("the reconcile did not finish: {other:?}"),
        };
        let writes = api.written.len() + api.delete_requests.len();
        let phase = outcome.status.phase.map(|p| p.to_string());
        self.pool.status = Some(outcome.status);
        if crash_after == Some(writes + 1) {
            self.crash(cluster);
        }
        debug_assert_eq!(self.pool.metadata.namespace.as_deref(), Some(NS));
        phase
    }
}
