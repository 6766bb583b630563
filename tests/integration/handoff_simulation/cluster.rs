//! The model cluster: a StatefulSet or a Deployment (with its ReplicaSet controller), pods that
//! start late and terminate slowly, the ConfigMap, and what every pod instance runs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
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

use super::process::{self, LEASE_DURATION, Process};
use crate::fixtures::{owner, ready_status};

pub const NS: &str = "sim";
pub const STS: &str = "w";
pub const STS_UID: &str = "sts-uid";
pub const DEPLOYMENT_UID: &str = "deployment-uid";

/// The kind of workload the pool's workers belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    StatefulSet,
    /// A Deployment rolling with maxSurge 1 and maxUnavailable 0; its pods start with whatever
    /// entry they find and, while it has no jobs, read the file again when the kubelet
    /// refreshes it.
    Deployment,
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
    /// The step at which its containers start and mount the ConfigMap.
    pub starts_at: u64,
    /// The jobs its worker runs: its own entry of the `config.yml` it last read; `None` until
    /// it has started.
    pub runs: Option<BTreeSet<String>>,
    /// Deleted: gone from the API at this step (it keeps running until then).
    pub gone_at: Option<u64>,
    /// Termination grace, in steps.
    pub grace: u64,
    /// Under `Acknowledge`: the config version its worker applied last, and that version's
    /// entry for it (the config may have moved on since).
    pub applied: Option<(u64, BTreeSet<String>)>,
    /// Under Lease faults: its worker process, once started.
    pub process: Option<Process>,
}

impl PodInstance {
    pub fn name(&self) -> String {
        self.name.clone()
    }

    fn uid_number(&self) -> u64 {
        self.uid.rsplit('-').next().unwrap().parse().unwrap()
    }
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
    /// Workers follow `rollout.policy: Acknowledge`: they read the ConfigMap through the API
    /// (each when its watch delivers, see [`Cluster::sync`]) and acknowledge what they run in
    /// a Lease per pod name (see [`Cluster::ack`]).
    pub acknowledge: bool,
    /// The workers' Leases, by pod name.
    pub leases: BTreeMap<String, LeaseRecord>,
    /// Workers renew their Lease on their own clock, fence themselves, pause and lose the API
    /// server (see [`Process`]); their Leases carry a duration, so the operator judges expiry.
    pub lease_faults: bool,
    /// Under Lease faults, whether workers fence themselves (false: a deliberately wrong
    /// worker, to show the simulation notices).
    pub fencing: bool,
    /// Under Lease faults, a deliberately wrong worker process that runs its entry as soon as
    /// it starts, its start counting as a renewal.
    pub starts_live: bool,
    /// Real time, in milliseconds: a tick is a second, and time also passes between ticks.
    pub millis: u64,
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
            lease_faults: false,
            fencing: true,
            starts_live: false,
            millis: 0,
            next_uid: 0,
        };
        cluster.controller();
        cluster
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
            + SignedDuration::from_millis(self.millis as i64)
    }

    /// Time passes one step (a second): pods start (mounting the ConfigMap as it is now),
    /// grace periods run out, and the StatefulSet controller acts.
    pub fn tick(&mut self) {
        self.step += 1;
        self.elapse(1000);
        let step = self.step;
        self.pods.retain(|p| p.gone_at.is_none_or(|at| at > step));
        let configs = self.configs();
        let (lease_faults, millis) = (self.lease_faults, self.millis);
        let starts_live = self.starts_live;
        for pod in &mut self.pods {
            if pod.runs.is_none() && pod.gone_at.is_none() && pod.starts_at <= step {
                if lease_faults && starts_live {
                    let rate = process::rate(pod.uid_number());
                    pod.process = Some(Process::start_live(rate, millis));
                } else if lease_faults {
                    // It starts fenced: nothing runs before its first renewal and a read.
                    let rate = process::rate(pod.uid_number());
                    pod.process = Some(Process::start(rate, millis));
                    pod.runs = Some(BTreeSet::new());
                    continue;
                }
                let config = &configs[&pod.name()];
                let entry = own_jobs(config.as_ref(), &pod.name());
                pod.applied = config.as_ref().map(|c| (c.version, entry.clone()));
                pod.runs = Some(entry);
            }
        }
        self.controller();
    }

    /// `ms` milliseconds of real time pass: each running worker process checks its fence.
    pub fn elapse(&mut self, ms: u64) {
        self.millis += ms;
        self.check_fences();
    }

    /// Every worker process that is not paused fences itself if its last renewal is too old.
    fn check_fences(&mut self) {
        let (fencing, millis) = (self.fencing, self.millis);
        for pod in &mut self.pods {
            let Some(process) = pod.process.as_mut().filter(|p| !p.paused && fencing) else {
                continue;
            };
            if process.fence.check(process.now(millis)) {
                pod.runs = Some(BTreeSet::new());
            }
        }
    }

    /// SIGSTOP of the worker process of pod `index`.
    pub fn pause(&mut self, index: usize) {
        if let Some(process) = self.process_at(index) {
            process.paused = true;
        }
    }

    /// SIGCONT of the worker process of pod `index`: its fence is checked before it runs
    /// anything again.
    pub fn resume(&mut self, index: usize) {
        if let Some(process) = self.process_at(index) {
            process.paused = false;
        }
        self.check_fences();
    }

    /// The worker process of pod `index` loses (`true`) or regains the API server.
    pub fn partition(&mut self, index: usize, cut: bool) {
        if let Some(process) = self.process_at(index) {
            process.partitioned = cut;
        }
    }

    /// Every fault ends: paused processes resume, partitions heal.
    pub fn heal(&mut self) {
        for process in self.pods.iter_mut().filter_map(|p| p.process.as_mut()) {
            process.paused = false;
            process.partitioned = false;
        }
        self.check_fences();
    }

    fn process_at(&mut self, index: usize) -> Option<&mut Process> {
        let uid = self.pod_at(index)?.uid.clone();
        let pod = self.pods.iter_mut().find(|p| p.uid == uid)?;
        pod.process.as_mut()
    }

    /// The workers' Leases as the API server serves them.
    pub fn lease_objects(&self) -> Vec<Lease> {
        self.leases
            .iter()
            .map(|(pod, record)| lease_object(pod, record, self.lease_faults))
            .collect()
    }

    /// Under `Acknowledge`, the ConfigMap watch of the workers in `mask` delivers: each applies
    /// its entry of the current version (a terminating one only stops jobs, it starts none).
    pub fn sync(&mut self, mask: u8) {
        self.sync_where(|i| i < 8 && mask & (1 << i) != 0);
    }

    fn sync_where(&mut self, synced: impl Fn(usize) -> bool) {
        if !self.acknowledge {
            return;
        }
        let configs = self.configs();
        let (fencing, millis) = (self.fencing, self.millis);
        for (i, pod) in self.pods.iter_mut().enumerate() {
            if pod.runs.is_none() || !synced(i) {
                continue;
            }
            let mut config = configs[&pod.name].clone();
            if pod.process.as_ref().is_some_and(|p| !p.connected()) {
                continue;
            }
            if let Some(process) = pod.process.as_mut().filter(|_| fencing) {
                // The answer to the fence's read: it lifts the fence if it came in time, and
                // the worker applies what it read (the watch may deliver newer later).
                if let Some((tag, read)) = process.read.take()
                    && process.fence.read(tag, process.now(millis))
                {
                    config = read;
                }
                if !process.fence.is_live() {
                    continue;
                }
            }
            let Some(config) = config else { continue };
            let entry = own_jobs(Some(&config), &pod.name);
            let runs = pod.runs.as_mut().expect("started");
            if pod.gone_at.is_some() {
                runs.retain(|job| entry.contains(job));
            } else {
                runs.clone_from(&entry);
            }
            pod.applied = Some((config.version, entry));
        }
    }

    /// Under `Acknowledge`, the workers in `mask` write their Lease: the version they applied,
    /// if they run exactly its entry (a terminating worker that still runs jobs its entry no
    /// longer lists, or that waits for jobs it will not start, acknowledges nothing).
    pub fn ack(&mut self, mask: u8) {
        self.ack_where(|i| i < 8 && mask & (1 << i) != 0);
    }

    fn ack_where(&mut self, acked: impl Fn(usize) -> bool) {
        if !self.acknowledge {
            return;
        }
        let configs = self.configs();
        let (fencing, millis) = (self.fencing, self.millis);
        for (i, pod) in self.pods.iter_mut().enumerate() {
            let config = &configs[&pod.name];
            let Some(runs) = pod.runs.as_mut() else {
                continue;
            };
            if !acked(i) || pod.process.as_ref().is_some_and(|p| !p.connected()) {
                continue;
            }
            let live = !fencing || pod.process.as_ref().is_none_or(|p| p.fence.is_live());
            // The version it applied, though the config may have moved on since.
            let acks = pod
                .applied
                .as_ref()
                .filter(|(_, entry)| live && runs == entry)
                .map(|(version, _)| *version);
            let previous = self.leases.get(&pod.name).filter(|l| l.holder == pod.uid);
            let record = LeaseRecord {
                holder: pod.uid.clone(),
                acked: acks.or_else(|| previous.and_then(|l| l.acked)),
                renewed: millis,
            };
            // Without Lease faults a worker writes only to acknowledge; with them, every write
            // renews.
            let Some(process) = pod.process.as_mut() else {
                if acks.is_some() {
                    self.leases.insert(pod.name.clone(), record);
                }
                continue;
            };
            self.leases.insert(pod.name.clone(), record);
            if process.renewed(millis, config.clone()) && fencing {
                runs.clear();
            }
        }
    }

    /// Every worker reads the current version and acknowledges it (settling).
    pub fn sync_and_ack_all(&mut self) {
        self.sync_where(|_| true);
        self.ack_where(|_| true);
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
            starts_at: self.step + self.next_uid % 2,
            runs: None,
            gone_at: None,
            grace: 1 + self.next_uid % 3,
            applied: None,
            process: None,
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

    /// A graceful delete of the instance `uid`; false when no such instance exists.
    pub fn delete(&mut self, uid: &str) -> bool {
        let step = self.step;
        match self.pods.iter_mut().find(|p| p.uid == uid) {
            Some(pod) => {
                if pod.gone_at.is_none() {
                    pod.gone_at = Some(step + pod.grace);
                }
                true
            }
            None => false,
        }
    }

    /// The instance of pod `index` ([`Cluster::pod_at`]) disappears at once (its node is lost
    /// and it is removed).
    pub fn lose(&mut self, index: usize) {
        if let Some(uid) = self.pod_at(index).map(|p| p.uid.clone()) {
            self.pods.retain(|p| p.uid != uid);
        }
        self.controller();
    }

    /// The worker process of pod `index` restarts inside its pod and reads the mounted file
    /// again, which the kubelet may have refreshed to the newest content.
    pub fn restart_container(&mut self, index: usize) {
        let configs = self.configs();
        let uid = self.pod_at(index).map(|p| p.uid.clone());
        let (millis, starts_live) = (self.millis, self.starts_live);
        for pod in self
            .pods
            .iter_mut()
            .filter(|p| Some(&p.uid) == uid.as_ref())
        {
            if pod.runs.is_none() {
                continue;
            }
            // A new process, on the same network: it starts fenced, so it runs nothing before
            // its first renewal and a read after it (the worker library's rule).
            if let Some(process) = &mut pod.process {
                let cut = process.partitioned;
                *process = if starts_live {
                    Process::start_live(process.rate, millis)
                } else {
                    Process::start(process.rate, millis)
                };
                process.partitioned = cut;
                if !starts_live || cut {
                    pod.runs = Some(BTreeSet::new());
                    pod.applied = None;
                    continue;
                }
            }
            let config = &configs[&pod.name];
            let entry = own_jobs(config.as_ref(), &pod.name());
            pod.applied = config.as_ref().map(|c| (c.version, entry.clone()));
            pod.runs = Some(entry);
        }
    }

    /// The pool's config as the operator wrote it, in either layout.
    pub fn config(&self) -> Option<WorkerConfig> {
        let slices: Vec<SliceSummary> = self.slices.iter().map(SliceSummary::from).collect();
        pool_config(self.config_map.as_ref()?, &slices)
    }

    /// What each pod reads: under `Acknowledge` its own ConfigMap, else the pool's `config.yml`.
    fn configs(&self) -> BTreeMap<String, Option<WorkerConfig>> {
        self.pods
            .iter()
            .map(|pod| {
                let config = if self.acknowledge {
                    let name = slice_name("pool-config", &pod.name);
                    self.slices
                        .iter()
                        .find(|cm| cm.metadata.name.as_deref() == Some(name.as_str()))
                        .and_then(|cm| cm.data.as_ref()?.get(CONFIG_KEY))
                        .and_then(|text| WorkerConfig::parse(text).ok())
                } else {
                    self.config_map
                        .as_ref()
                        .and_then(|cm| cm.data.as_ref()?.get(CONFIG_KEY))
                        .and_then(|text| WorkerConfig::parse(text).ok())
                };
                (pod.name.clone(), config)
            })
            .collect()
    }

    /// What every pod of the API runs, for pods that started: job -> pod instances. A paused
    /// process runs nothing until it resumes (and checks its fence first).
    pub fn holders(&self) -> BTreeMap<&str, Vec<&PodInstance>> {
        let mut by_job: BTreeMap<&str, Vec<&PodInstance>> = BTreeMap::new();
        for pod in self
            .pods
            .iter()
            .filter(|p| p.process.as_ref().is_none_or(|p| !p.paused))
        {
            for job in pod.runs.iter().flatten() {
                by_job.entry(job.as_str()).or_default().push(pod);
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
            spec: None,
            status: Some(ready_status(pod.runs.is_some(), t0.0)),
        }
    }
}

fn replica_set_name(revision: usize) -> String {
    format!("{STS}-rs{revision}")
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

/// A worker's Lease as the API server serves it; with `expiring`, it carries a duration.
fn lease_object(pod: &str, record: &LeaseRecord, expiring: bool) -> Lease {
    let renewed = Timestamp::from_second(1_700_000_000).unwrap()
        + SignedDuration::from_millis(record.renewed as i64);
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
            lease_duration_seconds: expiring.then_some(LEASE_DURATION.as_secs() as i32),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    }
}
