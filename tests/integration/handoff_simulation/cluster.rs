//! The model cluster: a StatefulSet or a Deployment (with its ReplicaSet controller), pods that
//! start late and terminate slowly, the ConfigMaps, the workers' Leases, the nodes and their
//! kubelets, and what every pod instance runs. Under `Acknowledge` each pod runs a worker
//! [`Process`] in real time (see [`super::events`]); otherwise a worker runs its entry of the
//! file it read at start.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, MicroTime, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_operator::state::config_map::pool_config;
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::config::CONFIG_KEY;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::{ACKED_VERSION_ANNOTATION, POOL_LABEL};
use swarm_protocol::names::{DEPLOYMENT_POD_LABEL, STATEFULSET_POD_LABEL};
use swarm_protocol::slices::slice_name;
use swarm_worker::handoff::Entry;

use super::process::{self, PERMIT, Process, WorkerBugs};
use crate::fixtures::{owner, ready_status};

pub const NS: &str = "sim";
pub const STS: &str = "w";
pub const STS_UID: &str = "sts-uid";
pub const DEPLOYMENT_UID: &str = "deployment-uid";
/// The nodes pods are spread over (by ordinal): a cut node takes every pod on it along.
pub const NODES: usize = 3;

/// The kind of workload the pool's workers belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    StatefulSet,
    /// A Deployment rolling with maxSurge 1 and maxUnavailable 0; its pods start with whatever
    /// entry they find and, while it has no jobs, read the file again when the kubelet
    /// refreshes it.
    Deployment,
}

/// How a worker reaches the API server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    #[default]
    Up,
    /// Requests are refused at once.
    Fail,
    /// Requests hang: no answer until the worker's own timeout.
    Hang,
}

/// One pod instance as the API server has it, and what its worker runs.
#[derive(Clone, Debug)]
pub struct PodInstance {
    /// The ordinal of a StatefulSet's pod; a Deployment's pods count up in creation order.
    pub ordinal: usize,
    name: String,
    /// The ReplicaSet revision of a Deployment's pod.
    pub revision: usize,
    pub uid: String,
    pub node: String,
    /// The step at which its containers start.
    pub starts_at: u64,
    /// Without `Acknowledge`: the jobs its worker runs, its own entry of the `config.yml` it
    /// last read; `None` until it has started. Under `Acknowledge`: `Some` once started (what
    /// runs is its process's).
    pub runs: Option<BTreeSet<String>>,
    /// Deleted: gone from the API at this step (it keeps running until then).
    pub gone_at: Option<u64>,
    /// Termination grace, in steps.
    pub grace: u64,
    /// Under `Acknowledge`: its worker process, once started.
    pub process: Option<Process>,
    /// Under `Acknowledge`: how its worker reaches the API server.
    pub link: Link,
    /// Its status as the kubelet last wrote it: Ready, since when (real ms), when its
    /// container started and how often it was restarted.
    pub ready: bool,
    pub ready_since: u64,
    pub started: Option<u64>,
    pub restarts: i32,
}

impl PodInstance {
    pub fn name(&self) -> String {
        self.name.clone()
    }

    pub fn uid_number(&self) -> u64 {
        self.uid.rsplit('-').next().unwrap().parse().unwrap()
    }

    /// The jobs that do work on this instance at real millisecond `millis`.
    pub fn running(&self, millis: u64) -> Vec<&str> {
        match &self.process {
            Some(process) => process.running(millis).iter().map(String::as_str).collect(),
            None => self.runs.iter().flatten().map(String::as_str).collect(),
        }
    }
}

/// A node: when its kubelet last renewed the node's Lease, and whether it is cut off.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub renewed: u64,
    pub cut: bool,
}

/// The model cluster.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub kind: Kind,
    pub step: u64,
    pub replicas: usize,
    /// The Deployment's current template revision (`rollout restart` adds one).
    pub revision: usize,
    pub pods: Vec<PodInstance>,
    pub config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps (the per-worker layout of `Acknowledge`).
    pub slices: Vec<ConfigMap>,
    /// Workers follow `rollout.policy: Acknowledge`: each pod runs a [`Process`].
    pub acknowledge: bool,
    /// The workers' Leases, by pod name.
    pub leases: BTreeMap<String, LeaseRecord>,
    pub nodes: BTreeMap<String, Node>,
    /// The API server cannot reach etcd: every request hangs until it can.
    pub etcd_down: bool,
    pub bugs: WorkerBugs,
    /// Real time, in milliseconds: a tick is a second, and time also passes between ticks.
    pub millis: u64,
    /// Draws the delays of requests: the schedule's seed.
    pub rng: u64,
    /// Some requests are slow (up to 12 s): under faults, until they end.
    pub slow: bool,
    /// Whether two instances running one job is a failure (`Exclusive`).
    pub exclusive: bool,
    /// The first duplicate seen: when, and what.
    pub duplicate: Option<String>,
    /// Real milliseconds during which some job ran on two instances.
    pub duplicate_millis: u64,
    pub(super) duplicated_since: Option<u64>,
    /// The kubelets' next instant to act on.
    pub(super) kubelet_from: u64,
    next_uid: u64,
}

/// What a worker's Lease says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The uid of the pod instance that wrote it.
    pub holder: String,
    /// The config version whose entry it runs exactly, if it acknowledged one.
    pub acked: Option<u64>,
    /// When it was written, in real milliseconds (its `renewTime`).
    pub renewed: u64,
}

impl Cluster {
    pub fn of(kind: Kind, replicas: usize) -> Cluster {
        let mut cluster = Cluster {
            kind,
            step: 0,
            replicas,
            revision: 1,
            pods: Vec::new(),
            config_map: None,
            slices: Vec::new(),
            acknowledge: false,
            leases: BTreeMap::new(),
            nodes: (0..NODES)
                .map(|n| (node_name(n), Node::default()))
                .collect(),
            etcd_down: false,
            bugs: WorkerBugs::default(),
            millis: 0,
            rng: 0,
            slow: false,
            exclusive: true,
            duplicate: None,
            duplicate_millis: 0,
            duplicated_since: None,
            kubelet_from: 0,
            next_uid: 0,
        };
        cluster.controller();
        cluster
    }

    pub fn now(&self) -> Timestamp {
        at_millis(self.millis)
    }

    /// A delay in milliseconds drawn from the schedule's seed: mostly short, now and then
    /// up to `slow`.
    pub fn draw(&mut self, fast: u64, slow: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if self.slow && z.is_multiple_of(8) {
            (z >> 3) % (slow + 1)
        } else {
            (z >> 3) % (fast + 1)
        }
    }

    /// Time passes one step (a second): pods start, grace periods run out, and the workload's
    /// controller acts.
    pub fn tick(&mut self) {
        self.step += 1;
        self.advance(1000);
        let step = self.step;
        self.pods.retain(|p| p.gone_at.is_none_or(|at| at > step));
        let configs = self.configs();
        let (acknowledge, millis, bugs) = (self.acknowledge, self.millis, self.bugs);
        for pod in &mut self.pods {
            if pod.runs.is_none() && pod.gone_at.is_none() && pod.starts_at <= step {
                pod.started = Some(millis);
                if acknowledge {
                    // It starts fenced: nothing runs before its first read.
                    let rate = process::rate(pod.uid_number());
                    pod.process = Some(Process::start(rate, millis, bugs));
                    pod.runs = Some(BTreeSet::new());
                    continue;
                }
                pod.runs = Some(own_jobs(configs[&pod.name()].as_ref(), &pod.name()));
            }
        }
        self.controller();
        self.advance(0);
    }

    /// Every worker's entry in its own ConfigMap as the API server has it now (what a quorum
    /// read shows).
    pub fn entry(&self, pod: &str) -> Entry {
        let name = slice_name("pool-config", pod);
        self.slices
            .iter()
            .find(|cm| cm.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|cm| cm.data.as_ref()?.get(CONFIG_KEY))
            .and_then(|text| swarm_worker::source::parse(text, pod).ok())
            .unwrap_or_default()
    }

    /// The workers' Leases as the API server serves them.
    pub fn lease_objects(&self) -> Vec<Lease> {
        self.leases
            .iter()
            .map(|(pod, record)| lease_object(pod, record))
            .collect()
    }

    /// The nodes' Leases as the API server serves them: (node, renewTime).
    pub fn node_leases(&self) -> Vec<(String, Timestamp)> {
        self.nodes
            .iter()
            .map(|(name, node)| (name.clone(), at_millis(node.renewed)))
            .collect()
    }

    fn controller(&mut self) {
        match self.kind {
            Kind::StatefulSet => self.statefulset_controller(),
            Kind::Deployment => self.deployment_controller(),
        }
    }

    fn new_instance(&mut self, ordinal: usize, name: String) -> PodInstance {
        self.next_uid += 1;
        PodInstance {
            ordinal,
            name,
            revision: self.revision,
            uid: format!("00000000-0000-4000-8000-{:012}", self.next_uid),
            node: node_name(ordinal % NODES),
            starts_at: self.step + self.next_uid % 2,
            runs: None,
            gone_at: None,
            grace: 1 + self.next_uid % 3,
            process: None,
            link: Link::Up,
            ready: false,
            ready_since: self.millis,
            started: None,
            restarts: 0,
        }
    }

    /// The Deployment and ReplicaSet controllers: pods of the current revision are created up
    /// to `replicas` within a surge of one (a terminating pod does not count, so a deleted pod
    /// is replaced at once); an old revision's pod goes once the pods that stay all run; surplus
    /// pods of the current revision go newest first.
    fn deployment_controller(&mut self) {
        let step = self.step;
        let active = |c: &Cluster| -> Vec<usize> {
            (0..c.pods.len())
                .filter(|&i| c.pods[i].gone_at.is_none())
                .collect()
        };
        loop {
            let live = active(self);
            let (new, old): (Vec<usize>, Vec<usize>) = live
                .iter()
                .partition(|&&i| self.pods[i].revision == self.revision);
            let available = live
                .iter()
                .filter(|&&i| self.pods[i].runs.is_some())
                .count();
            let victim = if new.len() > self.replicas {
                new.last().copied()
            } else if live.len() > self.replicas && available > self.replicas {
                // maxUnavailable 0: an old pod goes once the pods that stay are all running.
                old.first().copied()
            } else {
                None
            };
            if let Some(i) = victim {
                let pod = &mut self.pods[i];
                pod.gone_at = Some(step + pod.grace);
                continue;
            }
            if new.len() < self.replicas && live.len() < self.replicas + 1 {
                // Names are never reused: the next uid numbers the pod.
                let ordinal = self.next_uid as usize + 1;
                let name = format!("{STS}-rs{}-p{ordinal:03}", self.revision);
                let pod = self.new_instance(ordinal, name);
                self.pods.push(pod);
                continue;
            }
            break;
        }
    }

    /// `kubectl rollout restart`: a new template revision.
    pub fn rollout_restart(&mut self) {
        if self.kind == Kind::Deployment {
            self.revision += 1;
            self.controller();
        }
    }

    /// The kubelet refreshes the mounted file of the pods in `mask`: a Deployment's worker that
    /// still has no jobs reads its entry again.
    pub fn refresh_mounts(&mut self, mask: u8) {
        self.refresh_mounts_where(|i| i < 8 && mask & (1 << i) != 0);
    }

    /// The kubelet refreshes every mounted file (it does within about a minute).
    pub fn refresh_all_mounts(&mut self) {
        self.refresh_mounts_where(|_| true);
    }

    fn refresh_mounts_where(&mut self, refreshed: impl Fn(usize) -> bool) {
        // Acknowledging workers read the API, not the file.
        if self.kind != Kind::Deployment || self.acknowledge {
            return;
        }
        let configs = self.configs();
        for (i, pod) in self.pods.iter_mut().enumerate() {
            let waiting = pod.runs.as_ref().is_some_and(BTreeSet::is_empty);
            if waiting && refreshed(i) {
                pod.runs = Some(own_jobs(configs[&pod.name].as_ref(), &pod.name()));
            }
        }
    }

    /// The pod a schedule names by number: a StatefulSet's by ordinal, a Deployment's by its
    /// position in the pod list.
    pub fn pod_at(&self, index: usize) -> Option<&PodInstance> {
        match self.kind {
            Kind::StatefulSet => self.pods.iter().find(|p| p.ordinal == index),
            Kind::Deployment if self.pods.is_empty() => None,
            Kind::Deployment => self.pods.get(index % self.pods.len()),
        }
    }

    /// Creates missing ordinals (only once no instance of the name is left: two instances of a
    /// pod name never exist at once) and deletes surplus ones.
    fn statefulset_controller(&mut self) {
        for ordinal in 0..self.replicas {
            if !self.pods.iter().any(|p| p.ordinal == ordinal) {
                let pod = self.new_instance(ordinal, format!("{STS}-{ordinal}"));
                self.pods.push(pod);
            }
        }
        let replicas = self.replicas;
        let step = self.step;
        for pod in self.pods.iter_mut().filter(|p| p.ordinal >= replicas) {
            if pod.gone_at.is_none() {
                pod.gone_at = Some(step + pod.grace);
            }
        }
        self.pods.sort_by_key(|p| p.ordinal);
    }

    /// A graceful delete of the instance `uid`; false when no such instance exists. Its
    /// worker gets SIGTERM.
    pub fn delete(&mut self, uid: &str) -> bool {
        let (step, millis) = (self.step, self.millis);
        let Some(pod) = self.pods.iter_mut().find(|p| p.uid == uid) else {
            return false;
        };
        if pod.gone_at.is_none() {
            pod.gone_at = Some(step + pod.grace);
            if let Some(process) = &mut pod.process {
                process.terminate(millis);
            }
        }
        true
    }

    /// The instance of pod `index` ([`Cluster::pod_at`]) disappears at once with its worker
    /// (its node is lost and it is removed).
    pub fn lose(&mut self, index: usize) {
        if let Some(uid) = self.pod_at(index).map(|p| p.uid.clone()) {
            self.pods.retain(|p| p.uid != uid);
        }
        self.controller();
    }

    /// The worker process of pod `index` crashes and the kubelet restarts its container in the
    /// same pod (same uid). Without `Acknowledge` it reads the mounted file again, which the
    /// kubelet may have refreshed to the newest content; under it, the new process starts
    /// fenced and runs nothing before its first read.
    pub fn restart_container(&mut self, index: usize) {
        let configs = self.configs();
        let Some(uid) = self.pod_at(index).map(|p| p.uid.clone()) else {
            return;
        };
        let (millis, bugs) = (self.millis, self.bugs);
        let pod = self.pods.iter_mut().find(|p| p.uid == uid).unwrap();
        if pod.runs.is_none() {
            return;
        }
        pod.started = Some(millis);
        pod.restarts += 1;
        if let Some(process) = &mut pod.process {
            let terminating = pod.gone_at.is_some();
            *process = Process::start(process.rate, millis, bugs);
            if terminating {
                process.terminate(millis);
            }
            return;
        }
        pod.runs = Some(own_jobs(configs[&pod.name].as_ref(), &pod.name()));
    }

    /// The pool's config as the operator wrote it, in either layout.
    pub fn config(&self) -> Option<WorkerConfig> {
        let slices: Vec<SliceSummary> = self.slices.iter().map(SliceSummary::from).collect();
        pool_config(self.config_map.as_ref()?, &slices)
    }

    /// What each pod reads without `Acknowledge`: the pool's `config.yml`.
    fn configs(&self) -> BTreeMap<String, Option<WorkerConfig>> {
        let config = self
            .config_map
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get(CONFIG_KEY))
            .and_then(|text| WorkerConfig::parse(text).ok());
        self.pods
            .iter()
            .map(|pod| (pod.name.clone(), config.clone()))
            .collect()
    }

    /// What runs now: job -> the pod instances that do work on it.
    pub fn holders(&self) -> BTreeMap<&str, Vec<&PodInstance>> {
        let mut by_job: BTreeMap<&str, Vec<&PodInstance>> = BTreeMap::new();
        for pod in &self.pods {
            for job in pod.running(self.millis) {
                by_job.entry(job).or_default().push(pod);
            }
        }
        by_job
    }

    /// The Deployment as the API serves it, for a Deployment cluster.
    pub fn deployment(&self) -> Option<Deployment> {
        (self.kind == Kind::Deployment).then(|| Deployment {
            metadata: ObjectMeta {
                name: Some(STS.into()),
                namespace: Some(NS.into()),
                uid: Some(DEPLOYMENT_UID.into()),
                labels: Some(labels()),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(self.replicas as i32),
                ..DeploymentSpec::default()
            }),
            status: None,
        })
    }

    /// The Deployment's ReplicaSets, one per revision so far.
    pub fn replica_sets(&self) -> Vec<ReplicaSet> {
        if self.kind != Kind::Deployment {
            return Vec::new();
        }
        (1..=self.revision)
            .map(|revision| ReplicaSet {
                metadata: ObjectMeta {
                    name: Some(replica_set_name(revision)),
                    namespace: Some(NS.into()),
                    uid: Some(format!("rs-uid-{revision}")),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: STS.into(),
                        uid: DEPLOYMENT_UID.into(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]),
                    ..ObjectMeta::default()
                },
                ..ReplicaSet::default()
            })
            .collect()
    }

    /// The StatefulSet as the API serves it, for a StatefulSet cluster.
    pub fn statefulset(&self) -> Option<StatefulSet> {
        (self.kind == Kind::StatefulSet).then(|| self.statefulset_object())
    }

    fn statefulset_object(&self) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(STS.into()),
                namespace: Some(NS.into()),
                uid: Some(STS_UID.into()),
                labels: Some(labels()),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(self.replicas as i32),
                selector: LabelSelector {
                    match_labels: Some(labels()),
                    ..LabelSelector::default()
                },
                ..StatefulSetSpec::default()
            }),
            status: None,
        }
    }

    /// Every pod as the API serves it.
    pub fn api_pods(&self) -> Vec<Pod> {
        self.pods.iter().map(|p| self.pod_object(p)).collect()
    }

    pub fn pod_object(&self, pod: &PodInstance) -> Pod {
        let t0 = Time(Timestamp::from_second(1_700_000_000).unwrap());
        let mut labels = labels();
        let owner = match self.kind {
            Kind::StatefulSet => {
                labels.insert(STATEFULSET_POD_LABEL.into(), pod.name());
                owner("StatefulSet", STS, STS_UID)
            }
            Kind::Deployment => {
                labels.insert(DEPLOYMENT_POD_LABEL.into(), format!("rs{}", pod.revision));
                let name = replica_set_name(pod.revision);
                owner("ReplicaSet", &name, &format!("rs-uid-{}", pod.revision))
            }
        };
        // Pods are created in ordinal order: a Deployment gives the oldest the first slots.
        let created = Time(t0.0 + SignedDuration::from_secs(pod.ordinal as i64));
        let mut status = if self.acknowledge {
            ready_status(pod.ready, at_millis(pod.ready_since))
        } else {
            ready_status(pod.runs.is_some(), t0.0)
        };
        status.container_statuses = pod.started.filter(|_| self.acknowledge).map(|started| {
            vec![ContainerStatus {
                name: "worker".into(),
                restart_count: pod.restarts,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(at_millis(started))),
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]
        });
        Pod {
            metadata: ObjectMeta {
                name: Some(pod.name()),
                namespace: Some(NS.into()),
                uid: Some(pod.uid.clone()),
                creation_timestamp: Some(created),
                deletion_timestamp: pod.gone_at.map(|_| t0.clone()),
                labels: Some(labels),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(pod.node.clone()),
                ..PodSpec::default()
            }),
            status: Some(status),
        }
    }
}

fn replica_set_name(revision: usize) -> String {
    format!("{STS}-rs{revision}")
}

pub fn node_name(index: usize) -> String {
    format!("node-{index}")
}

/// The wall clock at real millisecond `millis` (offsets do not matter, only rates).
pub fn at_millis(millis: u64) -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap() + SignedDuration::from_millis(millis as i64)
}

pub fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_owned(), STS.to_owned())])
}

fn own_jobs(config: Option<&WorkerConfig>, pod: &str) -> BTreeSet<String> {
    config
        .and_then(|c| c.workload(pod))
        .map(|w| w.jobs.iter().cloned().collect())
        .unwrap_or_default()
}

/// A worker's Lease as the API server serves it, declaring the workers' permit.
fn lease_object(pod: &str, record: &LeaseRecord) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(pod.to_owned()),
            namespace: Some(NS.into()),
            labels: Some([(POOL_LABEL.to_owned(), "pool".to_owned())].into()),
            annotations: record
                .acked
                .map(|v| [(ACKED_VERSION_ANNOTATION.to_owned(), v.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(record.holder.clone()),
            lease_duration_seconds: Some(PERMIT.as_secs() as i32),
            renew_time: Some(MicroTime(at_millis(record.renewed))),
            ..LeaseSpec::default()
        }),
    }
}
