//! The StatefulSet controller, following kube-controller-manager's `StatefulSetControl`.
//!
//! Each sync claims the pods the set owns (adopting matching orphans named after it), then
//! creates missing ordinals, removes ordinals past `replicas` (highest first) and rolls pods
//! whose `controller-revision-hash` is stale, and finally writes `status`. With
//! `podManagementPolicy: OrderedReady` every step waits for the pods before it to be Running
//! and Ready and does one thing per sync; `Parallel` does all of it at once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tracing::debug;

use super::claim::Claimant;
use super::events;
use super::meta;
use super::queue::WorkQueue;
use super::revisions::{self, revision_name};
use super::{Controller, scaled_secs};
use crate::config::SimConfig;
use crate::store::{DeleteOptions, LabelSelector, Store, StoreEvent};

/// Label holding the pod's own name, so a Service can select a single ordinal.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label holding the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// Label holding the name of the revision the pod was created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The component named in the events this controller records.
const COMPONENT: &str = "statefulset-controller";

/// How soon a sync that hit a write conflict runs again.
const CONFLICT_RETRY: Duration = Duration::from_millis(20);

/// Reconciles every StatefulSet in the store.
pub struct StatefulSetController {
    store: Store,
    config: SimConfig,
    queue: WorkQueue,
}

impl StatefulSetController {
    /// A controller for `store`; `config` scales `minReadySeconds`.
    pub fn new(store: Store, config: SimConfig) -> Self {
        Self {
            store,
            config,
            queue: WorkQueue::new("apps/v1", "StatefulSet"),
        }
    }

    /// One sync of one StatefulSet; returns when it must run again without an event.
    fn sync(&mut self, namespace: &str, name: &str) -> Option<Duration> {
        let sts = self
            .store
            .get("apps/v1", "StatefulSet", Some(namespace), name)?;
        let Some(set) = SetSpec::parse(&sts) else {
            debug!(
                namespace,
                name, "statefulset has an unusable selector; skipped"
            );
            return None;
        };
        let mut pods = self.claim_pods(&sts, &set);
        // A set being deleted only reports status: its pods belong to the garbage collector.
        if !meta::is_deleting(&sts) {
            let mut in_use: BTreeSet<String> =
                pods.iter().map(|p| revision_of(p).to_string()).collect();
            in_use.insert(set.update_revision.clone());
            if let Some(current) = sts
                .pointer("/status/currentRevision")
                .and_then(Value::as_str)
            {
                in_use.insert(current.to_string());
            }
            revisions::sync(
                &self.store,
                &sts,
                &set.selector,
                &set.update_revision,
                &in_use,
            );
            if self.scale_and_update(&sts, &set, &pods) {
                pods = self.claim_pods(&sts, &set);
            }
        }
        let (status, requeue) = self.status(&sts, &set, &pods);
        if sts.get("status") != Some(&status) {
            let mut updated = sts;
            updated["status"] = status;
            if self.store.update_status(updated).is_err() {
                return Some(CONFLICT_RETRY);
            }
        }
        requeue
    }

    /// The pods this set controls, after adopting matching orphans and releasing pods that
    /// stopped matching its selector, by ordinal.
    fn claim_pods(&self, sts: &Value, set: &SetSpec) -> Vec<Arc<Value>> {
        let namespace = meta::namespace(sts).unwrap_or_default();
        // Only pods named `<set>-<ordinal>` can belong to the set: read just that name range.
        let prefix = format!("{}-", set.name);
        let candidates = self
            .store
            .list_prefixed("v1", "Pod", namespace, &prefix)
            .into_iter()
            .filter(|pod| ordinal_of(pod, &set.name).is_some())
            .collect();
        let mut owned = Claimant {
            owner: sts,
            kind: "StatefulSet",
            selector: &set.selector,
        }
        .claim(&self.store, candidates);
        owned.sort_by_key(|pod| ordinal_of(pod, &set.name));
        owned
    }

    /// Creates, deletes and rolls pods; returns whether it wrote anything.
    fn scale_and_update(&self, sts: &Value, set: &SetSpec, pods: &[Arc<Value>]) -> bool {
        let ordered = !set.parallel;
        let mut replicas: Vec<Option<&Value>> = vec![None; set.replicas];
        let mut condemned: Vec<&Value> = Vec::new();
        for pod in pods.iter().map(Arc::as_ref) {
            let Some(ordinal) = ordinal_of(pod, &set.name) else {
                continue;
            };
            match ordinal.checked_sub(set.start) {
                Some(index) if index < set.replicas => replicas[index] = Some(pod),
                _ => condemned.push(pod),
            }
        }
        let first_unhealthy = replicas
            .iter()
            .flatten()
            .chain(condemned.iter())
            .find(|pod| !is_healthy(pod))
            .map(|pod| meta::uid(pod).to_string());
        let mut wrote = false;

        for (index, slot) in replicas.iter().enumerate() {
            match slot {
                None => {
                    wrote |= self.create_pod(sts, set, set.start + index);
                    if ordered {
                        return wrote;
                    }
                }
                Some(pod) => {
                    let finished = meta::is_finished(pod);
                    if finished && !meta::is_deleting(pod) {
                        // A pod that ran to completion is replaced, as a workload must keep running.
                        wrote |= self.delete_pod(sts, pod);
                        if ordered {
                            return wrote;
                        }
                    } else if ordered && (meta::is_deleting(pod) || !is_running_and_ready(pod)) {
                        return wrote;
                    }
                }
            }
        }

        for pod in condemned.iter().rev() {
            if meta::is_deleting(pod) {
                if ordered {
                    return wrote;
                }
                continue;
            }
            let is_first_unhealthy = first_unhealthy.as_deref() == Some(meta::uid(pod));
            if ordered && !is_running_and_ready(pod) && !is_first_unhealthy {
                return wrote;
            }
            wrote |= self.delete_pod(sts, pod);
            if ordered {
                return wrote;
            }
        }

        if set.on_delete {
            return wrote;
        }
        for slot in replicas.iter().skip(set.partition).rev() {
            let Some(pod) = slot else {
                continue;
            };
            if revision_of(pod) != set.update_revision && !meta::is_deleting(pod) {
                return self.delete_pod(sts, pod) || wrote;
            }
            if !is_healthy(pod) {
                return wrote;
            }
        }
        wrote
    }

    fn create_pod(&self, sts: &Value, set: &SetSpec, ordinal: usize) -> bool {
        let pod = new_pod(sts, set, ordinal);
        match self.store.create(pod) {
            Ok(pod) => {
                let message = format!(
                    "create Pod {} in StatefulSet {} successful",
                    meta::name(&pod),
                    set.name
                );
                events::normal(&self.store, sts, COMPONENT, "SuccessfulCreate", &message);
                true
            }
            Err(err) => {
                debug!(set = %set.name, ordinal, error = %err.message, "pod create failed");
                false
            }
        }
    }

    fn delete_pod(&self, sts: &Value, pod: &Value) -> bool {
        let options = DeleteOptions {
            precondition_uid: Some(meta::uid(pod).to_string()),
            ..DeleteOptions::default()
        };
        let deleted = self
            .store
            .delete("v1", "Pod", meta::namespace(pod), meta::name(pod), options)
            .is_ok();
        if deleted {
            let message = format!(
                "delete Pod {} in StatefulSet {} successful",
                meta::name(pod),
                meta::name(sts)
            );
            events::normal(&self.store, sts, COMPONENT, "SuccessfulDelete", &message);
        }
        deleted
    }

    /// The status the set should report, and when availability next changes.
    fn status(&self, sts: &Value, set: &SetSpec, pods: &[Arc<Value>]) -> (Value, Option<Duration>) {
        let previous = sts.get("status");
        let mut current_revision = previous
            .and_then(|s| s.get("currentRevision"))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .unwrap_or(&set.update_revision)
            .to_string();
        let min_ready = scaled_secs(&self.config, set.min_ready_seconds as f64);
        let now = Utc::now();
        let mut requeue: Option<Duration> = None;
        let (mut replicas, mut ready, mut available, mut current, mut updated) = (0, 0, 0, 0, 0);
        for pod in pods {
            replicas += 1;
            if is_running_and_ready(pod) {
                ready += 1;
                let ready_since = meta::ready_for(pod, now);
                if ready_since >= min_ready {
                    available += 1;
                } else {
                    let remaining = min_ready - ready_since;
                    requeue = Some(requeue.map_or(remaining, |r| r.min(remaining)));
                }
            }
            if !meta::is_deleting(pod) {
                let revision = revision_of(pod);
                if revision == current_revision {
                    current += 1;
                }
                if revision == set.update_revision {
                    updated += 1;
                }
            }
        }
        if !set.on_delete && updated == replicas && ready == replicas {
            current_revision = set.update_revision.clone();
            current = updated;
        }

        let mut status = Map::new();
        if let Some(generation) = sts.pointer("/metadata/generation") {
            status.insert("observedGeneration".into(), generation.clone());
        }
        status.insert("replicas".into(), json!(replicas));
        // The API omits these when zero (`omitempty`); clients see them as absent.
        for (field, value) in [
            ("readyReplicas", ready),
            ("currentReplicas", current),
            ("updatedReplicas", updated),
        ] {
            if value != 0 {
                status.insert(field.into(), json!(value));
            }
        }
        status.insert("currentRevision".into(), json!(current_revision));
        status.insert("updateRevision".into(), json!(set.update_revision));
        status.insert("collisionCount".into(), json!(set.collision_count));
        status.insert("availableReplicas".into(), json!(available));
        if let Some(conditions) = previous.and_then(|s| s.get("conditions")) {
            status.insert("conditions".into(), conditions.clone());
        }
        (Value::Object(status), requeue)
    }
}

impl Controller for StatefulSetController {
    fn store(&self) -> &Store {
        &self.store
    }

    fn observe(&mut self, event: &StoreEvent) {
        let obj = &event.object;
        let Some(namespace) = meta::namespace(obj) else {
            return;
        };
        if meta::is(obj, "apps/v1", "StatefulSet") {
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
        let mut queue =
            std::mem::replace(&mut self.queue, WorkQueue::new("apps/v1", "StatefulSet"));
        let store = self.store.clone();
        let next = queue.run(&store, now, |namespace, name| self.sync(namespace, name));
        self.queue = queue;
        next
    }
}

/// The parts of a StatefulSet's spec the controller acts on, with API defaults applied.
struct SetSpec {
    name: String,
    replicas: usize,
    start: usize,
    parallel: bool,
    on_delete: bool,
    partition: usize,
    min_ready_seconds: u64,
    selector: LabelSelector,
    update_revision: String,
    collision_count: u64,
}

impl SetSpec {
    fn parse(sts: &Value) -> Option<Self> {
        let spec = sts.get("spec").cloned().unwrap_or(Value::Null);
        let count = |pointer: &str, default: u64| {
            spec.pointer(pointer)
                .and_then(Value::as_u64)
                .unwrap_or(default)
        };
        let name = meta::name(sts).to_string();
        let collision_count = sts
            .pointer("/status/collisionCount")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let template = spec.get("template").cloned().unwrap_or(Value::Null);
        Some(Self {
            update_revision: revision_name(&name, &template, collision_count),
            name,
            replicas: count("/replicas", 1) as usize,
            start: count("/ordinals/start", 0) as usize,
            parallel: spec.pointer("/podManagementPolicy").and_then(Value::as_str)
                == Some("Parallel"),
            on_delete: spec.pointer("/updateStrategy/type").and_then(Value::as_str)
                == Some("OnDelete"),
            partition: count("/updateStrategy/rollingUpdate/partition", 0) as usize,
            min_ready_seconds: count("/minReadySeconds", 0),
            selector: LabelSelector::from_label_selector(
                spec.get("selector").unwrap_or(&json!({})),
            )
            .ok()?,
            collision_count,
        })
    }
}

/// The pod for `ordinal`, built from the set's template.
fn new_pod(sts: &Value, set: &SetSpec, ordinal: usize) -> Value {
    let template = sts.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let pod_name = format!("{}-{ordinal}", set.name);
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), json!(pod_name));
    labels.insert(POD_INDEX_LABEL.into(), json!(ordinal.to_string()));
    labels.insert(REVISION_LABEL.into(), json!(set.update_revision));

    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(pod_name));
    if let Some(namespace) = meta::namespace(sts) {
        metadata.insert("namespace".into(), json!(namespace));
    }
    metadata.insert("labels".into(), Value::Object(labels));
    for field in ["annotations", "finalizers"] {
        if let Some(value) = template.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.into(), value.clone());
        }
    }
    metadata.insert(
        "ownerReferences".into(),
        json!([meta::controller_ref_to(sts, "StatefulSet")]),
    );

    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    if let Some(spec) = spec.as_object_mut() {
        // Stable network identity: `<pod>.<serviceName>.<namespace>.svc`.
        spec.insert("hostname".into(), json!(pod_name));
        let service = sts.pointer("/spec/serviceName").and_then(Value::as_str);
        if let Some(service) = service.filter(|s| !s.is_empty()) {
            spec.insert("subdomain".into(), json!(service));
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// The ordinal in a pod name `<set>-<ordinal>`, if the pod belongs to `set_name` by name.
fn ordinal_of(pod: &Value, set_name: &str) -> Option<usize> {
    let suffix = meta::name(pod).strip_prefix(set_name)?.strip_prefix('-')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // `web-01` is not ordinal 1 of `web`: only canonical decimal forms belong to the set.
    let ordinal: usize = suffix.parse().ok()?;
    (ordinal.to_string() == suffix).then_some(ordinal)
}

fn revision_of(pod: &Value) -> &str {
    meta::labels(pod).get(REVISION_LABEL).copied().unwrap_or("")
}

fn is_running_and_ready(pod: &Value) -> bool {
    meta::phase(pod) == "Running" && meta::condition_true(pod, "Ready")
}

fn is_healthy(pod: &Value) -> bool {
    is_running_and_ready(pod) && !meta::is_deleting(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinal_is_parsed_only_from_canonical_names_of_the_set() {
        let pod = |name: &str| json!({"metadata": {"name": name}});
        assert_eq!(ordinal_of(&pod("web-0"), "web"), Some(0));
        assert_eq!(ordinal_of(&pod("web-12"), "web"), Some(12));
        assert_eq!(ordinal_of(&pod("web-01"), "web"), None);
        assert_eq!(ordinal_of(&pod("web-x"), "web"), None);
        assert_eq!(ordinal_of(&pod("web-"), "web"), None);
        assert_eq!(ordinal_of(&pod("webby-1"), "web"), None);
        assert_eq!(ordinal_of(&pod("web-db-1"), "web"), None);
    }

    #[test]
    fn pod_carries_identity_labels_owner_and_hostname() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "sts-uid"},
            "spec": {
                "serviceName": "web-svc",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}
                }
            }
        });
        let set = SetSpec::parse(&sts).unwrap();
        assert_eq!(set.replicas, 1, "replicas defaults to 1");
        assert!(
            !set.parallel,
            "podManagementPolicy defaults to OrderedReady"
        );
        let pod = new_pod(&sts, &set, 2);
        assert_eq!(pod["metadata"]["name"], "web-2");
        assert_eq!(pod["metadata"]["namespace"], "ns");
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[REVISION_LABEL], json!(set.update_revision));
        assert_eq!(pod["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                    "uid": "sts-uid", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(pod["spec"]["hostname"], "web-2");
        assert_eq!(pod["spec"]["subdomain"], "web-svc");
        assert_eq!(pod["spec"]["containers"][0]["image"], "busybox");
    }
}
