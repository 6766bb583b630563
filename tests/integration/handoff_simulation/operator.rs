//! The operator: a pod cache that lags, loses and repeats watch events, a memory of the pods it
//! asked to delete, and the operator's own round protocol (`drive`) around the real pure
//! planner. It can crash after any number of its writes and restart with empty memory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use swarm_operator::api::crd::SwarmPool;
use swarm_operator::controller::lease_clock::{ClockReading, LeaseClock};
use swarm_operator::drive::memory::{MemoryCluster, MemoryError, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::Observed;
use swarm_operator::state::cached::CachedPod;
use swarm_operator::state::lease::Acks;
use swarm_operator::state::lease_summary::LeaseSummary;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::names::ACKED_VERSION_ANNOTATION;
use swarm_protocol::names::VERSION_ANNOTATION;

use super::cluster::{Cluster, NS};
use super::process;
use crate::fixtures;

/// What the operator did, for the invariants.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Delete requests that reached an existing instance, by uid.
    pub deletes: BTreeMap<String, usize>,
    /// The config version of every ConfigMap write, in order.
    pub versions: Vec<u64>,
    /// Reconciles that found some worker's Lease expired.
    pub expiries: usize,
    /// Reconciles whose plan did not settle within `drive::MAX_ROUNDS` rounds.
    pub unsettled: usize,
}

/// The operator process.
#[derive(Debug)]
pub struct Operator {
    pub pool: SwarmPool,
    /// The pod cache: what the watch has delivered, by pod name.
    cache: BTreeMap<String, Pod>,
    /// Uids this process asked to delete.
    deleting: BTreeSet<String>,
    /// The Lease cache: the workers' Leases as the watch delivered them, by name.
    leases: BTreeMap<String, Lease>,
    /// The Lease watch is stalled: it delivers nothing, and reports no error, until a relist.
    pub leases_stalled: bool,
    /// When this process saw each Lease renewed, on its own clock (empty after a crash).
    clock: LeaseClock,
    /// The rate of this operator's clock, in thousandths of real time.
    pub clock_rate: u64,
    /// Added to every acknowledged version the operator reads: 0 for the real protocol; 1 for
    /// a deliberately wrong operator that grants on the acknowledgement of the version before.
    pub ack_skew: u64,
    /// A deliberately wrong operator whose live Lease reads return its cache.
    pub trusts_lease_cache: bool,
}

impl Operator {
    pub fn start(pool: SwarmPool, cluster: &Cluster) -> Operator {
        let mut operator = Operator {
            pool,
            cache: BTreeMap::new(),
            deleting: BTreeSet::new(),
            leases: BTreeMap::new(),
            leases_stalled: false,
            clock: LeaseClock::default(),
            clock_rate: 1000,
            ack_skew: 0,
            trusts_lease_cache: false,
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
        if self.leases_stalled {
            return;
        }
        for lease in cluster.lease_objects() {
            let name = lease.metadata.name.clone().unwrap();
            if in_mask(&name) {
                self.leases.insert(name, lease);
            }
        }
    }

    /// A fresh list and watch: the caches equal the API.
    pub fn relist(&mut self, cluster: &Cluster) {
        self.cache = cluster
            .api_pods()
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        self.leases = cluster
            .lease_objects()
            .into_iter()
            .map(|l| (l.metadata.name.clone().unwrap(), l))
            .collect();
        self.leases_stalled = false;
    }

    /// The process dies and a new one starts: no memory, a cold cache that lists everything,
    /// a clock that has seen no Lease renewed.
    pub fn crash(&mut self, cluster: &Cluster) {
        self.deleting.clear();
        self.clock = LeaseClock::default();
        self.relist(cluster);
    }

    /// What the Lease cache acknowledges, and which Leases expired on this operator's clock,
    /// as the controller judges them.
    fn acks(&self, cluster: &Cluster) -> Acks {
        let leases: Vec<LeaseSummary> = self
            .leases
            .values()
            .map(|l| LeaseSummary::from(&self.skewed(l)))
            .collect();
        let mut acks = Acks::from_leases(&leases);
        let grace = Duration::from_secs(self.pool.spec.rollout.lease_grace_seconds as u64);
        let now = ClockReading {
            monotonic: process::instant(self.clock_rate, cluster.millis).into_std(),
            wall: cluster.now(),
        };
        self.clock.judge(NS, "pool", &leases, grace, now, &mut acks);
        acks
    }

    /// `lease` with [`Operator::ack_skew`] added to its acknowledged version.
    fn skewed(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        if let Some(annotations) = lease.metadata.annotations.as_mut()
            && let Some(version) = annotations.get_mut(ACKED_VERSION_ANNOTATION)
        {
            *version = (version.parse::<u64>().unwrap() + self.ack_skew).to_string();
        }
        lease
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
        let cached: Vec<CachedPod> = self.cache.values().map(CachedPod::from).collect();
        // The API server's side, in memory for the length of this reconcile (no time passes).
        let acks = self.acks(cluster);
        let mut api = MemoryCluster {
            config_map: cluster.config_map.clone(),
            slices: cluster.slices.clone(),
            pods: cluster.api_pods().iter().map(PodSummary::from).collect(),
            leases: if self.trusts_lease_cache {
                self.leases.values().cloned().collect()
            } else {
                cluster.lease_objects()
            },
            crash_after,
            ..MemoryCluster::new(cluster.now())
        };
        let cached_slices: Vec<SliceSummary> =
            cluster.slices.iter().map(SliceSummary::from).collect();
        let driven = block_on(drive(
            &mut api,
            &Observed {
                statefulsets: statefulset.iter().collect(),
                deployments: deployment.iter().collect(),
                replica_sets: replica_sets.iter().collect(),
                pods: cached.iter().collect(),
                config_map: cluster.config_map.as_ref(),
                worker_config_maps: cached_slices.iter().collect(),
                ..fixtures::observed(&self.pool, &acks, &self.deleting, cluster.now())
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
        cluster.slices = api.slices;
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
            // The controller reports the error and reconciles again later; the writes made
            // so far stand.
            Err(MemoryError::Unsettled(_)) => {
                record.unsettled += 1;
                return None;
            }
            other => panic!("the reconcile did not finish: {other:?}"),
        };
        let writes = api.written.len() + api.delete_requests.len();
        let phase = outcome.status.phase.map(|p| p.to_string());
        record.expiries += usize::from(!outcome.status.expired_workers.is_empty());
        self.pool.status = Some(outcome.status);
        if crash_after == Some(writes + 1) {
            self.crash(cluster);
        }
        debug_assert_eq!(self.pool.metadata.namespace.as_deref(), Some(NS));
        phase
    }
}
