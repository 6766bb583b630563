//! The ReplicaSet controller, following kube-controller-manager's `ReplicaSetController`
//! (`pkg/controller/replicaset/replica_set.go`).
//!
//! Each sync claims the pods the set owns (adopting matching orphans, releasing pods that stop
//! matching), then brings the *active* pods to `replicas`, and writes `status`:
//! - Active pods are those neither terminating nor Succeeded/Failed (`FilterActivePods`), so a
//!   deleted pod is replaced at once, while it still terminates (unlike a StatefulSet, whose pod
//!   names are unique).
//! - New pods take `generateName: <replicaset>-`, so the API server names them
//!   `<replicaset>-<5 random characters>`, with the template's labels (the Deployment controller
//!   puts `pod-template-hash` there) and a controller reference to the set.
//! - Surplus pods go in the order of `getPodsToDelete` (`ActivePodsWithRanks`): unscheduled
//!   before scheduled, Pending before Running, not Ready before Ready, Ready for less time
//!   before Ready for longer, newer before older. Upstream also weighs restart counts and pods
//!   co-located on a node; the kubelet stand-in restarts nothing and runs one node, so those
//!   ranks never differ here. All creates and deletes of a sync happen at once (upstream
//!   batches creates in slow-start rounds).

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::claim::Claimant;
use super::events;
use super::meta;
use super::queue::WorkQueue;
use super::{Controller, scaled_secs};
use crate::config::SimConfig;
use crate::store::{DeleteOptions, LabelSelector, Store, StoreEvent};

/// The component named in the events this controller records.
const COMPONENT: &str = "replicaset-controller";
/// How soon a sync that hit a write conflict runs again.
const CONFLICT_RETRY: Duration = Duration::from_millis(20);

/// Reconciles every ReplicaSet in the store.
pub struct ReplicaSetController {
    store: Store,
    config: SimConfig,
    queue: WorkQueue,
}

impl ReplicaSetController {
    /// A controller for `store`; `config` scales `minReadySeconds`.
    pub fn new(store: Store, config: SimConfig) -> Self {
        Self {
            store,
            config,
            queue: WorkQueue::new("apps/v1", "ReplicaSet"),
        }
    }

    /// One sync of one ReplicaSet; returns when it must run again without an event.
    fn sync(&mut self, namespace: &str, name: &str) -> Option<Duration> {
        let rs = self
            .store
            .get("apps/v1", "ReplicaSet", Some(namespace), name)?;
        let selector =
            LabelSelector::from_label_selector(rs.pointer("/spec/selector").unwrap_or(&json!({})))
                .ok()?;
        let mut pods = self.claim_pods(&rs, &selector);
        // A set being deleted only reports status: its pods belong to the garbage collector.
        if !meta::is_deleting(&rs) && self.manage_replicas(&rs, &pods) {
            pods = self.claim_pods(&rs, &selector);
        }
        let (status, requeue) = self.status(&rs, &pods);
        if rs.get("status") != Some(&status) {
            let mut updated = rs;
            updated["status"] = status;
            if self.store.update_status(updated).is_err() {
                return Some(CONFLICT_RETRY);
            }
        }
        requeue
    }

    /// The pods this set controls, after adopting matching orphans and releasing pods that
    /// stopped matching its selector.
    fn claim_pods(&self, rs: &Value, selector: &LabelSelector) -> Vec<Arc<Value>> {
        let candidates = self.store.list_shared("v1", "Pod", meta::namespace(rs));
        Claimant {
            owner: rs,
            kind: "ReplicaSet",
            selector,
        }
        .claim(&self.store, candidates)
    }

    /// Creates or deletes pods until `replicas` are active; returns whether it wrote anything.
    fn manage_replicas(&self, rs: &Value, pods: &[Arc<Value>]) -> bool {
        let replicas = rs
            .pointer("/spec/replicas")
            .and_then(Value::as_u64)
            .unwrap_or(1) as usize;
        let mut active: Vec<&Value> = pods.iter().map(Arc::as_ref).filter(is_active).collect();
        let mut wrote = false;
        if active.len() < replicas {
            for _ in active.len()..replicas {
                wrote |= self.create_pod(rs);
            }
        } else if active.len() > replicas {
            let now = Utc::now();
            active.sort_by_key(|pod| deletion_rank(pod, now));
            for pod in &active[..active.len() - replicas] {
                wrote |= self.delete_pod(rs, pod);
            }
        }
        wrote
    }

    fn create_pod(&self, rs: &Value) -> bool {
        match self.store.create(new_pod(rs)) {
            Ok(pod) => {
                let message = format!("Created pod: {}", meta::name(&pod));
                events::normal(&self.store, rs, COMPONENT, "SuccessfulCreate", &message);
                true
            }
            Err(err) => {
                tracing::debug!(replicaset = %meta::name(rs), error = %err.message, "pod create failed");
                false
            }
        }
    }

    fn delete_pod(&self, rs: &Value, pod: &Value) -> bool {
        let options = DeleteOptions {
            precondition_uid: Some(meta::uid(pod).to_string()),
            ..DeleteOptions::default()
        };
        let deleted = self
            .store
            .delete("v1", "Pod", meta::namespace(pod), meta::name(pod), options)
            .is_ok();
        if deleted {
            let message = format!("Deleted pod: {}", meta::name(pod));
            events::normal(&self.store, rs, COMPONENT, "SuccessfulDelete", &message);
        }
        deleted
    }

    /// The status the set should report (`calculateStatus`), and when availability next
    /// changes.
    fn status(&self, rs: &Value, pods: &[Arc<Value>]) -> (Value, Option<Duration>) {
        let labels = rs
            .pointer("/spec/template/metadata/labels")
            .map(|l| meta::string_map(Some(l)))
            .unwrap_or_default();
        let min_ready = scaled_secs(
            &self.config,
            rs.pointer("/spec/minReadySeconds")
                .and_then(Value::as_u64)
                .unwrap_or(0) as f64,
        );
        let now = Utc::now();
        let mut requeue: Option<Duration> = None;
        let (mut replicas, mut labelled, mut ready, mut available) = (0, 0, 0, 0);
        for pod in pods.iter().map(Arc::as_ref).filter(is_active) {
            replicas += 1;
            let pod_labels = meta::labels(pod);
            if labels.iter().all(|(k, v)| pod_labels.get(k) == Some(v)) {
                labelled += 1;
            }
            if meta::condition_true(pod, "Ready") {
                ready += 1;
                let since = meta::ready_for(pod, now);
                if since >= min_ready {
                    available += 1;
                } else {
                    let remaining = min_ready - since;
                    requeue = Some(requeue.map_or(remaining, |r: Duration| r.min(remaining)));
                }
            }
        }
        let mut status = Map::new();
        status.insert("replicas".into(), json!(replicas));
        // The API omits these when zero (`omitempty`).
        for (field, value) in [
            ("fullyLabeledReplicas", labelled),
            ("readyReplicas", ready),
            ("availableReplicas", available),
        ] {
            if value != 0 {
                status.insert(field.into(), json!(value));
            }
        }
        if let Some(generation) = rs.pointer("/metadata/generation") {
            status.insert("observedGeneration".into(), generation.clone());
        }
        (Value::Object(status), requeue)
    }
}

impl Controller for ReplicaSetController {
    fn store(&self) -> &Store {
        &self.store
    }

    fn observe(&mut self, event: &StoreEvent) {
        let obj = &event.object;
        let Some(namespace) = meta::namespace(obj) else {
            return;
        };
        if meta::is(obj, "apps/v1", "ReplicaSet") {
            self.queue.mark(namespace, meta::name(obj));
        } else if meta::is(obj, "v1", "Pod") {
            // An orphan may be adopted by any set of its namespace.
            self.queue.mark_controller_of(namespace, obj);
        }
    }

    fn resync(&mut self) {
        self.queue.mark_all(&self.store);
    }

    fn work(&mut self, now: Instant) -> Option<Instant> {
        let mut queue = std::mem::replace(&mut self.queue, WorkQueue::new("apps/v1", "ReplicaSet"));
        let store = self.store.clone();
        let next = queue.run(&store, now, |namespace, name| self.sync(namespace, name));
        self.queue = queue;
        next
    }
}

/// A pod of `rs`, built from its template (`GetPodFromTemplate`).
fn new_pod(rs: &Value) -> Value {
    let template = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut metadata = Map::new();
    metadata.insert("generateName".into(), json!(format!("{}-", meta::name(rs))));
    if let Some(namespace) = meta::namespace(rs) {
        metadata.insert("namespace".into(), json!(namespace));
    }
    for field in ["labels", "annotations", "finalizers"] {
        if let Some(value) = template.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.into(), value.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([meta::controller_ref_to(rs, "ReplicaSet")]),
    );
    let spec = template.get("spec").cloned().unwrap_or(json!({}));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// Neither terminating nor finished (`IsPodActive`).
pub(crate) fn is_active(pod: &&Value) -> bool {
    !meta::is_deleting(pod) && !meta::is_finished(pod)
}

/// The order of `ActivePodsWithRanks`: the pods to delete first sort first.
fn deletion_rank(pod: &Value, now: chrono::DateTime<Utc>) -> impl Ord {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase_rank = match meta::phase(pod) {
        "Pending" | "" => 0,
        "Running" => 2,
        _ => 1,
    };
    let ready = meta::condition_true(pod, "Ready");
    // Ready for less time goes first; not Ready sorts before Ready anyway.
    let ready_for = if ready {
        meta::ready_for(pod, now)
    } else {
        Duration::ZERO
    };
    let created = pod
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(meta::parse_time);
    (
        scheduled,
        phase_rank,
        ready,
        ready_for,
        Reverse(created),
        Reverse(meta::name(pod).to_string()),
    )
}
