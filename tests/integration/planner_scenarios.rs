//! Scenario tests of the pure planner: a small in-memory world (pool, StatefulSet, pods,
//! ConfigMap) is reconciled the way the controller does it (plan, apply the ConfigMap, list
//! pods live when asked, plan again, delete), and a StatefulSet stand-in replaces deleted pods.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use swarm_assign::{Qos, Strategy};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use proptest::prelude::*;
use swarm_operator::api::conditions::{self, reason};
use swarm_operator::api::crd::{
    ConfigMapRef, Handoff, JobsFromSource, Phase, RolloutPolicy, SwarmPool, UnavailableReason,
};
use swarm_operator::drive::memory::{MemoryCluster, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::{self, Observed, Outcome, PlannedEvent};
use swarm_operator::plugin::{PoolView, scale_plan};
use swarm_operator::state::cached::CachedPod;
use swarm_operator::state::jobs_source::{self, Found};
use swarm_operator::state::lease::{Ack, Acks};
use swarm_operator::state::node_leases::NodeLeases;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::records::Holder;
use swarm_operator::state::revokes::{RevokeLog, RevokeWaits};
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::config::CONFIG_KEY;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::HANDOFF_ANNOTATION;
use swarm_protocol::names::{PENDING_REFRESH_ANNOTATION, VERSION_ANNOTATION};

use super::fixtures::{self, POOL_UID, labels, owner, pool_spec, ready_status};

const NS: &str = "swarm";
const STS: &str = "swarm-worker";
const STS_UID: &str = "sts-uid";
const CM: &str = "swarm-worker-config";

/// The 27 jobs of the predecessor's example configuration, as `examples/swarmpool.yaml`
/// ships them.
fn example_jobs() -> Vec<String> {
    let text = include_str!("../../examples/swarmpool.yaml");
    let pool: SwarmPool =
        serde_yaml::from_str(text).expect("examples/swarmpool.yaml is a SwarmPool");
    assert_eq!(
        pool.spec.jobs.len(),
        27,
        "the example pool lists the predecessor's 27 jobs"
    );
    pool.spec.jobs
}

fn t0() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn pool(jobs: Vec<String>) -> SwarmPool {
    let selector = labels(&[("app", "swarm-worker")]);
    fixtures::pool(NS, "swarm-pool", pool_spec(selector, jobs, CM))
}

fn statefulset(name: &str, uid: &str, replicas: i32) -> StatefulSet {
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

fn pod(ordinal: usize, uid: &str, ready: bool, at: Timestamp) -> Pod {
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
fn node(ordinal: usize) -> String {
    format!("node-{ordinal}")
}

/// An in-memory cluster with one pool, reconciled like the controller does.
struct World {
    pool: SwarmPool,
    statefulsets: Vec<StatefulSet>,
    /// Pods as the API server has them.
    pods: Vec<Pod>,
    /// Other pools of the namespace.
    other_pools: Vec<SwarmPool>,
    /// Pods as the watch cache has them, when it lags behind.
    stale_cache: Option<Vec<Pod>>,
    config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps (the per-worker layout).
    slices: Vec<ConfigMap>,
    deleting: BTreeSet<String>,
    /// What the workers' Leases acknowledge (under `rollout.policy: Acknowledge`), as the
    /// operator's Lease cache has them.
    acks: Acks,
    /// When each node's kubelet last renewed its node Lease (`kube-node-lease`).
    node_leases: Vec<(String, Timestamp)>,
    /// The operator process's revoke log: since when it has known each worker's ConfigMap to
    /// show each version (lost when the operator restarts).
    revokes: RevokeLog,
    /// The operator's monotonic clock at [`t0`]; it runs with `now`.
    clock: Instant,
    now: Timestamp,
    next_uid: usize,
    /// ConfigMap writes so far.
    writes: usize,
    /// Live pod lists so far.
    live_lists: usize,
    /// Deletes so far: (pod, uid).
    deleted: Vec<(String, String)>,
    /// Events of the last reconcile.
    events: Vec<PlannedEvent>,
    /// Reasons of every event so far.
    all_reasons: Vec<&'static str>,
    /// Whether the last reconcile changed the status.
    status_written: bool,
    /// The ConfigMaps the pool's `spec.jobsFrom` may name, as the operator's cache holds them.
    job_sources: Vec<ConfigMap>,
}

impl World {
    /// A pool over `replicas` Ready workers, nothing written yet.
    fn new(jobs: Vec<String>, replicas: usize) -> Self {
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
        };
        for ordinal in 0..replicas {
            let uid = world.uid();
            world.pods.push(pod(ordinal, &uid, true, world.now));
        }
        world
    }

    /// A uid shaped like the API server's (36 characters).
    fn uid(&mut self) -> String {
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

    fn scale(&mut self, replicas: i32) {
        self.statefulsets[0].spec.as_mut().unwrap().replicas = Some(replicas);
    }

    fn cached_pods(&self) -> Vec<Pod> {
        self.stale_cache
            .clone()
            .unwrap_or_else(|| self.pods.clone())
    }

    /// One reconcile through the operator's own round protocol ([`drive`]), on a cluster
    /// whose API holds `self.pods` while the operator's cache holds [`World::cached_pods`].
    fn reconcile(&mut self) -> Outcome {
        let cached: Vec<CachedPod> = self.cached_pods().iter().map(CachedPod::from).collect();
        let mut cluster = MemoryCluster {
            config_map: self.config_map.clone(),
            slices: self.slices.clone(),
            pods: self.pods.iter().map(PodSummary::from).collect(),
            instant: Some(self.instant()),
            revokes: std::mem::take(&mut self.revokes),
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
    fn settle_pods(&mut self) {
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
    fn run_to_balanced(&mut self, limit: usize) {
        for _ in 0..limit {
            let plan = self.reconcile();
            if plan.status.phase == Some(Phase::Balanced) {
                return;
            }
            self.settle_pods();
        }
        panic!("not balanced after {limit} rounds: {:?}", self.pool.status);
    }

    fn config(&self) -> WorkerConfig {
        fixtures::written_config(self.config_map.as_ref().unwrap(), &self.slices)
    }

    fn pending(&self) -> BTreeMap<String, String> {
        serde_json::from_str(
            &self.config_map.as_ref().unwrap().annotations()[PENDING_REFRESH_ANNOTATION],
        )
        .unwrap()
    }

    fn holders(&self) -> BTreeMap<String, Holder> {
        serde_json::from_str(&self.config_map.as_ref().unwrap().annotations()[HANDOFF_ANNOTATION])
            .unwrap()
    }

    /// The StatefulSet controller deletes a surplus pod: it terminates (still running).
    fn terminate(&mut self, ordinal: usize) {
        let now = self.now;
        let pod = self
            .pods
            .iter_mut()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap();
        pod.metadata.deletion_timestamp = Some(Time(now));
    }

    /// The worker at `ordinal` acknowledges `version` in its Lease, as its pod instance.
    fn ack(&mut self, ordinal: usize, version: u64) {
        let holder = self.uid_of(ordinal);
        self.acks
            .insert(format!("{STS}-{ordinal}"), Ack { holder, version });
    }

    /// Every worker with a pod acknowledges the version now written.
    fn ack_all(&mut self) {
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

    fn uid_of(&self, ordinal: usize) -> String {
        self.pods
            .iter()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap()
            .metadata
            .uid
            .clone()
            .unwrap()
    }

    fn pod_mut(&mut self, ordinal: usize) -> &mut Pod {
        self.pods
            .iter_mut()
            .find(|p| self::ordinal(p) == ordinal)
            .unwrap()
    }

    fn event_reasons(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.reason).collect()
    }

    fn ready_condition(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let status = self.pool.status.as_ref().unwrap();
        status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::READY)
            .unwrap()
    }
}

fn ordinal(pod: &Pod) -> usize {
    pod.name_any().rsplit_once('-').unwrap().1.parse().unwrap()
}

fn set_ready(pod: &mut Pod, ready: bool, since: Timestamp) {
    let condition = &mut pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
    condition.status = if ready { "True" } else { "False" }.into();
    condition.last_transition_time = Some(Time(since));
}

/// Every job in transit, whoever it is in transit from.
fn transit_jobs(config: &WorkerConfig) -> BTreeSet<String> {
    config
        .transit()
        .flat_map(|(_, jobs)| jobs.iter().cloned())
        .collect()
}

fn loads(config: &WorkerConfig) -> Vec<usize> {
    config.workloads().map(|(_, w)| w.jobs.len()).collect()
}

fn names(list: &[(String, String)]) -> Vec<&str> {
    list.iter().map(|(n, _)| n.as_str()).collect()
}

/// A world that went through its first rollout and is Balanced on `replicas` workers.
fn balanced(jobs: Vec<String>, replicas: usize) -> World {
    let mut world = World::new(jobs, replicas);
    world.run_to_balanced(20);
    world.deleted.clear();
    world.writes = 0;
    world
}

#[test]
fn first_write_assigns_every_job_once_and_refreshes_the_running_workers_one_at_a_time() {
    let mut world = World::new(example_jobs(), 2);
    let uids = [world.uid_of(0), world.uid_of(1)];
    let plan = world.reconcile();

    let config = world.config();
    assert_eq!(config.version, 1);
    let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
    assert_eq!(loads, [14, 13]);
    let mut all: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 27, "every job exactly once");

    // Both pods started without the config: both are stale, recorded by uid.
    let pending = world.pending();
    assert_eq!(pending["swarm-worker-0"], uids[0]);
    assert_eq!(pending["swarm-worker-1"], uids[1]);
    // 25% of 2 rounds down to 0, raised to 1: one pod at a time.
    assert_eq!(
        world.deleted,
        vec![("swarm-worker-0".to_owned(), uids[0].clone())]
    );
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(
        plan.status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"]
    );
    assert_eq!(plan.status.version, Some(1));
    assert_eq!(plan.status.jobs, 27);
    assert_eq!(
        world.event_reasons(),
        [reason::REBALANCED, reason::REFRESHING_WORKER]
    );

    let cm = world.config_map.as_ref().unwrap();
    assert_eq!(
        cm.labels()["app.kubernetes.io/managed-by"],
        "swarm-operator"
    );
    assert_eq!(cm.labels()["swarm.io/pool"], "swarm-pool");
    assert_eq!(cm.annotations()[VERSION_ANNOTATION], "1");
    let owner = &cm.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.kind.as_str(), owner.controller),
        (POOL_UID, "SwarmPool", Some(true))
    );

    // While worker 0 terminates, worker 1 waits (the budget is spent).
    world.reconcile();
    assert_eq!(world.deleted.len(), 1);

    world.settle_pods();
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
    assert_eq!(
        world.pending().keys().collect::<Vec<_>>(),
        ["swarm-worker-1"]
    );

    world.settle_pods();
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
    assert_eq!(plan.status.ready.as_deref(), Some("2/2"));
    assert!(plan.status.stale_workers.is_empty());
    assert_eq!(world.ready_condition().status, "True");
    assert_eq!(
        world.config().version,
        1,
        "refreshing workers does not change the config"
    );
}

#[test]
fn a_reconcile_that_changes_nothing_writes_nothing() {
    let mut world = balanced(example_jobs(), 3);
    let lists = world.live_lists;
    let plan = world.reconcile();
    assert_eq!(world.writes, 0, "no ConfigMap write");
    assert!(world.deleted.is_empty(), "no delete");
    assert!(!world.status_written, "no status write");
    assert!(world.events.is_empty(), "no event");
    assert_eq!(world.live_lists, lists, "no live list either");
    assert_eq!(plan.requeue_after, planner::REQUEUE_IDLE);
}

#[test]
fn first_write_before_any_pod_exists_restarts_nothing() {
    let mut world = World::new(example_jobs(), 2);
    world.pods.clear();
    let plan = world.reconcile();
    assert_eq!(world.config().version, 1);
    assert!(
        world.pending().is_empty(),
        "pods created later mount the new content"
    );
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::WAITING_FOR_WORKERS);
}

#[test]
fn scale_up_revokes_first_and_grants_to_the_new_worker_once_the_givers_are_gone() {
    let mut world = balanced(example_jobs(), 2);
    let before = world.config();
    world.scale(3);
    let plan = world.reconcile();

    // The revoke: 9 jobs leave workers 0 and 1 and go to no one.
    let revoked = world.config();
    assert_eq!(revoked.version, before.version + 1);
    assert!(revoked.workload("swarm-worker-2").unwrap().jobs.is_empty());
    let in_transit = transit_jobs(&revoked);
    assert_eq!(in_transit.len(), 9, "exactly floor(27/3) jobs move");
    for old in ["swarm-worker-0", "swarm-worker-1"] {
        let (b, a) = (
            &before.workload(old).unwrap().jobs,
            &revoked.workload(old).unwrap().jobs,
        );
        assert!(a.iter().all(|job| b.contains(job)), "{old} only loses jobs");
        let lost: BTreeSet<String> = b.iter().filter(|j| !a.contains(j)).cloned().collect();
        let from: BTreeSet<String> = revoked
            .transit()
            .filter(|(pod, _)| pod == &old)
            .flat_map(|(_, jobs)| jobs.iter().cloned())
            .collect();
        assert_eq!(lost, from, "{old}'s lost jobs are in transit from it");
    }
    assert_eq!(plan.status.jobs_in_transit, 9);
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(world.ready_condition().reason, reason::HANDING_OFF);
    assert!(world.event_reasons().contains(&reason::JOBS_REVOKED));
    let holders = world.holders();
    assert_eq!(
        holders.keys().collect::<Vec<_>>(),
        ["swarm-worker-0", "swarm-worker-1"]
    );
    assert_eq!(holders["swarm-worker-0"].uid, world.uid_of(0));
    // worker 2 has no pod yet and counts as unavailable: it spends the budget.
    assert!(world.deleted.is_empty());

    world.settle_pods();
    world.reconcile();
    assert_eq!(
        names(&world.deleted),
        ["swarm-worker-0"],
        "a giver goes first"
    );
    world.run_to_balanced(20);

    let after = world.config();
    assert_eq!(transit_jobs(&after).len(), 0);
    let gained: BTreeSet<String> = after
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(
        gained, in_transit,
        "the revoked jobs, and only they, reach the new worker"
    );
    assert_eq!(loads(&after), [9, 9, 9]);
    assert_eq!(
        after.version,
        before.version + 2,
        "one version revokes, one grants"
    );
    assert!(world.holders().is_empty());
    // Each worker restarts once: the givers to drop their jobs, the receiver after all grants.
    let mut deleted = names(&world.deleted);
    deleted.sort();
    assert_eq!(
        deleted,
        ["swarm-worker-0", "swarm-worker-1", "swarm-worker-2"]
    );
    assert!(world.all_reasons.contains(&reason::JOBS_GRANTED));
}

#[test]
fn scale_up_under_overlap_grants_at_once_and_waits_for_the_new_worker_before_restarting_others() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let before = world.config();
    world.scale(3);
    let plan = world.reconcile();

    let after = world.config();
    assert_eq!(after.version, before.version + 1);
    let new_worker = after.workload("swarm-worker-2").unwrap();
    assert_eq!(
        new_worker.jobs.len(),
        9,
        "exactly floor(27/3) jobs move, all to the new worker"
    );
    assert_eq!(transit_jobs(&after).len(), 0);
    for old in ["swarm-worker-0", "swarm-worker-1"] {
        let (b, a) = (
            &before.workload(old).unwrap().jobs,
            &after.workload(old).unwrap().jobs,
        );
        assert!(a.iter().all(|job| b.contains(job)), "{old} only loses jobs");
    }
    // worker 2 has no pod yet: nothing to refresh there, and it counts as unavailable.
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(
        world.deleted.is_empty(),
        "the missing worker spends the budget"
    );
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(plan.status.workers, 3);

    world.settle_pods();
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0"]);
    world.run_to_balanced(10);
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
}

#[test]
fn scale_down_keeps_the_removed_workers_jobs_in_transit_until_its_pod_is_gone() {
    let mut world = balanced(example_jobs(), 3);
    let removed_uid = world.uid_of(2);
    let removed_jobs: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    world.scale(2);
    // The StatefulSet controller starts terminating the surplus pod; it runs its jobs until gone.
    world.terminate(2);
    world.reconcile();
    let config = world.config();
    assert_eq!(config.len(), 2);
    assert_eq!(transit_jobs(&config), removed_jobs);
    assert_eq!(world.holders()["swarm-worker-2"].uid, removed_uid);
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));

    // Reconciling again while it terminates grants nothing.
    world.reconcile();
    assert_eq!(transit_jobs(&world.config()), removed_jobs);

    world.run_to_balanced(10);
    let config = world.config();
    assert_eq!(loads(&config), [14, 13]);
    assert!(transit_jobs(&config).is_empty());
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));
    assert_eq!(world.deleted.len(), 2, "each receiver restarts once");
}

#[test]
fn scale_down_under_overlap_gives_the_removed_workers_jobs_to_the_others_at_once() {
    let mut world = balanced(example_jobs(), 3);
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let removed_uid = world.uid_of(2);
    world.scale(2);
    world.reconcile();
    let config = world.config();
    assert_eq!(config.len(), 2);
    assert_eq!(loads(&config), [14, 13]);
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));
}

/// A job ConfigMap as a user creates it: `jobs` one per line, labelled to be watched.
fn job_source(name: &str, jobs: &[&str]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(labels(&[(
                swarm_protocol::names::JOBS_SOURCE_LABEL,
                "true",
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "jobs".to_owned(),
            format!("# generated\n{}\n", jobs.join("\n")),
        )])),
        ..ConfigMap::default()
    }
}

fn jobs_from(names: &[&str]) -> Vec<JobsFromSource> {
    names
        .iter()
        .map(|name| JobsFromSource {
            config_map_ref: ConfigMapRef {
                name: (*name).to_owned(),
            },
            key: "jobs".into(),
        })
        .collect()
}

#[test]
fn jobs_from_config_maps_are_assigned_once_and_a_missing_source_keeps_the_config_until_it_returns()
{
    let mut world = World::new(vec!["inline-a".into(), "inline-b".into()], 3);
    world.pool.spec.jobs_from = jobs_from(&["first", "second"]);
    world.job_sources = vec![
        job_source("first", &["first-a", "first-b", "first-c"]),
        job_source("second", &["second-a", "second-b"]),
    ];
    world.run_to_balanced(20);
    let all: BTreeSet<String> = world
        .config()
        .workloads()
        .flat_map(|(_, w)| w.jobs.clone())
        .collect();
    let expected: BTreeSet<String> = [
        "inline-a", "inline-b", "first-a", "first-b", "first-c", "second-a", "second-b",
    ]
    .map(String::from)
    .into();
    assert_eq!(all, expected);
    assert_eq!(
        loads(&world.config()).iter().sum::<usize>(),
        7,
        "each job once"
    );
    assert_eq!(world.pool.status.as_ref().unwrap().jobs, 7);

    // The second source is deleted: nothing is written or deleted, the config stays, the
    // status and one Warning say which ConfigMap and what to do.
    let kept = world.config_map.clone();
    let (writes, deleted) = (world.writes, world.deleted.len());
    world
        .job_sources
        .retain(|cm| cm.metadata.name.as_deref() != Some("second"));
    let outcome = world.reconcile();
    assert_eq!(world.config_map, kept, "the config is kept");
    assert_eq!((world.writes, world.deleted.len()), (writes, deleted));
    assert!(outcome.deletes.is_empty());
    assert_eq!(outcome.status.phase, Some(Phase::Failed));
    assert_eq!(outcome.status.jobs, 7, "the last known count stays");
    let ready = world.ready_condition();
    assert_eq!(ready.reason, reason::JOBS_SOURCE_NOT_FOUND);
    assert!(
        ready
            .message
            .starts_with("ConfigMap second (spec.jobsFrom[1]) does not exist in namespace swarm"),
        "{}",
        ready.message
    );
    assert_eq!(world.event_reasons(), [reason::JOBS_SOURCE_NOT_FOUND]);
    assert!(world.events[0].warning && world.events[0].note.contains("ConfigMap second"));
    world.reconcile();
    assert!(
        world.events.is_empty(),
        "warned once, not on every reconcile"
    );

    // Re-created: the pool is Balanced again on the same config, nothing moved.
    world
        .job_sources
        .push(job_source("second", &["second-a", "second-b"]));
    world.run_to_balanced(5);
    assert_eq!(world.config_map, kept);

    // A job moved between sources and a new one: one new version with all of them.
    world.job_sources[0] = job_source("first", &["first-a", "first-b"]);
    world.job_sources[1] = job_source("second", &["second-a", "second-b", "first-c", "second-c"]);
    world.run_to_balanced(20);
    let config = world.config();
    assert_eq!(loads(&config).iter().sum::<usize>(), 8);
    assert!(
        config
            .workloads()
            .any(|(_, w)| w.jobs.contains(&"second-c".to_owned()))
    );

    // A job listed in two sources is invalid jobs, naming both, and keeps the config.
    let kept = world.config_map.clone();
    world.job_sources[1] = job_source("second", &["second-a", "first-a"]);
    let outcome = world.reconcile();
    assert_eq!(outcome.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::INVALID_JOBS);
    assert!(
        world
            .ready_condition()
            .message
            .contains("in ConfigMap first key jobs line 2 and in ConfigMap second key jobs line 3"),
        "{}",
        world.ready_condition().message
    );
    assert_eq!(world.config_map, kept);
}

#[test]
fn adding_a_job_refreshes_only_the_worker_that_receives_it() {
    let mut world = balanced(example_jobs(), 3);
    let before = world.config();
    world.pool.spec.jobs.push("stream:new:job".into());
    world.pool.metadata.generation = Some(2);
    world.reconcile();
    let after = world.config();
    assert_eq!(after.version, before.version + 1);
    let touched: Vec<&str> = after
        .workloads()
        .filter(|(pod, w)| before.workload(pod).unwrap().jobs != w.jobs)
        .map(|(pod, _)| pod)
        .collect();
    assert_eq!(touched.len(), 1);
    assert_eq!(world.pending().keys().collect::<Vec<_>>(), touched);
    assert_eq!(names(&world.deleted), touched);
    assert_eq!(
        world.pool.status.as_ref().unwrap().observed_generation,
        Some(2)
    );
}

#[test]
fn removing_a_job_refreshes_at_most_two_workers() {
    let mut world = balanced(example_jobs(), 3);
    world.pool.spec.jobs.retain(|j| j != "stream:xxrtve1");
    world.reconcile();
    assert!(
        (1..=2).contains(&world.pending().len()),
        "{:?}",
        world.pending()
    );
    let mut all: Vec<String> = world
        .config()
        .workloads()
        .flat_map(|(_, w)| w.jobs.clone())
        .collect();
    all.sort();
    assert_eq!(all.len(), 26);
    assert!(!all.contains(&"stream:xxrtve1".to_owned()));
}

#[test]
fn a_crash_looping_stale_worker_is_deleted_at_once_without_spending_the_budget() {
    let mut world = balanced(example_jobs(), 4);
    let now = world.now;
    set_ready(world.pod_mut(3), false, now);
    world.pool.spec.jobs.clear();
    world.reconcile();
    // All four workers changed; worker 3 is not Ready (deleted first, free), and one Ready
    // worker would fit 25% of 4 = 1 if nothing were unavailable, but worker 3 is.
    assert_eq!(names(&world.deleted), ["swarm-worker-3"]);
}

#[test]
fn a_worker_whose_jobs_did_not_change_is_never_deleted_even_when_crash_looping() {
    let mut world = balanced(example_jobs(), 3);
    let now = world.now;
    set_ready(world.pod_mut(1), false, now - SignedDuration::from_mins(10));
    let plan = world.reconcile();
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Degraded));
    assert_eq!(world.ready_condition().reason, reason::WORKERS_NOT_READY);
    assert_eq!(plan.status.ready.as_deref(), Some("2/3"));
    assert_eq!(plan.status.ready_workers, 2);
}

#[test]
fn a_worker_not_ready_for_less_than_the_grace_period_is_starting_not_degraded() {
    let mut world = balanced(example_jobs(), 3);
    let now = world.now;
    set_ready(world.pod_mut(1), false, now - SignedDuration::from_secs(30));
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(world.ready_condition().reason, reason::WORKERS_STARTING);
    assert_eq!(plan.requeue_after, planner::REQUEUE_ROLLING);
}

#[test]
fn a_terminating_stale_pod_is_never_deleted_again_and_holds_the_budget() {
    let mut world = balanced(example_jobs(), 4);
    // Worker 0 is already terminating (someone else deleted it).
    let now = world.now;
    world.pod_mut(0).metadata.deletion_timestamp = Some(Time(now));
    world.pool.spec.jobs.clear();
    world.reconcile();
    assert!(world.deleted.is_empty(), "{:?}", world.deleted);
    assert_eq!(world.pool.status.as_ref().unwrap().stale_workers.len(), 4);
}

#[test]
fn after_an_operator_restart_mid_rollout_no_pod_is_deleted_twice_and_the_rollout_finishes() {
    let mut world = World::new(example_jobs(), 4);
    world.reconcile();
    let first = world.deleted.clone();
    assert_eq!(first.len(), 1);
    let writes = world.writes;

    // Restart: the in-memory record of requested deletes is gone; the cache lists the pod as
    // terminating, as the API server has it.
    world.deleting.clear();
    world.reconcile();
    assert_eq!(
        world.deleted, first,
        "the terminating pod is not deleted again"
    );
    assert_eq!(
        world.writes, writes,
        "the version survives: nothing to rewrite"
    );

    world.run_to_balanced(20);
    let mut refreshed: Vec<&str> = names(&world.deleted);
    refreshed.sort();
    assert_eq!(
        refreshed,
        [
            "swarm-worker-0",
            "swarm-worker-1",
            "swarm-worker-2",
            "swarm-worker-3"
        ]
    );
    assert_eq!(world.config().version, 1);
}

#[test]
fn a_crash_between_the_config_write_and_the_uid_resolution_is_recovered() {
    let mut world = balanced(example_jobs(), 2);
    // The previous process wrote version 2 with unresolved entries and died.
    let mut config = world.config();
    config.version = 2;
    let cm = world.config_map.as_mut().unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), config.render());
    cm.annotations_mut()
        .insert(VERSION_ANNOTATION.into(), "2".into());
    cm.annotations_mut().insert(
        PENDING_REFRESH_ANNOTATION.into(),
        r#"{"swarm-worker-1":""}"#.into(),
    );
    let uid1 = world.uid_of(1);

    world.reconcile();
    assert_eq!(
        world.pending()["swarm-worker-1"],
        uid1,
        "resolved against a live pod list"
    );
    assert_eq!(names(&world.deleted), ["swarm-worker-1"]);
}

#[test]
fn a_cache_lagging_behind_a_replaced_pod_does_not_end_the_refresh_early() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.jobs.push("stream:extra".into());
    // The cache still shows no pod for worker 0 (it lags behind the StatefulSet), while the
    // API server has the instance that started before the write.
    let mut cache = world.pods.clone();
    cache.retain(|p| ordinal(p) != 0);
    world.stale_cache = Some(cache);
    world.reconcile();
    let touched: Vec<String> = world.pending().keys().cloned().collect();
    assert_eq!(touched.len(), 1);
    // The entry is kept with the uid of the live pod, whatever the cache says.
    let ordinal: usize = touched[0].rsplit_once('-').unwrap().1.parse().unwrap();
    assert_eq!(world.pending()[&touched[0]], world.uid_of(ordinal));
    assert!(world.live_lists > 0);
}

#[test]
fn a_pod_not_controlled_by_the_statefulset_is_never_deleted() {
    let mut world = World::new(example_jobs(), 2);
    for pod in &mut world.pods {
        pod.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    }
    let plan = world.reconcile();
    assert!(world.deleted.is_empty());
    assert!(world.pending().is_empty());
    assert_eq!(
        plan.status.phase,
        Some(Phase::Pending),
        "no worker pod of ours exists"
    );
}

#[test]
fn an_unowned_configmap_is_adopted_and_its_assignment_kept() {
    // A placeholder written by hand before install, holding a valid assignment at version 7.
    let reference = balanced(example_jobs(), 2);
    let text = reference
        .config()
        .render()
        .replace("version: 1", "version: 7");
    let mut world = World::new(example_jobs(), 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    });
    world.reconcile();
    let cm = world.config_map.as_ref().unwrap();
    assert_eq!(cm.owner_references()[0].uid, POOL_UID, "adopted");
    assert_eq!(world.config().version, 7, "same assignment, same version");
    assert!(world.pending().is_empty(), "no worker's job set changed");
    assert!(world.deleted.is_empty());
    assert!(!world.event_reasons().contains(&reason::REBALANCED));
}

#[test]
fn an_unowned_configmap_with_the_predecessors_broken_layout_is_repaired() {
    // The predecessor's layout of the 27 jobs: job 14 twice, job 27 nowhere.
    let jobs = example_jobs();
    let text = format!(
        "workloads:\n  swarm-worker-0:\n    jobs: {:?}\n  swarm-worker-1:\n    jobs: {:?}\n",
        &jobs[0..14],
        &jobs[13..26]
    );
    let mut world = World::new(jobs, 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    });
    world.reconcile();
    let config = world.config();
    assert!(config.version >= 1);
    let held: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    let unique: BTreeSet<&String> = held.iter().copied().collect();
    assert_eq!(held.len(), unique.len(), "no job is given to two workers");
    // The job both workers ran waits in transit until both have restarted.
    assert_eq!(
        transit_jobs(&config),
        BTreeSet::from([example_jobs()[13].clone()])
    );
    assert_eq!(held.len(), 26);

    world.run_to_balanced(10);
    let config = world.config();
    let mut all: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!((count, all.len()), (27, 27), "each job exactly once");
}

#[test]
fn a_configmap_controlled_by_something_else_is_never_written() {
    let mut world = World::new(example_jobs(), 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "other".into(),
                uid: "other-uid".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::CONFIG_MAP_CONFLICT);
    assert!(world.ready_condition().message.contains("Deployment other"));
    assert_eq!(world.events.len(), 1);
    assert!(world.events[0].warning);
    assert_eq!(plan.requeue_after, planner::REQUEUE_CONFLICT);

    // The failure persists: no second warning, no status write.
    world.reconcile();
    assert!(world.events.is_empty());
    assert!(!world.status_written);
}

#[test]
fn a_paused_pool_reports_the_change_but_writes_and_deletes_nothing() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.paused = true;
    world.scale(3);
    world.settle_pods();
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::PAUSED);
    assert_eq!(
        plan.status.version,
        Some(1),
        "the version in the ConfigMap, not the planned one"
    );
    assert_eq!(plan.status.workers, 3);

    world.pool.spec.paused = false;
    world.reconcile();
    assert_eq!(world.config().version, 2);
}

#[test]
fn zero_replicas_leave_every_job_unassigned_and_delete_nothing() {
    let mut world = balanced(example_jobs(), 2);
    world.scale(0);
    world.terminate(0);
    world.terminate(1);
    let plan = world.reconcile();
    let config = world.config();
    assert!(config.is_empty(), "empty workloads");
    assert_eq!(config.version, 2);
    assert!(world.deleted.is_empty());
    assert!(world.pending().is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Degraded));
    assert_eq!(
        plan.status.jobs_in_transit, 27,
        "the terminating pods still run them"
    );
    assert_eq!(plan.status.workers, 0);
    assert_eq!(world.ready_condition().reason, reason::NO_REPLICAS);

    world.settle_pods();
    let plan = world.reconcile();
    assert!(transit_jobs(&world.config()).is_empty());
    assert_eq!(plan.status.unassigned_jobs, 27);
    assert_eq!(plan.status.jobs_in_transit, 0);
    assert!(world.deleted.is_empty());
}

#[test]
fn the_version_continues_from_the_configmap_after_a_restart() {
    let mut world = balanced(example_jobs(), 2);
    let mut config = world.config();
    config.version = 5;
    world
        .config_map
        .as_mut()
        .unwrap()
        .data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), config.render());
    world.pool.spec.jobs.push("stream:later".into());
    let plan = world.reconcile();
    assert_eq!(world.config().version, 6);
    assert_eq!(plan.status.version, Some(6));
}

#[test]
fn an_unreadable_config_continues_from_the_version_annotation() {
    let mut world = balanced(example_jobs(), 2);
    let cm = world.config_map.as_mut().unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), "{{{ not yaml".into());
    cm.annotations_mut()
        .insert(VERSION_ANNOTATION.into(), "9".into());
    world.reconcile();
    assert_eq!(world.config().version, 10);
    assert!(world.event_reasons().contains(&reason::CONFIG_UNREADABLE));
}

#[test]
fn rollout_policy_none_writes_the_config_and_restarts_nobody() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.rollout.policy = RolloutPolicy::None;
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let plan = world.reconcile();
    assert_eq!(world.config().version, 1);
    assert!(world.pending().is_empty());
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
}

#[test]
fn rollout_policy_none_with_an_exclusive_handoff_fails_and_says_what_to_set() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.rollout.policy = RolloutPolicy::None;
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::INVALID_ROLLOUT);
    assert!(world.ready_condition().message.contains("handoff: Overlap"));
    assert!(world.events[0].warning);
}

#[test]
fn max_unavailable_paces_the_refresh() {
    let mut world = World::new(example_jobs(), 6);
    world.pool.spec.rollout.max_unavailable = IntOrString::Int(2);
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
    world.reconcile();
    assert_eq!(
        world.deleted.len(),
        2,
        "two are terminating: no more until they are back"
    );
    world.settle_pods();
    world.reconcile();
    assert_eq!(
        names(&world.deleted)[2..],
        ["swarm-worker-2", "swarm-worker-3"]
    );
}

fn assert_failed(world: &mut World, reason: &str) -> Outcome {
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.writes, 0, "no ConfigMap write");
    assert!(world.deleted.is_empty(), "no delete");
    assert_eq!(world.ready_condition().reason, reason);
    assert_eq!(world.ready_condition().status, "False");
    let warning = world
        .events
        .iter()
        .find(|e| e.warning)
        .expect("a Warning event");
    assert_eq!(warning.reason, reason);
    plan
}

#[test]
fn no_matching_statefulset_fails_with_statefulset_not_found() {
    let mut world = World::new(example_jobs(), 2);
    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "other")]));
    assert_failed(&mut world, reason::STATEFUL_SET_NOT_FOUND);
}

#[test]
fn two_matching_statefulsets_fail_with_ambiguous_selector() {
    let mut world = World::new(example_jobs(), 2);
    world
        .statefulsets
        .push(statefulset("second", "second-uid", 1));
    let plan = assert_failed(&mut world, reason::AMBIGUOUS_SELECTOR);
    assert!(
        world
            .ready_condition()
            .message
            .contains("second, swarm-worker")
    );
    assert_eq!(plan.status.stateful_set, None);
}

#[test]
fn an_empty_selector_fails_instead_of_matching_everything() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.selector = LabelSelector::default();
    assert_failed(&mut world, reason::EMPTY_SELECTOR);
}

#[test]
fn duplicate_jobs_fail_with_the_job_named() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.jobs.push("stream:xxrtve1".into());
    assert_failed(&mut world, reason::INVALID_JOBS);
    assert!(world.ready_condition().message.contains("stream:xxrtve1"));
}

#[test]
fn a_malformed_max_unavailable_fails() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.rollout.max_unavailable = IntOrString::String("lots".into());
    assert_failed(&mut world, reason::INVALID_MAX_UNAVAILABLE);
}

#[test]
fn a_config_over_half_a_mebibyte_fails_naming_its_size_and_the_limit() {
    let jobs: Vec<String> = (0..20_000)
        .map(|i| format!("stream:a-rather-long-job-name-{i:08}"))
        .collect();
    let mut world = World::new(jobs, 2);
    assert_failed(&mut world, reason::CONFIG_MAP_TOO_LARGE);
    let message = &world.ready_condition().message;
    assert!(message.contains("524288"), "{message}");
    assert!(message.contains("rollout.policy: Acknowledge"), "{message}");
    let size: usize = message
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .expect("the size in bytes");
    assert!(size > 524_288, "{message}");
}

#[test]
fn failure_status_keeps_what_is_known_and_flips_back_when_fixed() {
    let mut world = balanced(example_jobs(), 2);
    let balanced_since = world.ready_condition().last_transition_time.clone();
    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "moved")]));
    world.now += SignedDuration::from_secs(60);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.version, Some(1));
    assert_ne!(world.ready_condition().last_transition_time, balanced_since);

    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "swarm-worker")]));
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
    assert_eq!(world.writes, 0, "the config did not change");
}

#[test]
fn pausing_takes_precedence_over_a_scale_to_zero_that_is_not_written_yet() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.paused = true;
    world.scale(0);
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::PAUSED);
    assert_eq!(world.config().len(), 2, "the workers keep their config");
}

#[test]
fn of_two_pools_selecting_one_statefulset_only_the_older_manages_it() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.metadata.creation_timestamp = Some(Time(t0()));
    let mut older = pool(vec!["other".into()]);
    older.metadata.name = Some("first-pool".into());
    older.metadata.uid = Some("first-uid".into());
    older.metadata.creation_timestamp = Some(Time(t0() - SignedDuration::from_secs(60)));
    world.other_pools.push(older);
    assert_failed(&mut world, reason::STATEFUL_SET_IN_USE);
    assert!(world.ready_condition().message.contains("first-pool"));

    // The younger pool does not stop the older one.
    let mut world = World::new(example_jobs(), 2);
    world.pool.metadata.creation_timestamp = Some(Time(t0() - SignedDuration::from_secs(60)));
    let mut younger = pool(vec!["other".into()]);
    younger.metadata.name = Some("later-pool".into());
    younger.metadata.uid = Some("later-uid".into());
    younger.metadata.creation_timestamp = Some(Time(t0()));
    world.other_pools.push(younger);
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
}

#[test]
fn stale_worker_bookkeeping_beyond_the_annotation_limit_fails_instead_of_erroring_on_write() {
    // 4500 running workers all touched by the first write: ~60 bytes each of pod name and
    // uid exceed 256 KiB. Nothing is written, not even the config.
    let mut world = World::new(vec!["a".into(), "b".into()], 4500);
    assert_failed(&mut world, reason::CONFIG_MAP_TOO_LARGE);
    assert!(world.ready_condition().message.contains("262144"));
}

fn qos(dedicated: &[&str], weights: &[(&str, u64)]) -> Option<Qos> {
    Some(Qos {
        dedicated: dedicated.iter().map(|job| job.to_string()).collect(),
        weights: weights
            .iter()
            .map(|(job, weight)| (job.to_string(), *weight))
            .collect(),
    })
}

fn condition<'a>(world: &'a World, type_: &str) -> &'a Condition {
    let status = world.pool.status.as_ref().unwrap();
    status.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn a_qos_naming_a_job_outside_the_spec_fails_with_invalid_qos_naming_the_job() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&["stream:xxrtve1", "stream:nope"], &[]);
    assert_failed(&mut world, reason::INVALID_QOS);
    assert!(world.ready_condition().message.contains("\"stream:nope\""));
    assert!(world.events[0].note.contains("\"stream:nope\""));

    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&[], &[("stream:gone", 3)]);
    assert_failed(&mut world, reason::INVALID_QOS);
    assert!(world.ready_condition().message.contains("\"stream:gone\""));
}

#[test]
fn fixing_one_invalid_qos_name_and_breaking_another_warns_again() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&["stream:a"], &[]);
    assert_failed(&mut world, reason::INVALID_QOS);
    world.reconcile();
    assert!(
        world.events.is_empty(),
        "the same failure is not warned twice"
    );
    world.pool.spec.qos = qos(&["stream:b"], &[]);
    world.reconcile();
    assert_eq!(world.event_reasons(), [reason::INVALID_QOS]);
    assert!(world.events[0].note.contains("\"stream:b\""));
}

#[test]
fn dedicated_jobs_run_alone_and_the_rest_share_the_other_workers() {
    let mut world = World::new(example_jobs(), 4);
    world.pool.spec.qos = qos(&["stream:cars:new", "stream:xxrtve1"], &[]);
    world.run_to_balanced(20);
    let config = world.config();
    let alone: Vec<&str> = config
        .workloads()
        .filter(|(_, w)| w.jobs.len() == 1)
        .map(|(_, w)| w.jobs[0].as_str())
        .collect();
    assert_eq!(alone, ["stream:cars:new", "stream:xxrtve1"]);
    let shared: Vec<usize> = loads(&config).into_iter().filter(|&n| n > 1).collect();
    assert_eq!(shared, [13, 12], "25 shared jobs over the 2 other workers");
    let status = world.pool.status.as_ref().unwrap();
    assert_eq!(status.dedicated_unmet, Some(0));
    assert_eq!(condition(&world, conditions::DEGRADED).status, "False");
}

#[test]
fn too_few_workers_share_the_last_dedicated_jobs_and_report_not_enough_workers() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.qos = qos(
        &["stream:cars:new", "stream:xxrtve1", "stream:foo:new"],
        &[],
    );
    world.reconcile();
    let warning = world
        .events
        .iter()
        .find(|e| e.reason == reason::NOT_ENOUGH_WORKERS)
        .expect("a NotEnoughWorkers event");
    assert!(warning.warning);
    assert!(
        warning
            .note
            .contains("2 of 3 dedicated jobs run as shared jobs")
            && warning.note.contains("4 would give each its own worker")
            && warning.note.contains("stream:xxrtve1, stream:foo:new"),
        "{}",
        warning.note
    );
    let degraded = condition(&world, conditions::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", reason::NOT_ENOUGH_WORKERS)
    );
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, Some(2));

    for _ in 0..20 {
        world.settle_pods();
        let plan = world.reconcile();
        assert!(
            !world.event_reasons().contains(&reason::NOT_ENOUGH_WORKERS),
            "warned once, not on every reconcile"
        );
        if plan.status.phase == Some(Phase::Degraded) && plan.status.stale_workers.is_empty() {
            break;
        }
    }
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Degraded)
    );
    assert_eq!(world.ready_condition().reason, reason::NOT_ENOUGH_WORKERS);
    let config = world.config();
    assert!(
        config
            .workloads()
            .any(|(_, w)| w.jobs == ["stream:cars:new"]),
        "the first dedicated job has a worker of its own"
    );

    world.scale(4);
    world.settle_pods();
    world.run_to_balanced(30);
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, Some(0));
    let alone = world
        .config()
        .workloads()
        .filter(|(_, w)| w.jobs.len() == 1)
        .count();
    assert_eq!(alone, 3);
}

#[test]
fn weighted_jobs_balance_the_total_weight_of_the_workers() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.qos = qos(&[], &[("stream:cars:new", 9), ("stream:xxrtve1", 6)]);
    world.run_to_balanced(20);
    let config = world.config();
    let weight = |jobs: &[String]| -> u64 {
        jobs.iter()
            .map(|job| match job.as_str() {
                "stream:cars:new" => 9,
                "stream:xxrtve1" => 6,
                _ => 1,
            })
            .sum()
    };
    let weights: Vec<u64> = config.workloads().map(|(_, w)| weight(&w.jobs)).collect();
    assert_eq!(weights.iter().sum::<u64>(), 25 + 9 + 6);
    let spread = weights.iter().max().unwrap() - weights.iter().min().unwrap();
    assert!(spread <= 9, "weights {weights:?}");
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, None);
}

#[test]
fn without_qos_the_status_has_no_dedicated_count() {
    let world = balanced(example_jobs(), 2);
    let status = serde_json::to_value(world.pool.status.as_ref().unwrap()).unwrap();
    assert!(status.get("dedicatedUnmet").is_none(), "{status}");
}

/// Reconciles and lets pods settle until a reconcile writes and deletes nothing and the pool
/// is not rolling out.
fn run_until_quiet(world: &mut World) {
    for _ in 0..60 {
        let (writes, deletes) = (world.writes, world.deleted.len());
        let outcome = world.reconcile();
        let quiet = world.writes == writes && world.deleted.len() == deletes;
        if quiet && outcome.status.phase != Some(Phase::RollingOut) {
            return;
        }
        world.settle_pods();
    }
    panic!("the pool did not settle: {:?}", world.pool.status);
}

/// What `kubectl swarm plan` reads of a world.
fn plugin_view(world: &World) -> PoolView {
    PoolView {
        pool: world.pool.clone(),
        config_map: world.config_map.clone(),
        worker_config_maps: world.slices.clone(),
        pods: world.pods.iter().map(PodSummary::from).collect(),
        leases: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `kubectl swarm plan` runs the operator's planner on a what-if copy of the pool; this
    /// world runs it through its own StatefulSet stand-in. The writes, restarts and shares the
    /// plan predicts are what the operator then does.
    #[test]
    fn kubectl_swarm_plan_predicts_the_writes_and_restarts_of_a_scale(
        jobs in 1usize..40,
        from in 1usize..6,
        to in 0usize..8,
        overlap in any::<bool>(),
        max_unavailable in 1i32..3,
        strategy in prop_oneof![Just(Strategy::Sticky), Just(Strategy::Consistent), Just(Strategy::Contiguous)],
    ) {
        let mut world = World::new((0..jobs).map(|i| format!("job-{i:02}")).collect(), from);
        world.pool.spec.strategy = strategy;
        world.pool.spec.rollout.max_unavailable = IntOrString::Int(max_unavailable);
        if overlap {
            world.pool.spec.rollout.handoff = Handoff::Overlap;
        }
        run_until_quiet(&mut world);
        let plan = scale_plan::predict(&plugin_view(&world), to).expect("a plan");

        let version = world.config().version;
        world.deleted.clear();
        world.scale(to as i32);
        run_until_quiet(&mut world);

        prop_assert_eq!(plan.config_writes as u64, world.config().version - version);
        let restarted: BTreeSet<&str> = world.deleted.iter().map(|(pod, _)| pod.as_str()).collect();
        let predicted: BTreeSet<&str> = plan.workers_restarted.iter().map(String::as_str).collect();
        prop_assert_eq!(predicted, restarted);
        let shares: BTreeMap<String, usize> = world
            .config()
            .workloads()
            .map(|(pod, w)| (pod.to_owned(), w.jobs.len()))
            .filter(|(pod, _)| ordinal_of_name(pod) < to)
            .collect();
        let predicted: BTreeMap<String, usize> = plan
            .workers
            .iter()
            .filter_map(|w| Some((w.pod.clone()?, w.jobs_after?)))
            .collect();
        prop_assert_eq!(predicted, shares);
    }
}

fn ordinal_of_name(pod: &str) -> usize {
    pod.rsplit_once('-')
        .and_then(|(_, o)| o.parse().ok())
        .unwrap_or(usize::MAX)
}

/// A Balanced pool of `replicas` workers under `rollout.policy: Acknowledge`, every worker
/// having acknowledged the version written.
fn acknowledging(replicas: usize) -> World {
    let mut world = balanced(example_jobs(), replicas);
    world.pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    world.ack_all();
    world.reconcile();
    world.ack_all();
    world.reconcile();
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Balanced)
    );
    world.writes = 0;
    world
}

/// Jobs in transit from `pod`.
fn in_transit_from(config: &WorkerConfig, pod: &str) -> BTreeSet<String> {
    config
        .transit()
        .filter(|(from, _)| *from == pod)
        .flat_map(|(_, jobs)| jobs.iter().cloned())
        .collect()
}

#[test]
fn under_acknowledge_a_moved_job_is_granted_once_its_giver_acknowledges_and_nobody_restarts() {
    let mut world = acknowledging(2);
    let before = world.config();
    world.scale(3);
    world.settle_pods();
    world.reconcile();
    let entry = world.config();
    assert_eq!(entry.version, before.version + 1);
    assert!(
        transit_jobs(&entry).is_empty(),
        "nothing moves before the new worker runs: {entry:?}"
    );
    // The new worker starts and acknowledges its empty entry: now the jobs move.
    world.ack(2, entry.version);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(revoked.version, before.version + 2);
    assert_eq!(transit_jobs(&revoked).len(), 9, "floor(27/3) jobs move");
    let holders = world.holders();
    assert_eq!(holders["swarm-worker-0"].version, Some(revoked.version));
    assert_eq!(holders["swarm-worker-0"].uid, world.uid_of(0));
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::RollingOut));
    assert_eq!(
        status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"],
        "the givers owe an acknowledgement (the receiver's entry is unchanged until the grant)"
    );

    // Nothing is granted while the givers have not acknowledged, and a Lease left by another
    // instance of a giver's pod says nothing about this one.
    world.acks.insert(
        "swarm-worker-1",
        Ack {
            holder: "an-earlier-instance".into(),
            version: revoked.version,
        },
    );
    world.ack(0, before.version);
    world.reconcile();
    assert_eq!(world.config(), revoked, "an older version frees nothing");

    // Worker 0 acknowledges the revoke: its jobs go to worker 2 at once, worker 1's wait.
    let from_0 = in_transit_from(&revoked, "swarm-worker-0");
    let from_1 = in_transit_from(&revoked, "swarm-worker-1");
    world.ack(0, revoked.version);
    world.reconcile();
    let partly = world.config();
    assert_eq!(transit_jobs(&partly), from_1);
    let new_jobs: BTreeSet<String> = partly
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(new_jobs, from_0);
    assert!(world.event_reasons().contains(&reason::WORKER_ACKNOWLEDGED));

    world.ack(1, revoked.version);
    world.reconcile();
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [9, 9, 9]);
    assert!(world.holders().is_empty());

    world.ack_all();
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Balanced));
    assert!(status.stale_workers.is_empty());
    assert!(
        world.deleted.is_empty(),
        "nobody restarts: {:?}",
        world.deleted
    );
}

#[test]
fn under_acknowledge_a_scale_down_hands_over_once_the_terminating_worker_acknowledges() {
    let mut world = acknowledging(3);
    let removed: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    world.scale(2);
    world.terminate(2);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(transit_jobs(&revoked), removed);

    // The terminating worker stopped everything and acknowledges the version that revoked its
    // jobs: they are granted while its pod still terminates.
    world.ack(2, revoked.version);
    world.reconcile();
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [14, 13]);
    assert!(
        world.pods.iter().any(|p| ordinal(p) == 2),
        "still terminating"
    );
    assert!(world.deleted.is_empty());
}

#[test]
fn under_acknowledge_a_terminating_member_is_given_nothing_until_its_replacement_runs() {
    let mut world = acknowledging(3);
    let held: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-1")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    // A rollout of the StatefulSet: worker 1's pod terminates and comes back under its name.
    world.terminate(1);
    world.reconcile();
    let revoked = world.config();
    assert!(revoked.workload("swarm-worker-1").unwrap().jobs.is_empty());
    assert_eq!(in_transit_from(&revoked, "swarm-worker-1"), held);
    world.ack(1, revoked.version);
    world.reconcile();
    assert_eq!(
        transit_jobs(&world.config()),
        held,
        "freed, but its worker's pod still terminates"
    );
    world.settle_pods();
    world.reconcile();
    let after = world.config();
    let back: BTreeSet<String> = after
        .workload("swarm-worker-1")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(back, held, "the replacement gets the jobs back");
    assert!(world.deleted.is_empty());
}

#[test]
fn under_acknowledge_a_silent_worker_is_restarted_after_the_timeout_and_the_pool_settles() {
    let mut world = acknowledging(2);
    world.scale(3);
    world.settle_pods();
    world.reconcile();
    world.ack(2, world.config().version);
    world.reconcile();
    let revoked = world.config();
    world.ack(0, revoked.version);
    world.ack(2, revoked.version);
    world.now += SignedDuration::from_secs(30);
    world.reconcile();
    assert!(world.deleted.is_empty(), "within ackTimeoutSeconds");
    world.now += SignedDuration::from_secs(31);
    world.reconcile();
    assert!(world.all_reasons.contains(&reason::ACK_TIMED_OUT));
    for _ in 0..4 {
        world.reconcile();
    }
    assert_eq!(
        names(&world.deleted),
        ["swarm-worker-1"],
        "the silent worker only"
    );
    // Its replacement reads the current config at start; its old instance is gone, so its
    // jobs in transit are granted.
    world.settle_pods();
    for _ in 0..3 {
        world.ack_all();
        world.reconcile();
    }
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [9, 9, 9]);
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Balanced)
    );
    assert_eq!(names(&world.deleted), ["swarm-worker-1"]);
}

#[test]
fn under_acknowledge_a_started_worker_is_stale_until_it_acknowledges_what_it_runs() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(
        status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"],
        "no worker has acknowledged the first version yet"
    );
    assert_ne!(status.phase, Some(Phase::Balanced));

    world.ack(0, world.config().version);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.stale_workers, ["swarm-worker-1"]);

    world.ack(1, world.config().version);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert!(status.stale_workers.is_empty());
    assert_eq!(status.phase, Some(Phase::Balanced));
    assert!(world.deleted.is_empty(), "nobody restarted");
}

#[test]
fn under_acknowledge_a_moving_job_stays_with_its_holder_until_its_destination_is_ready() {
    let mut world = acknowledging(3);
    let before = world.config();
    world.scale(5);
    world.reconcile();
    let waiting = world.config();
    assert!(
        transit_jobs(&waiting).is_empty(),
        "nothing is revoked before a new pod runs"
    );
    assert_eq!(loads(&waiting)[..3], loads(&before)[..]);

    // Ordinal 3 starts, ordinal 4 not yet: jobs are revoked for 3 only, and once their
    // holders acknowledge, granted; nothing goes to 4, which runs nothing yet.
    let uid = world.uid();
    let now = world.now;
    world.pods.push(pod(3, &uid, true, now));
    world.reconcile();
    assert!(
        transit_jobs(&world.config()).is_empty(),
        "a Ready pod whose worker has not acknowledged anything gets nothing yet"
    );
    world.ack(3, world.config().version);
    world.reconcile();
    let revoked = world.config();
    assert!(!transit_jobs(&revoked).is_empty(), "{revoked:?}");
    world.ack_all();
    world.reconcile();
    let granted = world.config();
    assert!(transit_jobs(&granted).is_empty(), "{granted:?}");
    assert!(granted.workload("swarm-worker-3").unwrap().jobs.len() >= 27 / 5);
    assert!(granted.workload("swarm-worker-4").unwrap().jobs.is_empty());
    assert!(world.deleted.is_empty());
}

/// The jobs `pod` holds in `config`.
fn jobs_of(config: &WorkerConfig, pod: &str) -> BTreeSet<String> {
    let workload = config.workload(pod);
    workload
        .map(|w| w.jobs.iter().cloned().collect())
        .unwrap_or_default()
}

/// Marks worker `ordinal`'s pod NotReady (Ready) from now, as the kubelet writes it.
fn ready_from_now(world: &mut World, ordinal: usize, ready: bool) {
    let now = world.now;
    set_ready(world.pod_mut(ordinal), ready, now);
}

/// Every job of `jobs` is held by exactly one worker of `config`, none of them `not`.
fn held_once_elsewhere(config: &WorkerConfig, jobs: &BTreeSet<String>, not: &str) {
    for job in jobs {
        let holders: Vec<&str> = config
            .workloads()
            .filter(|(_, w)| w.jobs.contains(job))
            .map(|(pod, _)| pod)
            .collect();
        assert_eq!(holders.len(), 1, "{job} on one worker: {holders:?}");
        assert_ne!(holders[0], not, "{job} moved");
    }
}

/// The revoke wait of the workers' default permit and the pool's default grace.
fn revoke_wait() -> SignedDuration {
    let wait = swarm_protocol::fence::revoke_wait(
        swarm_protocol::fence::DEFAULT_PERMIT,
        Duration::from_secs(2),
    );
    SignedDuration::try_from(wait).unwrap()
}

#[test]
fn under_acknowledge_a_worker_not_ready_past_the_grace_loses_its_jobs_after_the_revoke_wait() {
    let mut world = acknowledging(3);
    let before = world.config();
    let held = jobs_of(&before, "swarm-worker-1");
    ready_from_now(&mut world, 1, false);
    world.reconcile();
    assert_eq!(world.config(), before, "within rollout.leaseGraceSeconds");

    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    let revoked = world.config();
    assert!(jobs_of(&revoked, "swarm-worker-1").is_empty());
    assert_eq!(
        in_transit_from(&revoked, "swarm-worker-1"),
        held,
        "revoked, not granted: its last read's permit may still hold"
    );
    let status = world.pool.status.clone().unwrap();
    let unavailable: Vec<_> = status
        .unavailable_workers
        .iter()
        .map(|w| (&w.pod[..], w.reason))
        .collect();
    assert_eq!(
        unavailable,
        [("swarm-worker-1", UnavailableReason::NotReady)]
    );
    assert!(world.all_reasons.contains(&reason::WORKER_UNAVAILABLE));
    assert!(world.deleted.is_empty(), "failover deletes no pod");

    // Its jobs go to the others once the wait is over; theirs stay where they are.
    world.now += revoke_wait() + SignedDuration::from_secs(1);
    world.reconcile();
    let after = world.config();
    held_once_elsewhere(&after, &held, "swarm-worker-1");
    for pod in ["swarm-worker-0", "swarm-worker-2"] {
        assert!(
            jobs_of(&before, pod).is_subset(&jobs_of(&after, pod)),
            "{pod} keeps its jobs"
        );
    }

    // Ready again: a member again, and it gets a share back once the others let go.
    ready_from_now(&mut world, 1, true);
    for _ in 0..4 {
        world.ack_all();
        world.reconcile();
    }
    let back = world.config();
    assert_eq!(loads(&back), [9, 9, 9]);
    assert!(transit_jobs(&back).is_empty());
    let status = world.pool.status.clone().unwrap();
    assert!(status.unavailable_workers.is_empty());
    assert!(world.all_reasons.contains(&reason::WORKER_AVAILABLE));
    assert_eq!(status.phase, Some(Phase::Balanced));
}

#[test]
fn under_acknowledge_a_worker_on_a_node_whose_lease_is_silent_is_taken_out_of_the_pool() {
    let mut world = acknowledging(3);
    let held = jobs_of(&world.config(), "swarm-worker-2");
    let renewed_at = world.now;
    world.node_leases = (0..3).map(|o| (node(o), renewed_at)).collect();
    world.now += SignedDuration::from_secs(19);
    world.node_leases[0].1 = world.now;
    world.node_leases[1].1 = world.now;
    world.reconcile();
    assert!(
        world
            .pool
            .status
            .clone()
            .unwrap()
            .unavailable_workers
            .is_empty(),
        "19 s: not yet"
    );

    // node-2's kubelet has not renewed for 20 s: its worker is out, its jobs revoked.
    world.now += SignedDuration::from_secs(1);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(in_transit_from(&revoked, "swarm-worker-2"), held);
    let status = world.pool.status.clone().unwrap();
    let out = &status.unavailable_workers[0];
    assert_eq!(
        (&out.pod[..], out.reason),
        ("swarm-worker-2", UnavailableReason::NodeLeaseSilent)
    );
    assert_eq!(out.since.as_ref().map(|t| t.0), Some(renewed_at));

    // The node renews again: the worker is a member again.
    world.node_leases[2].1 = world.now;
    world.reconcile();
    assert!(
        world
            .pool
            .status
            .clone()
            .unwrap()
            .unavailable_workers
            .is_empty()
    );
}

/// A pool of 3 acknowledging workers whose swarm-worker-1 has been NotReady for the grace: its
/// jobs revoked (in transit from it). Returns the world, those jobs and the revoking config.
fn revoked_from_a_not_ready_worker() -> (World, BTreeSet<String>, WorkerConfig) {
    let mut world = acknowledging(3);
    let held = jobs_of(&world.config(), "swarm-worker-1");
    ready_from_now(&mut world, 1, false);
    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(in_transit_from(&revoked, "swarm-worker-1"), held);
    (world, held, revoked)
}

#[test]
fn under_acknowledge_a_revoke_is_freed_by_the_holders_acknowledgement_at_once() {
    let (mut world, held, revoked) = revoked_from_a_not_ready_worker();

    // Still reading though the kubelet says NotReady: it saw the revoke and acknowledges it.
    world.ack(1, revoked.version);
    world.reconcile();
    held_once_elsewhere(&world.config(), &held, "swarm-worker-1");
}

#[test]
fn under_acknowledge_a_revoke_is_never_granted_before_the_wait_even_across_operator_restarts() {
    let (mut world, held, revoked) = revoked_from_a_not_ready_worker();

    // Just short of the wait (33.2 s): nothing is granted; an older acknowledgement frees
    // nothing either.
    world.ack(1, revoked.version - 1);
    world.now += SignedDuration::from_secs(33);
    world.reconcile();
    assert_eq!(in_transit_from(&world.config(), "swarm-worker-1"), held);

    // The operator restarts 20 s into a wait: its new process knows nothing, so the wait
    // starts again when it first sees the revoke.
    let mut world = acknowledging(3);
    ready_from_now(&mut world, 1, false);
    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    world.now += SignedDuration::from_secs(20);
    world.revokes = RevokeLog::default();
    world.reconcile();
    world.now += SignedDuration::from_secs(20);
    world.reconcile();
    assert_eq!(
        in_transit_from(&world.config(), "swarm-worker-1"),
        held,
        "40 s after the revoke, 20 s after the restart"
    );
    world.now += SignedDuration::from_secs(14);
    world.reconcile();
    held_once_elsewhere(&world.config(), &held, "swarm-worker-1");
}

#[test]
fn under_acknowledge_a_not_ready_pod_whose_container_just_restarted_keeps_its_jobs() {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus};
    let mut world = acknowledging(3);
    let before = world.config();
    // The kubelet restarted the crashed worker in its pod: NotReady until its first read.
    let now = world.now;
    let status = world.pod_mut(1).status.as_mut().unwrap();
    *status = ready_status(false, now);
    status.container_statuses = Some(vec![ContainerStatus {
        name: "worker".into(),
        restart_count: 1,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(now)),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }]);
    world.now += SignedDuration::from_secs(14);
    world.reconcile();
    assert_eq!(
        world.config(),
        before,
        "within 15 s of its start it counts as starting"
    );

    world.now += SignedDuration::from_secs(1);
    world.reconcile();
    assert!(
        jobs_of(&world.config(), "swarm-worker-1").is_empty(),
        "then it is out"
    );
}
