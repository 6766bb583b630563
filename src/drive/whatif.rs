//! A what-if cluster: one pool's workload, pods and ConfigMap in memory, reconciled by the real
//! planner through [`drive`] while a stand-in StatefulSet or ReplicaSet controller replaces the
//! pods the operator deletes, until the pool settles. What the plan commands print is what
//! this cluster saw the operator do.
//!
//! Time is simulated: between reconciles every terminating pod finishes, the workload's
//! controller removes surplus pods and creates missing ones, Ready at once; under
//! `rollout.policy: Acknowledge` every worker acknowledges the config written by then. So the
//! answer is what the operator does when pods come and go promptly; a real rollout whose pods
//! come and go at other paces may split or join grants differently.

use crate::state::node_leases::NodeLeases;
use crate::state::revokes::RevokeWaits;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_assign::pod_name;

use super::memory::{MemoryCluster, MemoryError, block_on};
use super::{Driven, Journal, drive};
use crate::api::crd::{Phase, RolloutPolicy, SwarmPool, SwarmPoolStatus, WorkloadKind};
use crate::state::cached::{Cacheable, CachedPod};
use crate::state::config_map::pool_config;
use crate::state::lease::{Ack, Acks};
use crate::state::pod_summary::{PodSummary, ReadyCondition};
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::STATEFULSET_POD_LABEL;

/// The label that ties the what-if workload to the pool's selector.
const WORKLOAD_LABEL: &str = "swarm.io/what-if";
/// Reconciles before a change counts as not settling.
const MAX_RECONCILES: usize = 200;

/// The pool's workload, its pods and ConfigMap, and the operator's memory of its deletes.
#[derive(Clone, Debug)]
pub struct WhatIf {
    pool: SwarmPool,
    workload: String,
    replicas: usize,
    cluster: MemoryCluster,
    deleting: BTreeSet<String>,
    created: usize,
}

/// What the operator did until the pool settled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    /// Every write of the pool's ConfigMap, as written, in order.
    pub writes: Vec<ConfigMap>,
    /// The worker config after each write (of the pool's ConfigMap or workers' own), in
    /// order; a write of the per-worker layout shows under one version several times, the last
    /// one complete.
    pub configs: Vec<WorkerConfig>,
    /// The pods deleted so they restart, in the order of their deletion.
    pub restarted: Vec<String>,
    /// The status the pool settled on.
    pub status: SwarmPoolStatus,
}

/// The pool did not settle: the operator keeps changing something.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("the pool did not settle after {MAX_RECONCILES} reconciles: {0}")]
pub struct NotSettled(pub String);

impl WhatIf {
    /// The pool over its workload `workload` (of the pool's `workloadKind`) with the pods
    /// `running` (name, uid), all Ready, and the ConfigMap as it is. The pool's selector is
    /// replaced by one that selects the stand-in workload.
    pub fn new(
        mut pool: SwarmPool,
        workload: &str,
        running: &[(String, String)],
        config_map: Option<ConfigMap>,
        worker_config_maps: Vec<ConfigMap>,
        now: Timestamp,
    ) -> Self {
        pool.spec.selector = LabelSelector {
            match_labels: Some(labels(workload)),
            ..LabelSelector::default()
        };
        pool.metadata.deletion_timestamp = None;
        let mut cluster = MemoryCluster::new(now);
        cluster.config_map = config_map;
        cluster.slices = worker_config_maps;
        let mut whatif = WhatIf {
            pool,
            workload: workload.to_owned(),
            replicas: running.len(),
            cluster,
            deleting: BTreeSet::new(),
            created: 0,
        };
        for (name, uid) in running {
            let pod = whatif.pod(name, uid);
            whatif.cluster.pods.push(pod);
        }
        whatif
    }

    /// Scales the workload to `replicas`. Its controller acts on it after the operator's next
    /// reconcile (see [`WhatIf::settle`]).
    pub fn scale(&mut self, replicas: usize) {
        self.replicas = replicas;
    }

    /// Reconciles, letting pods come and go in between, until a reconcile changes nothing and
    /// the pool is not rolling out.
    pub fn settle(&mut self) -> Result<Transcript, NotSettled> {
        let mut transcript = Transcript::default();
        for _ in 0..MAX_RECONCILES {
            let outcome = self.reconcile()?;
            let quiet = self.cluster.written.is_empty() && self.cluster.delete_requests.is_empty();
            transcript.writes.append(&mut self.cluster.written);
            transcript.configs.append(&mut self.cluster.configs);
            for delete in self.cluster.delete_requests.drain(..) {
                self.deleting.insert(delete.uid);
                transcript.restarted.push(delete.name);
            }
            let phase = outcome.status.phase;
            transcript.status = outcome.status;
            // Quiet, with nothing left for the workload's controller to do, and not rolling
            // out: Balanced, or as balanced as it can be (Degraded for want of workers, Failed on
            // an invalid spec). A Deployment pool waits for its ReplicaSet to pick the pods a
            // scale-down removes, so it may be quiet before the pods change.
            if quiet && self.pods_match_replicas() && phase != Some(Phase::RollingOut) {
                return Ok(transcript);
            }
            self.pass_time();
        }
        Err(NotSettled(format!("{:?}", transcript.status.phase)))
    }

    /// The ConfigMap now.
    pub fn config_map(&self) -> Option<&ConfigMap> {
        self.cluster.config_map.as_ref()
    }

    /// The worker config now, in either layout.
    pub fn config(&self) -> Option<WorkerConfig> {
        pool_config(
            self.cluster.config_map.as_ref()?,
            &self.cluster.slice_summaries(),
        )
    }

    /// The pods now, terminating ones included.
    pub fn pods(&self) -> &[PodSummary] {
        &self.cluster.pods
    }

    /// One reconcile, with a cache that follows the API: every write it makes lands in the
    /// what-if cluster (and in the next [`WhatIf::settle`]'s transcript).
    pub fn reconcile(&mut self) -> Result<crate::planner::Outcome, NotSettled> {
        let (statefulset, deployment, replica_set) = self.workload_objects();
        let cached: Vec<CachedPod> = self.cluster.pods.iter().map(Cacheable::cached).collect();
        let config_map = self.cluster.config_map.clone();
        let slices = self.cluster.slice_summaries();
        let acks = self.acks();
        let observed = crate::planner::Observed {
            pool: &self.pool,
            jobs_unresolved: None,
            statefulsets: statefulset.iter().collect(),
            deployments: deployment.iter().collect(),
            replica_sets: replica_set.iter().collect(),
            pods: cached.iter().collect(),
            other_pools: Vec::new(),
            pods_are_live: false,
            config_map: config_map.as_ref(),
            worker_config_maps: slices.iter().collect(),
            slices_are_live: false,
            deleting: &self.deleting,
            acks: &acks,
            revokes: &RevokeWaits::default(),
            node_leases: &NodeLeases::default(),
            now: self.cluster.now,
        };
        match block_on(drive(&mut self.cluster, &observed, &mut Journal::default())) {
            Ok(Driven::Done(outcome)) => Ok(outcome),
            Ok(Driven::PoolGone) => Err(NotSettled("the pool is gone".to_owned())),
            Err(error @ (MemoryError::Crashed | MemoryError::Unsettled(_))) => {
                Err(NotSettled(error.to_string()))
            }
        }
    }

    /// Under `rollout.policy: Acknowledge` every worker has applied the config written and says
    /// so in its Lease by the next reconcile; a terminating one only once its entry is empty.
    fn acks(&self) -> Acks {
        if self.pool.spec.rollout.policy != RolloutPolicy::Acknowledge {
            return Acks::default();
        }
        let config = self.cluster.config_map.as_ref();
        let slices = self.cluster.slice_summaries();
        let Some(config) = config.and_then(|cm| pool_config(cm, &slices)) else {
            return Acks::default();
        };
        Acks::new(self.cluster.pods.iter().filter_map(|pod| {
            let name = pod.metadata.name.clone()?;
            let holder = pod.metadata.uid.clone()?;
            let terminating = pod.metadata.deletion_timestamp.is_some() || pod.finished;
            let holds_jobs = config.workload(&name).is_some_and(|w| !w.jobs.is_empty());
            (!terminating || !holds_jobs).then(|| {
                let ack = Ack {
                    holder,
                    version: config.version,
                };
                (name, ack)
            })
        }))
    }

    /// Ten seconds pass: terminating pods are gone, and the workload's controller removes the
    /// pods beyond `replicas` (a StatefulSet its highest ordinals, a ReplicaSet its newest pods)
    /// and creates the missing ones.
    fn pass_time(&mut self) {
        self.cluster.now += SignedDuration::from_secs(10);
        self.cluster
            .pods
            .retain(|pod| pod.metadata.deletion_timestamp.is_none());
        let replicas = self.replicas;
        if self.kind() == WorkloadKind::StatefulSet {
            self.cluster
                .pods
                .retain(|pod| ordinal(pod).is_none_or(|o| o < replicas));
        } else {
            let mut active = self.active();
            active.sort_by_key(|pod| pod.metadata.creation_timestamp.clone());
            let surplus: BTreeSet<String> = active
                .iter()
                .skip(replicas)
                .filter_map(|pod| pod.metadata.name.clone())
                .collect();
            self.cluster.pods.retain(|pod| {
                pod.metadata
                    .name
                    .as_ref()
                    .is_none_or(|n| !surplus.contains(n))
            });
        }
        self.controller();
    }

    /// The StatefulSet or ReplicaSet controller: creates the pods missing from `replicas`.
    fn controller(&mut self) {
        match self.kind() {
            WorkloadKind::StatefulSet => {
                for i in 0..self.replicas {
                    let name = pod_name(&self.workload, i);
                    let exists = self
                        .cluster
                        .pods
                        .iter()
                        .any(|p| p.metadata.name.as_deref() == Some(name.as_str()));
                    if !exists {
                        self.create(name);
                    }
                }
            }
            WorkloadKind::Deployment => {
                while self.active().len() < self.replicas {
                    let name = format!("{}-whatif-{:05}", self.workload, self.created + 1);
                    self.create(name);
                }
            }
        }
    }

    fn create(&mut self, name: String) {
        self.created += 1;
        let uid = format!("what-if-pod-{}", self.created);
        let pod = self.pod(&name, &uid);
        self.cluster.pods.push(pod);
    }

    /// Every pod runs, and there are as many as the workload asks for: passing time would change
    /// nothing.
    fn pods_match_replicas(&self) -> bool {
        let active = self.active();
        active.len() == self.cluster.pods.len()
            && active.len() == self.replicas
            && (self.kind() == WorkloadKind::Deployment
                || active
                    .iter()
                    .all(|pod| ordinal(pod).is_some_and(|o| o < self.replicas)))
    }

    /// Pods not terminating.
    fn active(&self) -> Vec<PodSummary> {
        self.cluster
            .pods
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none() && !pod.finished)
            .cloned()
            .collect()
    }

    fn kind(&self) -> WorkloadKind {
        self.pool.spec.workload_kind
    }

    /// A Ready pod of the workload, created now.
    fn pod(&self, name: &str, uid: &str) -> PodSummary {
        let now = Time(self.cluster.now);
        let (owner_kind, owner) = match self.kind() {
            WorkloadKind::StatefulSet => ("StatefulSet", self.workload.clone()),
            WorkloadKind::Deployment => ("ReplicaSet", replica_set_name(&self.workload)),
        };
        let mut labels = labels(&self.workload);
        labels.insert(STATEFULSET_POD_LABEL.to_owned(), name.to_owned());
        PodSummary {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: self.pool.metadata.namespace.clone(),
                uid: Some(uid.to_owned()),
                creation_timestamp: Some(now.clone()),
                labels: Some(labels),
                owner_references: Some(vec![controller(owner_kind, &owner)]),
                ..ObjectMeta::default()
            },
            node: None,
            started: None,
            ran: true,
            ready: Some(ReadyCondition {
                is_true: true,
                last_transition_time: Some(now),
            }),
            finished: false,
        }
    }

    /// The stand-in workload objects the planner matches.
    fn workload_objects(&self) -> (Option<StatefulSet>, Option<Deployment>, Option<ReplicaSet>) {
        let meta = |name: &str, owner: Option<OwnerReference>| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: self.pool.metadata.namespace.clone(),
            uid: Some(uid_of(name)),
            labels: Some(labels(&self.workload)),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        };
        let replicas = Some(i32::try_from(self.replicas).unwrap_or(i32::MAX));
        match self.kind() {
            WorkloadKind::StatefulSet => (
                Some(StatefulSet {
                    metadata: meta(&self.workload, None),
                    spec: Some(StatefulSetSpec {
                        replicas,
                        ..StatefulSetSpec::default()
                    }),
                    status: None,
                }),
                None,
                None,
            ),
            WorkloadKind::Deployment => (
                None,
                Some(Deployment {
                    metadata: meta(&self.workload, None),
                    spec: Some(DeploymentSpec {
                        replicas,
                        ..DeploymentSpec::default()
                    }),
                    status: None,
                }),
                Some(ReplicaSet {
                    metadata: meta(
                        &replica_set_name(&self.workload),
                        Some(controller("Deployment", &self.workload)),
                    ),
                    ..ReplicaSet::default()
                }),
            ),
        }
    }
}

fn labels(workload: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(WORKLOAD_LABEL.to_owned(), workload.to_owned())])
}

fn replica_set_name(deployment: &str) -> String {
    format!("{deployment}-whatif")
}

/// The uid of a stand-in object: derived from its name, so every copy agrees.
fn uid_of(name: &str) -> String {
    format!("what-if-{name}")
}

fn controller(kind: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid_of(name),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The ordinal of a StatefulSet pod's name.
fn ordinal(pod: &PodSummary) -> Option<usize> {
    pod.metadata
        .name
        .as_deref()?
        .rsplit_once('-')?
        .1
        .parse()
        .ok()
}
