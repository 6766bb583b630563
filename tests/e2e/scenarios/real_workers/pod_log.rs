//! What happened to each worker pod instance during a scenario, as the API showed it: when it
//! appeared and became Ready, when its deletion was asked for (and with which grace), and how
//! often its container restarted. Sampled every 200 ms, so the times are that precise.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};

use crate::harness::Env;
use crate::harness::worker_fleet::Reports;

const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// One pod instance, as sampled.
#[derive(Clone, Debug)]
pub(crate) struct Instance {
    pub name: String,
    pub uid: String,
    /// When the log first saw it.
    pub seen: Timestamp,
    /// When the log first saw it Ready.
    pub ready: Option<Timestamp>,
    /// When its deletion was asked for: `deletionTimestamp` less the grace period.
    pub deleted: Option<Timestamp>,
    /// `deletionTimestamp`: when the kubelet kills what still runs.
    pub deadline: Option<Timestamp>,
    /// The most restarts its containers had.
    pub restarts: i32,
    /// Whether the last sample still listed it.
    pub present: bool,
    /// When the log first missed it.
    pub gone: Option<Timestamp>,
}

/// The background sampler; stops when dropped.
pub(crate) struct PodLog {
    instances: Arc<Mutex<BTreeMap<String, Instance>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodLog {
    /// Samples the pods `selector` selects in the example namespace.
    pub fn start(env: &Env, selector: &str) -> PodLog {
        let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.example.namespace());
        let params = ListParams::default().labels(selector);
        let instances = Arc::new(Mutex::new(BTreeMap::<String, Instance>::new()));
        let shared = instances.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = api.list(&params).await {
                    let now = Timestamp::now();
                    let mut instances = shared.lock().expect("pod log");
                    for instance in instances.values_mut() {
                        instance.present = false;
                    }
                    for pod in &list.items {
                        record(&mut instances, pod, now);
                    }
                    for instance in instances.values_mut() {
                        if !instance.present && instance.gone.is_none() {
                            instance.gone = Some(now);
                        }
                    }
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        });
        PodLog { instances, task }
    }

    /// Every instance seen so far.
    pub fn instances(&self) -> Vec<Instance> {
        self.instances
            .lock()
            .expect("pod log")
            .values()
            .cloned()
            .collect()
    }

    /// Fails if any worker container restarted: every new process was the operator's doing
    /// (a pod it deleted), none a crash.
    pub fn assert_no_restart(&self) {
        let restarted: Vec<String> = self
            .instances()
            .iter()
            .filter(|i| i.restarts > 0)
            .map(|i| format!("{} ({}) restarted {} times", i.name, i.uid, i.restarts))
            .collect();
        assert!(
            restarted.is_empty(),
            "worker containers restarted: {restarted:?}"
        );
    }

    /// Asserts that every instance whose deletion was asked for and that is gone said, in its
    /// report, that it stopped all its jobs before its grace period ended; returns how long
    /// after the deletion each did (seconds).
    pub fn assert_stopped_within_grace(&self, reports: &Reports) -> Vec<f64> {
        let mut stops = Vec::new();
        for instance in self.instances().iter().filter(|i| !i.present) {
            let (Some(deleted), Some(deadline)) = (instance.deleted, instance.deadline) else {
                continue;
            };
            let lines = reports.worker_lines(&instance.uid);
            let Some(last) = lines.last() else {
                // Deleted before its container started: no worker ran, nothing to stop.
                assert!(
                    instance.ready.is_none(),
                    "{} ({}) was Ready but reported nothing",
                    instance.name,
                    instance.uid
                );
                continue;
            };
            assert!(
                last.running.is_empty(),
                "{} ({}) was deleted and gone, but its last report still runs {:?}",
                instance.name,
                instance.uid,
                last.running
            );
            assert!(
                last.at <= deadline,
                "{} ({}) stopped its jobs at {}, after its grace period ended at {deadline}",
                instance.name,
                instance.uid,
                last.at
            );
            stops.push(last.at.duration_since(deleted).as_secs_f64().max(0.0));
        }
        stops
    }

    /// Seconds from the deletion to the pod's removal (its containers stopped), for every
    /// deleted instance that is gone.
    pub fn seconds_to_gone(&self) -> Vec<f64> {
        self.instances()
            .iter()
            .filter_map(|i| Some(i.gone?.duration_since(i.deleted?).as_secs_f64()))
            .collect()
    }

    /// Seconds from first seen to Ready, for every instance that became Ready.
    pub fn seconds_to_ready(&self) -> Vec<f64> {
        self.instances()
            .iter()
            .filter_map(|i| Some(i.ready?.duration_since(i.seen).as_secs_f64()))
            .collect()
    }
}

impl Drop for PodLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(instances: &mut BTreeMap<String, Instance>, pod: &Pod, now: Timestamp) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let instance = instances.entry(uid.clone()).or_insert_with(|| Instance {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid,
        seen: now,
        ready: None,
        deleted: None,
        deadline: None,
        restarts: 0,
        present: true,
        gone: None,
    });
    instance.present = true;
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if ready && instance.ready.is_none() {
        instance.ready = Some(now);
    }
    let restarts = status
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum());
    instance.restarts = instance.restarts.max(restarts);
    if let (Some(deadline), None) = (&pod.metadata.deletion_timestamp, instance.deadline) {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        instance.deadline = Some(deadline.0);
        instance.deleted = Some(deadline.0 - SignedDuration::from_secs(grace));
    }
}
