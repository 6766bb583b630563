//! The operator: a pod cache that lags, loses and repeats watch events, Lease caches (the
//! workers' and the nodes') that can stall, a memory of the pods it asked to delete and of when
//! it first knew each worker's ConfigMap to show each version (the revoke log, on its own
//! monotonic clock), and the operator's own round protocol (`drive`) around the real pure
//! planner. It can crash after any number of its writes, or hand over to another replica,
//! and starts again with empty memory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use swarm_operator::api::crd::SwarmPool;
use swarm_operator::drive::memory::{MemoryCluster, MemoryError, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::Observed;
use swarm_operator::state::cached::CachedPod;
use swarm_operator::state::lease::Acks;
use swarm_operator::state::lease_summary::LeaseSummary;
use swarm_operator::state::node_leases::NodeLeases;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::revokes::{RevokeLog, RevokeWaits};
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::names::ACKED_VERSION_ANNOTATION;
use swarm_protocol::names::VERSION_ANNOTATION;

use super::cluster::{Cluster, NS};
use super::process;

/// What the operator did, for the invariants.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Delete requests that reached an existing instance, by uid.
    pub deletes: BTreeMap<String, usize>,
    /// The config version of every ConfigMap write, in order.
    pub versions: Vec<u64>,
    /// Reconciles that found some worker out of the pool.
    pub unavailable: usize,
    /// Reconciles whose plan did not settle within `drive::MAX_ROUNDS` rounds.
    pub unsettled: usize,
}

/// A deliberately wrong operator, fed wrong through what the simulation hands the real one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperatorBugs {
    /// Every acknowledged version it reads is this much higher (0: the real protocol).
    pub ack_skew: u64,
    /// Its revoke waits run on a clock three times too fast: each is a third as long.
    pub short_revoke_wait: bool,
    /// A new operator process counts every wait as started well before its own start.
    pub takeover_keeps_waits: bool,
}

/// How far back a deliberately wrong new operator dates what it first sees.
const PREDATED: Duration = Duration::from_secs(60);

/// The operator process.
#[derive(Debug)]
pub struct Operator {
    pub pool: SwarmPool,
    /// The pod cache: what the watch has delivered, by pod name.
    cache: BTreeMap<String, Pod>,
    /// Uids this process asked to delete.
    deleting: BTreeSet<String>,
    /// The workers' Leases as the watch delivered them, by name.
    leases: BTreeMap<String, Lease>,
    /// The nodes' Leases as the watch delivered them: (node, renewTime).
    node_leases: Vec<(String, Timestamp)>,
    /// The Lease watches are stalled: they deliver nothing, and report no error, until a
    /// relist.
    pub leases_stalled: bool,
    /// Since when this process has known each worker's ConfigMap to show each version.
    revokes: RevokeLog,
    /// The rate of this process's clock, in millionths of real time.
    pub clock_rate: u64,
    pub bugs: OperatorBugs,
    /// Processes started so far (crashes and failovers).
    pub processes: u64,
}

impl Operator {
    pub fn start(pool: SwarmPool, cluster: &Cluster, clock_rate: u64) -> Operator {
        let mut operator = Operator {
            pool,
            cache: BTreeMap::new(),
            deleting: BTreeSet::new(),
            leases: BTreeMap::new(),
            node_leases: Vec::new(),
            leases_stalled: false,
            revokes: RevokeLog::default(),
            clock_rate,
            bugs: OperatorBugs::default(),
            processes: 1,
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
        self.node_leases = cluster.node_leases();
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
        self.node_leases = cluster.node_leases();
        self.leases_stalled = false;
    }

    /// The process dies and a new one starts (or another replica takes over, on a clock of
    /// rate `clock_rate`): no memory, a cold cache that lists everything.
    pub fn crash(&mut self, cluster: &Cluster, clock_rate: u64) {
        self.processes += 1;
        self.clock_rate = clock_rate;
        self.deleting.clear();
        self.revokes = RevokeLog::default();
        if self.bugs.takeover_keeps_waits {
            let slices: Vec<SliceSummary> = cluster.slices.iter().map(SliceSummary::from).collect();
            let before = self.instant(cluster.millis).checked_sub(PREDATED).unwrap();
            self.revokes.note(&slices, before);
        }
        self.relist(cluster);
    }

    /// This process's monotonic clock at real millisecond `millis`, as fed to the planner.
    fn instant(&self, millis: u64) -> std::time::Instant {
        let rate = if self.bugs.short_revoke_wait {
            3 * self.clock_rate
        } else {
            self.clock_rate
        };
        process::instant(rate, millis).into_std()
    }

    /// What the Lease cache acknowledges, as the controller reads it.
    fn acks(&self) -> Acks {
        let leases: Vec<LeaseSummary> = self
            .leases
            .values()
            .map(|l| LeaseSummary::from(&self.skewed(l)))
            .collect();
        Acks::from_leases(&leases)
    }

    /// `lease` with the skew of a deliberately wrong operator added to its acknowledged
    /// version.
    fn skewed(&self, lease: &Lease) -> Lease {
        let mut lease = lease.clone();
        if let Some(annotations) = lease.metadata.annotations.as_mut()
            && let Some(version) = annotations.get_mut(ACKED_VERSION_ANNOTATION)
        {
            *version = (version.parse::<u64>().unwrap() + self.bugs.ack_skew).to_string();
        }
        lease
    }

    /// One reconcile through the operator's own round protocol ([`drive`]), its writes taking
    /// effect now. With `crash_after = Some(k)` the process dies right after its k-th write
    /// (ConfigMap apply, pod delete or status patch). Returns the phase it reported, if it got
    /// that far; nothing while the API server cannot reach etcd (its first request fails).
    pub fn reconcile(
        &mut self,
        cluster: &mut Cluster,
        record: &mut Record,
        crash_after: Option<usize>,
    ) -> Option<String> {
        let restart_rate = process::rate(self.processes * 7 + cluster.millis);
        if crash_after == Some(0) {
            self.crash(cluster, restart_rate);
            return None;
        }
        if cluster.etcd_down {
            return None;
        }
        let mut api = MemoryCluster {
            config_map: cluster.config_map.clone(),
            slices: cluster.slices.clone(),
            pods: cluster.api_pods().iter().map(PodSummary::from).collect(),
            crash_after,
            instant: Some(self.instant(cluster.millis)),
            revokes: std::mem::take(&mut self.revokes),
            ..MemoryCluster::new(cluster.now())
        };
        let driven = self.drive(cluster, &mut api);
        self.revokes = std::mem::take(&mut api.revokes);
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
                self.crash(cluster, restart_rate);
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
        record.unavailable += usize::from(!outcome.status.unavailable_workers.is_empty());
        self.pool.status = Some(outcome.status);
        if crash_after == Some(writes + 1) {
            self.crash(cluster, restart_rate);
        }
        debug_assert_eq!(self.pool.metadata.namespace.as_deref(), Some(NS));
        phase
    }

    /// The rounds of one reconcile on what the caches hold.
    fn drive(&self, cluster: &Cluster, api: &mut MemoryCluster) -> Result<Driven, MemoryError> {
        let statefulset = cluster.statefulset();
        let deployment = cluster.deployment();
        let replica_sets = cluster.replica_sets();
        let cached: Vec<CachedPod> = self.cache.values().map(CachedPod::from).collect();
        let cached_slices: Vec<SliceSummary> =
            cluster.slices.iter().map(SliceSummary::from).collect();
        let acks = self.acks();
        let node_leases = NodeLeases::new(self.node_leases.iter().cloned());
        let revokes = RevokeWaits::default();
        block_on(drive(
            api,
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
                worker_config_maps: cached_slices.iter().collect(),
                slices_are_live: false,
                deleting: &self.deleting,
                acks: &acks,
                revokes: &revokes,
                node_leases: &node_leases,
                now: cluster.now(),
            },
            &mut Journal::default(),
        ))
    }
}
