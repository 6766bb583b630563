//! The model cluster: a StatefulSet controller, pods that start late and terminate slowly, the
//! ConfigMap, and what every pod instance runs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_assign::worker_config::WorkerConfig;
use swarm_operator::controller::STATEFULSET_POD_LABEL;
use swarm_operator::planner::CONFIG_KEY;

pub const NS: &str = "sim";
pub const STS: &str = "w";
pub const STS_UID: &str = "sts-uid";

/// One pod instance as the API server has it, and what its worker runs.
#[derive(Clone, Debug)]
pub struct PodInstance {
    pub ordinal: usize,
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
}

impl PodInstance {
    pub fn name(&self) -> String {
        format!("{STS}-{}", self.ordinal)
    }
}

/// The model cluster.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub step: u64,
    pub replicas: usize,
    pub pods: Vec<PodInstance>,
    pub config_map: Option<ConfigMap>,
    next_uid: u64,
}

impl Cluster {
    pub fn new(replicas: usize) -> Cluster {
        let mut cluster = Cluster {
            step: 0,
            replicas,
            pods: Vec::new(),
            config_map: None,
            next_uid: 0,
        };
        cluster.statefulset_controller();
        cluster
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap() + SignedDuration::from_secs(self.step as i64)
    }

    /// Time passes one step: pods start (mounting the ConfigMap as it is now), grace periods
    /// run out, and the StatefulSet controller acts.
    pub fn tick(&mut self) {
        self.step += 1;
        let step = self.step;
        self.pods.retain(|p| p.gone_at.is_none_or(|at| at > step));
        let config = self.config();
        for pod in &mut self.pods {
            if pod.runs.is_none() && pod.gone_at.is_none() && pod.starts_at <= step {
                pod.runs = Some(own_jobs(config.as_ref(), &pod.name()));
            }
        }
        self.statefulset_controller();
    }

    /// Creates missing ordinals (only once no instance of the name is left: two instances of a
    /// pod name never exist at once) and deletes surplus ones.
    fn statefulset_controller(&mut self) {
        for ordinal in 0..self.replicas {
            if !self.pods.iter().any(|p| p.ordinal == ordinal) {
                self.next_uid += 1;
                let uid = format!("00000000-0000-4000-8000-{:012}", self.next_uid);
                self.pods.push(PodInstance {
                    ordinal,
                    uid,
                    starts_at: self.step + self.next_uid % 2,
                    runs: None,
                    gone_at: None,
                    grace: 1 + self.next_uid % 3,
                });
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

    /// The instance of `ordinal` disappears at once (its node is lost and it is removed).
    pub fn lose(&mut self, ordinal: usize) {
        self.pods.retain(|p| p.ordinal != ordinal);
        self.statefulset_controller();
    }

    /// The worker process of `ordinal` restarts inside its pod and reads the mounted file again,
    /// which the kubelet may have refreshed to the newest content.
    pub fn restart_container(&mut self, ordinal: usize) {
        let config = self.config();
        for pod in self.pods.iter_mut().filter(|p| p.ordinal == ordinal) {
            if pod.runs.is_some() {
                pod.runs = Some(own_jobs(config.as_ref(), &pod.name()));
            }
        }
    }

    /// The config in the ConfigMap, if it has one.
    pub fn config(&self) -> Option<WorkerConfig> {
        let text = self.config_map.as_ref()?.data.as_ref()?.get(CONFIG_KEY)?;
        WorkerConfig::parse(text).ok()
    }

    /// Server-side apply of the operator's fields onto the ConfigMap.
    pub fn apply(&mut self, desired: ConfigMap) {
        let cm = self.config_map.get_or_insert_with(|| ConfigMap {
            metadata: ObjectMeta {
                name: desired.metadata.name.clone(),
                namespace: desired.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        });
        cm.data
            .get_or_insert_default()
            .extend(desired.data.unwrap_or_default());
        cm.metadata
            .labels
            .get_or_insert_default()
            .extend(desired.metadata.labels.unwrap_or_default());
        cm.metadata
            .annotations
            .get_or_insert_default()
            .extend(desired.metadata.annotations.unwrap_or_default());
        let refs = cm.metadata.owner_references.get_or_insert_default();
        for r in desired.metadata.owner_references.unwrap_or_default() {
            if !refs.iter().any(|have| have.uid == r.uid) {
                refs.push(r);
            }
        }
    }

    /// What every pod of the API runs, for pods that started: job -> pod instances.
    pub fn holders(&self) -> BTreeMap<&str, Vec<&PodInstance>> {
        let mut by_job: BTreeMap<&str, Vec<&PodInstance>> = BTreeMap::new();
        for pod in &self.pods {
            for job in pod.runs.iter().flatten() {
                by_job.entry(job.as_str()).or_default().push(pod);
            }
        }
        by_job
    }

    /// The StatefulSet as the API serves it.
    pub fn statefulset(&self) -> StatefulSet {
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
        labels.insert(STATEFULSET_POD_LABEL.into(), pod.name());
        Pod {
            metadata: ObjectMeta {
                name: Some(pod.name()),
                namespace: Some(NS.into()),
                uid: Some(pod.uid.clone()),
                creation_timestamp: Some(t0.clone()),
                deletion_timestamp: pod.gone_at.map(|_| t0.clone()),
                labels: Some(labels),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: STS.into(),
                    uid: STS_UID.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if pod.runs.is_some() { "True" } else { "False" }.into(),
                    last_transition_time: Some(t0),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }
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
