//! The world the scenarios run in: one pool over a StatefulSet's pods and its ConfigMaps,
//! reconciled through the operator's round protocol, with a StatefulSet controller and kubelet
//! stand-in (`World::settle_pods`), and what the scenarios read of it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use swarm_operator::api::conditions;
use swarm_operator::api::crd::{Phase, SwarmPool};
use swarm_operator::drive::Cluster as _;
use swarm_operator::drive::memory::{MemoryCluster, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::{Observed, Outcome, PlannedEvent};
use swarm_operator::state::cached::CachedPod;
use swarm_operator::state::jobs_source::{self, Found};
use swarm_operator::state::lease::{Ack, Acks};
use swarm_operator::state::node_leases::NodeLeases;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::records::Holder;
use swarm_operator::state::revokes::{RevokeLog, RevokeWaits};
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::{HANDOFF_ANNOTATION, PENDING_REFRESH_ANNOTATION};

use crate::fixtures::{self, labels, owner, pool_spec, ready_status};

pub(super) const NS: &str = "swarm";
const STS: &str = "swarm-worker";
const STS_UID: &str = "sts-uid";
pub(super) const CM: &str = "swarm-worker-config";

/// The 27 jobs of the predecessor's example configuration, as `examples/swarmpool.yaml`
/// ships them.
pub(super) fn example_jobs() -> Vec<String> {
    let text = include_str!("../../../examples/swarmpool.yaml");
    let pool: SwarmPool =
        serde_yaml::from_str(text).expect("examples/swarmpool.yaml is a SwarmPool");
    assert_eq!(
        pool.spec.jobs.len(),
        27,
        "the example pool lists the predecessor's 27 jobs"
    );
    pool.spec.jobs
}

pub(super) fn t0() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

pub(super) fn pool(jobs: Vec<String>) -> SwarmPool {
    let selector = labels(&[("app", "swarm-worker")]);
    fixtures::pool(NS, "swarm-pool", pool_spec(selector, jobs, CM))
}

pub(super) fn statefulset(name: &str, uid: &str, replicas: i32) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(uid.into()),
            labels: Some(labels(&[("app", "swarm-worker")])),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", "swarm-worker")])),
                ..LabelSelector::default()
            },
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

pub(super) fn pod(ordinal: usize, uid: &str, ready: bool, at: Timestamp) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{STS}-{ordinal}")),
            namespace: Some(NS.into()),
            uid: Some(uid.into()),
            creation_timestamp: Some(Time(at)),
            labels: Some(labels(&[("app", "swarm-worker")])),
            owner_references: Some(vec![owner("StatefulSet", STS, STS_UID)]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node(ordinal)),
            ..PodSpec::default()
        }),
        status: Some(ready_status(ready, at)),
    }
}

/// The node a worker's pod runs on: one each.
pub(super) fn node(ordinal: usize) -> String {
    format!("node-{ordinal}")
}

/// An in-memory cluster with one pool, reconciled like the controller does.
pub(super) struct World {
    pub(super) pool: SwarmPool,
    pub(super) statefulsets: Vec<StatefulSet>,
    /// Pods as the API server has them.
    pub(super) pods: Vec<Pod>,
    /// Other pools of the namespace.
    pub(super) other_pools: Vec<SwarmPool>,
    /// Pods as the watch cache has them, when it lags behind.
    pub(super) stale_cache: Option<Vec<Pod>>,
    pub(super) config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps (the per-worker layout).
    pub(super) slices: Vec<ConfigMap>,
    pub(super) deleting: BTreeSet<String>,
    /// What the workers' Leases acknowledge (under `rollout.policy: Acknowledge`), as the
    /// operator's Lease cache has them.
    pub(super) acks: Acks,
    /// When each node's kubelet last renewed its node Lease (`kube-node-lease`).
    pub(super) node_leases: Vec<(String, Timestamp)>,
    /// The operator process's revoke log: since when it has known each worker's ConfigMap to
    /// show each version (lost when the operator restarts).
    pub(super) revokes: RevokeLog,
    /// The operator's monotonic clock at [`t0`]; it runs with `now`.
    clock: Instant,
    pub(super) now: Timestamp,
    next_uid: usize,
    /// ConfigMap writes so far.
    pub(super) writes: usize,
    /// Live pod lists so far.
    pub(super) live_lists: usize,
    /// Deletes so far: (pod, uid).
    pub(super) deleted: Vec<(String, String)>,
    /// Events of the last reconcile.
    pub(super) events: Vec<PlannedEvent>,
    /// Reasons of every event so far.
    pub(super) all_reasons: Vec<&'static str>,
    /// Whether the last reconcile changed the status.
    pub(super) status_written: bool,
    /// The ConfigMaps the pool's `spec.jobsFrom` may name, as the operator's cache holds them.
    pub(super) job_sources: Vec<ConfigMap>,
    /// How long each write takes, the clock running on during a reconcile.
    pub(super) write_takes: SignedDuration,
    /// Workers (by ordinal) that acknowledge each entry as soon as it is written, their Lease
    /// writes reaching the operator's cache while the reconcile that wrote it goes on.
    pub(super) acking: Vec<usize>,
}

impl World {
    /// A pool over `replicas` Ready workers, nothing written yet.
    pub(super) fn new(jobs: Vec<String>, replicas: usize) -> Self {
        let mut world = World {
            pool: pool(jobs),
            statefulsets: vec![statefulset(STS, STS_UID, replicas as i32)],
            pods: Vec::new(),
            other_pools: Vec::new(),
            stale_cache: None,
            config_map: None,
            slices: Vec::new(),
            deleting: BTreeSet::new(),
            acks: Acks::default(),
            node_leases: Vec::new(),
            revokes: RevokeLog::default(),
            clock: Instant::now(),
            now: t0(),
            next_uid: 0,
            writes: 0,
            live_lists: 0,
            deleted: Vec::new(),
            events: Vec::new(),
            all_reasons: Vec::new(),
            status_written: false,
            job_sources: Vec::new(),
            write_takes: SignedDuration::ZERO,
            acking: Vec::new(),
        };
        for ordinal in 0..replicas {
            let uid = world.uid();
            world.pods.push(pod(ordinal, &uid, true, world.now));
        }
        world
    }

    /// A uid shaped like the API server's (36 characters).
    pub(super) fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012}", self.next_uid)
    }

    fn replicas(&self) -> usize {
        self.statefulsets[0]
            .spec
            .as_ref()
            .unwrap()
            .replicas
            .unwrap() as usize
    }

    pub(super) fn scale(&mut self, replicas: i32) {
        self.statefulsets[0].spec.as_mut().unwrap().replicas = Some(replicas);
    }

    fn cached_pods(&self) -> Vec<Pod> {
        self.stale_cache
            .clone()
            .unwrap_or_else(|| self.pods.clone())
    }

    /// One reconcile through the operator's own round protocol ([`drive`]), on a cluster
    /// whose API holds `self.pods` while the operator's cache holds [`World::cached_pods`].
    pub(super) fn reconcile(&mut self) -> Outcome {
        let cached: Vec<CachedPod> = self.cached_pods().iter().map(CachedPod::from).collect();
        let mut cluster = MemoryCluster {
            config_map: self.config_map.clone(),
            slices: self.slices.clone(),
            pods: self.pods.iter().map(PodSummary::from).collect(),
            instant: Some(self.instant()),
            revokes: std::mem::take(&mut self.revokes),
            write_takes: self.write_takes,
            acking: (!self.acking.is_empty()).then(|| {
                let acking = self.acking.iter();
                let acking = acking.map(|&o| (format!("{STS}-{o}"), self.uid_of(o)));
                (self.acks.clone(), acking.collect())
            }),
            ..MemoryCluster::new(self.now)
        };
        let mut journal = Journal::default();
        let (resolved, unresolved) = jobs_source::resolve(&self.pool, |name| {
            self.job_sources
                .iter()
                .find(|cm| cm.metadata.name.as_deref() == Some(name))
                .map_or(Found::Missing, Found::ConfigMap)
        });
        let cached_slices: Vec<SliceSummary> = self.slices.iter().map(SliceSummary::from).collect();
        let driven = block_on(drive(
            &mut cluster,
            &Observed {
                jobs_unresolved: unresolved.as_ref(),
                statefulsets: self.statefulsets.iter().collect(),
                pods: cached.iter().collect(),
                other_pools: self.other_pools.iter().collect(),
                config_map: self.config_map.as_ref(),
                worker_config_maps: cached_slices.iter().collect(),
                revokes: &RevokeWaits::default(),
                node_leases: &NodeLeases::new(self.node_leases.iter().cloned()),
                ..fixtures::observed(&resolved, &self.acks, &self.deleting, self.now)
            },
            &mut journal,
        ));
        let Ok(Driven::Done(outcome)) = driven else {
            panic!("the reconcile did not finish: {driven:?}");
        };
        drop(resolved);
        self.revokes = std::mem::take(&mut cluster.revokes);
        self.acks = cluster.acks().unwrap_or_else(|| self.acks.clone());
        self.now = cluster.now;
        self.writes += cluster.written.len();
        self.live_lists += cluster.live_lists;
        self.config_map = cluster.config_map;
        self.slices = cluster.slices;
        for delete in cluster.delete_requests {
            let pod = self.pods.iter_mut().find(|p| {
                p.name_any() == delete.name && p.metadata.uid.as_deref() == Some(&delete.uid)
            });
            if let Some(pod) = pod {
                pod.metadata.deletion_timestamp = Some(Time(self.now));
            }
            self.deleting.insert(delete.uid.clone());
            self.deleted.push((delete.name, delete.uid));
        }
        self.all_reasons
            .extend(journal.events.iter().map(|e| e.reason));
        self.events = journal.events;
        self.status_written = self.pool.status.as_ref() != Some(&outcome.status);
        self.pool.status = Some(outcome.status.clone());
        outcome
    }

    /// The StatefulSet controller and kubelet: terminating pods go, missing ordinals are
    /// re-created with a new uid, pods become Ready, surplus ordinals are removed.
    pub(super) fn settle_pods(&mut self) {
        self.now += SignedDuration::from_secs(10);
        let replicas = self.replicas();
        self.pods
            .retain(|p| p.metadata.deletion_timestamp.is_none());
        self.pods.retain(|p| ordinal(p) < replicas);
        for ordinal in 0..replicas {
            if !self.pods.iter().any(|p| self::ordinal(p) == ordinal) {
                let uid = self.uid();
                self.pods.push(pod(ordinal, &uid, true, self.now));
            }
        }
        self.pods.sort_by_key(ordinal);
    }

    /// Reconciles and lets pods settle until the pool is Balanced (or `limit` rounds pass).
    pub(super) fn run_to_balanced(&mut self, limit: usize) {
        for _ in 0..limit {
            let plan = self.reconcile();
            if plan.status.phase == Some(Phase::Balanced) {
                return;
            }
            self.settle_pods();
        }
        panic!("not balanced after {limit} rounds: {:?}", self.pool.status);
    }

    pub(super) fn config(&self) -> WorkerConfig {
        fixtures::written_config(self.config_map.as_ref().unwrap(), &self.slices)
    }

    pub(super) fn pending(&self) -> BTreeMap<String, String> {
        serde_json::from_str(
            &self.config_map.as_ref().unwrap().annotations()[PENDING_REFRESH_ANNOTATION],
        )
        .unwrap()
    }

    pub(super) fn holders(&self) -> BTreeMap<String, Holder> {
        serde_json::from_str(&self.config_map.as_ref().unwrap().annotations()[HANDOFF_ANNOTATION])
            .unwrap()
    }

    /// The StatefulSet controller deletes a surplus pod: it terminates (still running).
    pub(super) fn terminate(&mut self, ordinal: usize) {
        let now = self.now;
        let pod = self
            .pods
            .iter_mut()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap();
        pod.metadata.deletion_timestamp = Some(Time(now));
    }

    /// The worker at `ordinal` acknowledges `version` in its Lease, as its pod instance.
    pub(super) fn ack(&mut self, ordinal: usize, version: u64) {
        let holder = self.uid_of(ordinal);
        self.acks
            .insert(format!("{STS}-{ordinal}"), Ack { holder, version });
    }

    /// Every worker with a pod acknowledges the version now written.
    pub(super) fn ack_all(&mut self) {
        let version = self.config().version;
        let ordinals: Vec<usize> = self.pods.iter().map(ordinal).collect();
        for o in ordinals {
            self.ack(o, version);
        }
    }

    /// The operator's monotonic clock now.
    fn instant(&self) -> Instant {
        let elapsed = self.now.duration_since(t0());
        self.clock + Duration::try_from(elapsed).expect("time runs forward")
    }

    pub(super) fn uid_of(&self, ordinal: usize) -> String {
        self.pods
            .iter()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap()
            .metadata
            .uid
            .clone()
            .unwrap()
    }

    pub(super) fn pod_mut(&mut self, ordinal: usize) -> &mut Pod {
        self.pods
            .iter_mut()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap()
    }

    pub(super) fn event_reasons(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.reason).collect()
    }

    pub(super) fn ready_condition(
        &self,
    ) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let status = self.pool.status.as_ref().unwrap();
        status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::READY)
            .unwrap()
    }
}

pub(super) fn ordinal(pod: &Pod) -> usize {
    pod.name_any().rsplit_once('-').unwrap().1.parse().unwrap()
}

pub(super) fn set_ready(pod: &mut Pod, ready: bool, since: Timestamp) {
    let condition = &mut pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
    condition.status = if ready { "True" } else { "False" }.into();
    condition.last_transition_time = Some(Time(since));
}

/// Every job in transit, whoever it is in transit from.
pub(super) fn transit_jobs(config: &WorkerConfig) -> BTreeSet<String> {
    config
        .transit()
        .flat_map(|(_, jobs)| jobs.iter().cloned())
        .collect()
}

pub(super) fn loads(config: &WorkerConfig) -> Vec<usize> {
    config.workloads().map(|(_, w)| w.jobs.len()).collect()
}

pub(super) fn names(list: &[(String, String)]) -> Vec<&str> {
    list.iter().map(|(n, _)| n.as_str()).collect()
}

/// A world that went through its first rollout and is Balanced on `replicas` workers.
pub(super) fn balanced(jobs: Vec<String>, replicas: usize) -> World {
    let mut world = World::new(jobs, replicas);
    world.run_to_balanced(20);
    world.deleted.clear();
    world.writes = 0;
    world
}
