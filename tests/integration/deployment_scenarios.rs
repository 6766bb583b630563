//! Scenario tests of the pure planner for a pool over a Deployment: pods with random names take
//! slots, a pod that takes a slot over inherits its jobs through the handoff, surplus pods wait
//! with no jobs, and a pod whose jobs change is replaced by one that takes its slot.
//!
//! A small in-memory world (pool, Deployment, ReplicaSet, pods, ConfigMap) is reconciled the way
//! the controller does it, with a ReplicaSet stand-in that replaces deleted pods at once.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{Handoff, Phase, SwarmPool, SwarmPoolSpec, WorkloadKind};
use swarm_operator::drive::memory::{MemoryCluster, block_on};
use swarm_operator::drive::{Driven, Journal, drive};
use swarm_operator::planner::{Observed, Outcome, PlannedEvent};
use swarm_operator::state::cached::{Cacheable, CachedPod};
use swarm_operator::state::lease::Acks;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::SLOTS_ANNOTATION;

use super::fixtures::{self, owner, pool_spec, ready_status};

const NS: &str = "swarm";
const DEPLOYMENT: &str = "stream-worker";
const DEPLOYMENT_UID: &str = "deployment-uid";
const RS: &str = "stream-worker-5d8f7";
const RS_UID: &str = "rs-uid";

fn app_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_owned(), DEPLOYMENT.to_owned())])
}

fn jobs(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("stream:{i:02}")).collect()
}

fn meta(name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        uid: Some(uid.into()),
        labels: Some(app_labels()),
        ..ObjectMeta::default()
    }
}

/// A pool over the Deployment, a Deployment of `replicas` Ready pods, nothing written yet.
struct World {
    pool: SwarmPool,
    deployment: Deployment,
    replica_set: ReplicaSet,
    statefulsets: Vec<StatefulSet>,
    pods: Vec<Pod>,
    config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps (the per-worker layout).
    slices: Vec<ConfigMap>,
    deleting: BTreeSet<String>,
    /// What the workers' Leases acknowledge (under `rollout.policy: Acknowledge`).
    acks: Acks,
    now: Timestamp,
    next_pod: usize,
    /// Pods deleted by the operator, by name.
    deleted: Vec<String>,
    last: Option<Outcome>,
    /// Events of the last reconcile.
    events: Vec<PlannedEvent>,
    /// Extra pods the ReplicaSet stand-in leaves alone (a rollout's `maxSurge`).
    surge: usize,
    /// Other Deployments of the namespace, and the other pools.
    other_deployments: Vec<Deployment>,
    other_pools: Vec<SwarmPool>,
}

impl World {
    fn new(jobs: Vec<String>, replicas: usize) -> World {
        let spec = SwarmPoolSpec {
            workload_kind: WorkloadKind::Deployment,
            ..pool_spec(app_labels(), jobs, "stream-worker-config")
        };
        let pool = fixtures::pool(NS, "stream-pool", spec);
        let mut replica_set = ReplicaSet {
            metadata: meta(RS, RS_UID),
            ..ReplicaSet::default()
        };
        replica_set.metadata.owner_references =
            Some(vec![owner("Deployment", DEPLOYMENT, DEPLOYMENT_UID)]);
        let mut world = World {
            pool,
            deployment: Deployment {
                metadata: meta(DEPLOYMENT, DEPLOYMENT_UID),
                spec: Some(DeploymentSpec {
                    replicas: Some(replicas as i32),
                    ..DeploymentSpec::default()
                }),
                status: None,
            },
            replica_set,
            statefulsets: Vec::new(),
            slices: Vec::new(),
            pods: Vec::new(),
            config_map: None,
            deleting: BTreeSet::new(),
            acks: Acks::default(),
            now: Timestamp::from_second(1_700_000_000).unwrap(),
            next_pod: 0,
            deleted: Vec::new(),
            last: None,
            events: Vec::new(),
            surge: 0,
            other_deployments: Vec::new(),
            other_pools: Vec::new(),
        };
        world.replica_set_controller();
        world
    }

    fn replicas(&self) -> usize {
        self.deployment.spec.as_ref().unwrap().replicas.unwrap() as usize
    }

    /// Creates a pod of the ReplicaSet, Ready, created now.
    fn create_pod(&mut self) -> String {
        self.next_pod += 1;
        let name = format!("{RS}-p{:03}", self.next_pod);
        let uid = format!("00000000-0000-4000-8000-{:012}", self.next_pod);
        let mut metadata = meta(&name, &uid);
        metadata.creation_timestamp = Some(Time(self.now));
        metadata.owner_references = Some(vec![owner("ReplicaSet", RS, RS_UID)]);
        self.pods.push(Pod {
            metadata,
            spec: None,
            status: Some(ready_status(true, self.now)),
        });
        name
    }

    /// The ReplicaSet stand-in: terminating and finished pods do not count (upstream's
    /// `FilterActivePods`), so a deleted or evicted pod is replaced at once; pods beyond
    /// `replicas + surge` are deleted newest first.
    fn replica_set_controller(&mut self) {
        loop {
            let active: Vec<usize> = (0..self.pods.len())
                .filter(|&i| {
                    self.pods[i].metadata.deletion_timestamp.is_none() && !finished(&self.pods[i])
                })
                .collect();
            if active.len() < self.replicas() {
                self.create_pod();
            } else if active.len() > self.replicas() + self.surge {
                let newest = *active.last().unwrap();
                self.pods[newest].metadata.deletion_timestamp = Some(Time(self.now));
            } else {
                break;
            }
        }
    }

    /// The kubelet evicts the pod: its containers stop, its phase becomes Failed, and it stays
    /// in the API (until someone deletes it). The ReplicaSet replaces it.
    fn evict(&mut self, name: &str) {
        let pod = self
            .pods
            .iter_mut()
            .find(|p| p.name_any() == name)
            .expect("the evicted pod exists");
        let status = pod.status.as_mut().expect("a status");
        status.phase = Some("Failed".into());
        status.reason = Some("Evicted".into());
        for condition in status.conditions.iter_mut().flatten() {
            condition.status = "False".into();
        }
        self.replica_set_controller();
    }

    /// Terminating pods finish their grace and are gone.
    fn grace_ends(&mut self) {
        self.pods
            .retain(|p| p.metadata.deletion_timestamp.is_none());
        self.deleting.clear();
    }

    fn scale(&mut self, replicas: usize) {
        self.deployment.spec.as_mut().unwrap().replicas = Some(replicas as i32);
        self.replica_set_controller();
    }

    /// One reconcile through the operator's own round protocol ([`drive`]); the ReplicaSet
    /// replaces deleted pods.
    fn reconcile(&mut self) -> &Outcome {
        let pods: Vec<PodSummary> = self.pods.iter().map(PodSummary::from).collect();
        let cached: Vec<CachedPod> = pods.iter().map(Cacheable::cached).collect();
        let mut cluster = MemoryCluster {
            config_map: self.config_map.clone(),
            slices: self.slices.clone(),
            pods: pods.clone(),
            ..MemoryCluster::new(self.now)
        };
        let mut journal = Journal::default();
        let cached_slices: Vec<SliceSummary> = self.slices.iter().map(SliceSummary::from).collect();
        let driven = block_on(drive(
            &mut cluster,
            &Observed {
                statefulsets: self.statefulsets.iter().collect(),
                deployments: std::iter::once(&self.deployment)
                    .chain(&self.other_deployments)
                    .collect(),
                replica_sets: vec![&self.replica_set],
                pods: cached.iter().collect(),
                other_pools: self.other_pools.iter().collect(),
                config_map: self.config_map.as_ref(),
                worker_config_maps: cached_slices.iter().collect(),
                ..fixtures::observed(&self.pool, &self.acks, &self.deleting, self.now)
            },
            &mut journal,
        ));
        let Ok(Driven::Done(outcome)) = driven else {
            panic!("the reconcile did not finish: {driven:?}");
        };
        self.config_map = cluster.config_map;
        self.slices = cluster.slices;
        self.events = journal.events;
        for delete in cluster.delete_requests {
            let pod = self
                .pods
                .iter_mut()
                .find(|p| p.metadata.uid.as_deref() == Some(delete.uid.as_str()))
                .expect("the operator deletes pods that exist");
            assert!(
                pod.owner_references().iter().any(|r| r.uid == RS_UID),
                "deleted a pod the Deployment does not own"
            );
            pod.metadata.deletion_timestamp = Some(Time(self.now));
            self.deleting.insert(delete.uid.clone());
            self.deleted.push(delete.name);
        }
        self.replica_set_controller();
        self.pool.status = Some(outcome.status.clone());
        self.last.insert(outcome)
    }

    /// Reconciles, letting grace periods end between rounds, until the pool is Balanced.
    fn settle(&mut self) {
        for _ in 0..40 {
            self.now += SignedDuration::from_secs(1);
            let plan = self.reconcile();
            if plan.status.phase == Some(Phase::Balanced) && plan.deletes.is_empty() {
                return;
            }
            self.grace_ends();
        }
        panic!("the pool did not settle: {:?}", self.last);
    }

    fn config(&self) -> WorkerConfig {
        let cm = self.config_map.as_ref().expect("a ConfigMap");
        fixtures::written_config(cm, &self.slices)
    }

    fn slots(&self) -> String {
        self.config_map.as_ref().unwrap().annotations()[SLOTS_ANNOTATION].clone()
    }

    fn live_pods(&self) -> Vec<String> {
        self.pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !finished(p))
            .map(ResourceExt::name_any)
            .collect()
    }

    /// Each live pod with its jobs.
    fn holdings(&self) -> Vec<(String, BTreeSet<String>)> {
        self.live_pods()
            .into_iter()
            .map(|p| {
                let jobs = self.jobs_of(&p);
                (p, jobs)
            })
            .collect()
    }

    /// Each live pod but `except` with its jobs.
    fn holdings_but(&self, except: &str) -> Vec<(String, BTreeSet<String>)> {
        let mut holdings = self.holdings();
        holdings.retain(|(p, _)| p != except);
        holdings
    }

    /// The pod created after the first three took over a slot with `held` and nothing else moved:
    /// the pods in `others` kept their jobs, and no pod was deleted for it.
    fn assert_fourth_pod_inherited(
        &self,
        held: &BTreeSet<String>,
        others: &[(String, BTreeSet<String>)],
    ) {
        let replacement = format!("{RS}-p004");
        assert_eq!(
            &self.jobs_of(&replacement),
            held,
            "the replacement takes its predecessor's slot"
        );
        for (pod, jobs) in others {
            assert_eq!(&self.jobs_of(pod), jobs, "{pod} kept its jobs");
        }
        assert!(
            self.deleted.is_empty(),
            "nobody restarts: {:?}",
            self.deleted
        );
    }

    fn jobs_of(&self, pod: &str) -> BTreeSet<String> {
        self.config()
            .workload(pod)
            .map(|w| w.jobs.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every job exactly once over the live pods, balanced; every live pod listed, no other.
    fn assert_settled(&self) {
        let config = self.config();
        let listed: BTreeSet<&str> = config.workloads().map(|(pod, _)| pod).collect();
        let live = self.live_pods();
        assert_eq!(listed, live.iter().map(String::as_str).collect());
        assert_eq!(config.transit().count(), 0);
        let mut held: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
        held.sort();
        let spec: Vec<&String> = self.pool.spec.jobs.iter().collect();
        let mut want = spec.clone();
        want.sort();
        assert_eq!(held, want, "every job exactly once");
        let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
        let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
        assert!(max - min <= 1, "balanced: {loads:?}");
    }
}

#[test]
fn each_pod_takes_a_slot_oldest_first_and_nobody_restarts_for_a_first_assignment() {
    let mut world = World::new(jobs(27), 2);
    world.settle();
    world.assert_settled();
    assert_eq!(
        world.slots(),
        format!(r#"[["{RS}-p001"],["{RS}-p002"]]"#),
        "slots in pod age order"
    );
    assert_eq!(world.jobs_of(&format!("{RS}-p001")).len(), 14);
    assert!(
        world.deleted.is_empty(),
        "pods that had no jobs wait for them: {:?}",
        world.deleted
    );
    let status = world.pool.status.as_ref().unwrap();
    assert_eq!(status.workload.as_deref(), Some(DEPLOYMENT));
    assert_eq!(status.stateful_set, None);
    assert_eq!(status.workers, 2);
}

#[test]
fn a_surplus_pod_waits_with_no_jobs_then_inherits_the_slot_its_predecessor_frees() {
    let mut world = World::new(jobs(27), 2);
    world.settle();
    let first = format!("{RS}-p001");
    let held = world.jobs_of(&first);

    // maxSurge: a third pod while both run.
    world.surge = 1;
    let surplus = world.create_pod();
    world.reconcile();
    assert_eq!(
        world.config().workload(&surplus).unwrap().jobs,
        Vec::<String>::new()
    );
    assert!(world.deleted.is_empty());

    // The rollout deletes the first pod: its jobs go into transit, then to the surplus pod once
    // it is gone, and nothing else moves.
    let before = world.config();
    world.pods[0].metadata.deletion_timestamp = Some(Time(world.now));
    world.reconcile();
    let revoked = world.config();
    assert!(revoked.workload(&first).is_none());
    assert_eq!(
        revoked.transit().map(|(pod, _)| pod).collect::<Vec<_>>(),
        [first.as_str()]
    );
    assert!(
        world.jobs_of(&surplus).is_empty(),
        "not granted while it terminates"
    );
    world.grace_ends();
    world.reconcile();
    assert_eq!(world.jobs_of(&surplus), held);
    let second = format!("{RS}-p002");
    assert_eq!(
        world.jobs_of(&second),
        before
            .workload(&second)
            .unwrap()
            .jobs
            .iter()
            .cloned()
            .collect()
    );
    assert!(
        world.deleted.is_empty(),
        "the inheriting pod waits for its jobs"
    );
    world.surge = 0;
    world.settle();
    world.assert_settled();
}

#[test]
fn scaling_up_replaces_the_pods_that_gave_jobs_away_and_their_replacements_inherit() {
    let mut world = World::new(jobs(27), 2);
    world.settle();
    let before: BTreeSet<BTreeSet<String>> =
        world.live_pods().iter().map(|p| world.jobs_of(p)).collect();
    world.scale(3);
    world.settle();
    world.assert_settled();
    assert_eq!(
        world.deleted.len(),
        2,
        "the two pods that gave jobs away restarted once each: {:?}",
        world.deleted
    );
    let after: Vec<BTreeSet<String>> = world.live_pods().iter().map(|p| world.jobs_of(p)).collect();
    let kept = after
        .iter()
        .filter(|now| before.iter().any(|b| now.is_subset(b) && now.len() == 9))
        .count();
    assert_eq!(kept, 2, "two slots kept 9 of their own jobs: {after:?}");

    // Scale down: the ReplicaSet deletes the newest pod; only its jobs move.
    let newest = world.live_pods().pop().unwrap();
    let moved = world.jobs_of(&newest);
    let others: Vec<BTreeSet<String>> = world
        .live_pods()
        .iter()
        .filter(|p| **p != newest)
        .map(|p| world.jobs_of(p))
        .collect();
    world.scale(2);
    world.settle();
    world.assert_settled();
    for kept in others {
        assert!(
            world
                .live_pods()
                .iter()
                .any(|p| world.jobs_of(p).is_superset(&kept)),
            "a slot kept {kept:?}"
        );
    }
    assert_eq!(moved.len(), 9);
}

#[test]
fn an_evicted_pod_frees_its_slot_and_its_replacement_inherits_its_jobs() {
    let mut world = World::new(jobs(27), 3);
    world.settle();
    let evicted = format!("{RS}-p002");
    let held = world.jobs_of(&evicted);
    let others = world.holdings_but(&evicted);

    world.evict(&evicted);
    world.settle();
    world.assert_settled();
    world.assert_fourth_pod_inherited(&held, &others);
    assert!(
        world.pods.iter().any(|p| p.name_any() == evicted),
        "granted while the evicted pod is still in the API"
    );
    assert!(world.config().workload(&evicted).is_none());
}

#[test]
fn under_overlap_a_slot_left_free_keeps_its_jobs_for_the_pod_that_takes_it() {
    // 28 jobs over 3 slots: one slot holds the extra job, which a slot counted empty would lose.
    let mut world = World::new(jobs(28), 3);
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    world.settle();
    let (gone, held) = world
        .holdings()
        .into_iter()
        .max_by_key(|(_, jobs)| jobs.len())
        .unwrap();
    assert_eq!(held.len(), 10);
    let others = world.holdings_but(&gone);

    // The pod is gone before its ReplicaSet has created the replacement: a plan sees the free
    // slot, and must not hand its jobs to the other pods.
    world.pods.retain(|p| p.name_any() != gone);
    world.now += SignedDuration::from_secs(1);
    let plan = world.reconcile().clone();
    assert_eq!(plan.status.jobs_in_transit, 10, "{:?}", plan.status);
    for (pod, jobs) in &others {
        assert_eq!(&world.jobs_of(pod), jobs, "{pod} kept its jobs");
    }

    world.replica_set_controller();
    world.settle();
    world.assert_settled();
    world.assert_fourth_pod_inherited(&held, &others);
}

#[test]
fn a_pool_without_its_deployment_fails_with_deployment_not_found() {
    let mut world = World::new(jobs(3), 2);
    world.deployment.metadata.labels = Some(BTreeMap::from([("app".into(), "other".into())]));
    // A StatefulSet with the pool's labels is not what a Deployment pool selects.
    world.statefulsets.push(StatefulSet {
        metadata: meta("stream-worker", "sts-uid"),
        spec: Some(StatefulSetSpec {
            replicas: Some(2),
            ..StatefulSetSpec::default()
        }),
        status: None,
    });
    let plan = world.reconcile().clone();
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert!(world.config_map.is_none());
    let warning = world.events.iter().find(|e| e.warning).expect("a Warning");
    assert_eq!(warning.reason, reason::DEPLOYMENT_NOT_FOUND);
    assert!(
        warning.note.contains("no Deployment in namespace swarm"),
        "{}",
        warning.note
    );
}

/// Reconciles a pool that cannot be served: it fails with `reason`, writes nothing, and warns
/// with a note that says what to fix.
fn assert_fails_with(world: &mut World, reason: &str, note: &str) {
    let plan = world.reconcile().clone();
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert!(world.config_map.is_none());
    assert!(plan.deletes.is_empty());
    let warning = world.events.iter().find(|e| e.warning).expect("a Warning");
    assert_eq!(warning.reason, reason);
    assert!(warning.note.contains(note), "{}", warning.note);
}

#[test]
fn a_selector_matching_two_deployments_fails_with_ambiguous_selector() {
    let mut world = World::new(jobs(3), 2);
    world.other_deployments.push(Deployment {
        metadata: meta("stream-worker-canary", "canary-uid"),
        ..Deployment::default()
    });
    assert_fails_with(
        &mut world,
        reason::AMBIGUOUS_SELECTOR,
        "2 Deployments match app=stream-worker: stream-worker, stream-worker-canary; the selector must match exactly one",
    );
}

#[test]
fn a_deployment_an_older_pool_manages_fails_with_deployment_in_use() {
    let mut world = World::new(jobs(3), 2);
    let mut older = world.pool.clone();
    older.metadata.name = Some("older-pool".into());
    older.metadata.uid = Some("older-pool-uid".into());
    older.metadata.creation_timestamp = Some(Time(world.now - SignedDuration::from_secs(60)));
    world.pool.metadata.creation_timestamp = Some(Time(world.now));
    world.other_pools.push(older.clone());
    assert_fails_with(
        &mut world,
        reason::DEPLOYMENT_IN_USE,
        "Deployment stream-worker is already managed by the older SwarmPool older-pool",
    );

    // An older pool over a StatefulSet with the same labels does not claim the Deployment.
    older.spec.workload_kind = WorkloadKind::StatefulSet;
    world.other_pools = vec![older];
    world.settle();
    world.assert_settled();
}

/// The pod's phase is terminal (`Failed` or `Succeeded`).
fn finished(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| matches!(phase, "Failed" | "Succeeded"))
}
