//! The Deployment controller, following kube-controller-manager's `DeploymentController`
//! (`pkg/controller/deployment/`: `sync.go`, `rolling.go`, `recreate.go`, `progress.go`, and
//! `util/deployment_util.go`).
//!
//! Each sync claims the ReplicaSets the Deployment owns, finds the one whose template equals the
//! Deployment's (ignoring `pod-template-hash`, as `EqualIgnoreHash`) or creates it, named
//! `<deployment>-<pod-template-hash>`, then rolls:
//! - `RollingUpdate` (`rolloutRolling`): the new ReplicaSet is scaled up while all ReplicaSets
//!   together want at most `replicas + maxSurge` pods (`reconcileNewReplicaSet`); old ones are
//!   scaled down, unhealthy replicas first, while at least `replicas - maxUnavailable` pods stay
//!   available (`reconcileOldReplicaSets`). maxSurge rounds up, maxUnavailable down, and both 0
//!   means maxUnavailable 1 (`ResolveFenceposts`).
//! - `Recreate` (`rolloutRecreate`): old ReplicaSets go to 0, and once none of their pods is
//!   left the new one is scaled up.
//!
//! `kubectl rollout restart` changes the template (its `restartedAt` annotation), so it makes a
//! new ReplicaSet like any template change. While `spec.paused` nothing rolls; scaling a paused
//! Deployment only resizes the new ReplicaSet. A scale mid-rollout resizes the new ReplicaSet
//! within the surge budget rather than proportionally over all of them (upstream's
//! `scale`). Old ReplicaSets at 0 beyond `revisionHistoryLimit` are deleted, oldest first
//! (`cleanupDeployment`). The hash is an FNV-1a hash of the template and `collisionCount` in
//! Kubernetes' safe alphabet, like upstream's `ComputeHash` but not byte-equal to it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::Controller;
use super::claim::Claimant;
use super::events;
use super::meta;
use super::queue::WorkQueue;
use super::revisions::revision_name;
use crate::store::{DeleteOptions, EventType, LabelSelector, Store, StoreEvent};

/// Label that tells the pods of a Deployment's ReplicaSets apart.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// ReplicaSet annotation with the Deployment revision it was created for.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";

/// The component named in the events this controller records.
const COMPONENT: &str = "deployment-controller";
/// How soon a sync that hit a write conflict runs again.
const CONFLICT_RETRY: Duration = Duration::from_millis(20);

/// Reconciles every Deployment in the store.
pub struct DeploymentController {
    store: Store,
    queue: WorkQueue,
}

impl DeploymentController {
    /// A controller for `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            queue: WorkQueue::new("apps/v1", "Deployment"),
        }
    }

    /// One sync of one Deployment; returns when it must run again without an event.
    fn sync(&mut self, namespace: &str, name: &str) -> Option<Duration> {
        let deployment = self
            .store
            .get("apps/v1", "Deployment", Some(namespace), name)?;
        let spec = Spec::parse(&deployment)?;
        let mut sets = self.claim_replica_sets(&deployment, &spec);
        if !meta::is_deleting(&deployment) {
            let new = match sets.iter().position(|rs| same_template(rs, &spec.template)) {
                Some(i) => Some(i),
                None if !spec.paused => {
                    self.create_replica_set(&deployment, &spec, &sets)?;
                    return Some(Duration::ZERO);
                }
                None => None,
            };
            let wrote = match new {
                Some(i) if spec.paused => self.scale(&sets[i], spec.replicas, &spec),
                Some(i) if spec.recreate => self.recreate(&sets, i, &spec),
                Some(i) => self.roll(&sets, i, &spec),
                None => false,
            };
            if wrote {
                return Some(CONFLICT_RETRY);
            }
            self.clean_up(&sets, new, &spec);
            sets = self.claim_replica_sets(&deployment, &spec);
        }
        let status = status(&deployment, &sets, &spec);
        if deployment.get("status") != Some(&status) {
            let mut updated = deployment;
            updated["status"] = status;
            if self.store.update_status(updated).is_err() {
                return Some(CONFLICT_RETRY);
            }
        }
        None
    }

    /// The ReplicaSets this Deployment controls (adopting matching orphans and releasing sets
    /// that stopped matching its selector), oldest first.
    fn claim_replica_sets(&self, deployment: &Value, spec: &Spec) -> Vec<Value> {
        let candidates =
            self.store
                .list_shared("apps/v1", "ReplicaSet", meta::namespace(deployment));
        let mut owned: Vec<Value> = Claimant {
            owner: deployment,
            kind: "Deployment",
            selector: &spec.selector,
        }
        .claim(&self.store, candidates)
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
        owned.sort_by_key(|rs| (revision(rs), meta::name(rs).to_string()));
        owned
    }

    /// Creates the ReplicaSet of the current template (`getNewReplicaSet`): all replicas at once
    /// when no other ReplicaSet has pods, else none yet (the rollout scales it up).
    fn create_replica_set(&self, deployment: &Value, spec: &Spec, sets: &[Value]) -> Option<()> {
        let name = revision_name(meta::name(deployment), &spec.template, spec.collision_count);
        let hash = name.rsplit('-').next().unwrap_or_default().to_string();
        let others_run = sets.iter().any(|rs| spec_replicas(rs) > 0);
        let replicas = if others_run && !spec.recreate {
            spec.replicas.min(spec.max_surge)
        } else if others_run {
            0
        } else {
            spec.replicas
        };
        let mut template = spec.template.clone();
        template["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let mut selector = deployment
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or(json!({}));
        selector["matchLabels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let next_revision = sets.iter().map(revision).max().unwrap_or(0) + 1;
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta::namespace(deployment),
                "labels": template["metadata"]["labels"],
                "annotations": {
                    REVISION_ANNOTATION: next_revision.to_string(),
                    DESIRED_REPLICAS_ANNOTATION: spec.replicas.to_string(),
                    MAX_REPLICAS_ANNOTATION: (spec.replicas + spec.max_surge).to_string(),
                },
                "ownerReferences": [meta::controller_ref_to(deployment, "Deployment")],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": spec.min_ready_seconds,
                "selector": selector,
                "template": template,
            },
        });
        match self.store.create(rs) {
            Ok(rs) => {
                let message = format!(
                    "Scaled up replica set {} from 0 to {replicas}",
                    meta::name(&rs)
                );
                events::normal(
                    &self.store,
                    deployment,
                    COMPONENT,
                    "ScalingReplicaSet",
                    &message,
                );
                Some(())
            }
            Err(err) => {
                // A ReplicaSet of that name with another template: count the collision, so the
                // next sync hashes to another name (`collisionCount`).
                if err.code == 409 {
                    let mut updated = deployment.clone();
                    updated["status"]["collisionCount"] = json!(spec.collision_count + 1);
                    let _ = self.store.update_status(updated);
                }
                None
            }
        }
    }

    /// `rolloutRolling`: scale the new ReplicaSet up within the surge, then old ones down
    /// within the availability budget. Returns whether it wrote anything.
    fn roll(&self, sets: &[Value], new: usize, spec: &Spec) -> bool {
        let all: usize = sets.iter().map(spec_replicas).sum();
        let new_rs = &sets[new];
        let new_replicas = spec_replicas(new_rs);
        // reconcileNewReplicaSet
        let target = if new_replicas > spec.replicas {
            spec.replicas
        } else {
            let room = (spec.replicas + spec.max_surge).saturating_sub(all);
            new_replicas + room.min(spec.replicas - new_replicas)
        };
        if target != new_replicas {
            return self.scale(new_rs, target, spec);
        }
        // reconcileOldReplicaSets
        let old: Vec<&Value> = sets
            .iter()
            .enumerate()
            .filter(|(i, rs)| *i != new && spec_replicas(rs) > 0)
            .map(|(_, rs)| rs)
            .collect();
        if old.is_empty() {
            return false;
        }
        let min_available = spec.replicas.saturating_sub(spec.max_unavailable);
        let new_unavailable = new_replicas.saturating_sub(available(new_rs));
        let mut budget = all
            .saturating_sub(min_available)
            .saturating_sub(new_unavailable);
        let mut wrote = false;
        // cleanupUnhealthyReplicas: pods that are not available cost no availability.
        for rs in &old {
            if budget == 0 {
                break;
            }
            let unhealthy = spec_replicas(rs).saturating_sub(available(rs));
            let down = unhealthy.min(budget);
            if down > 0 {
                wrote |= self.scale(rs, spec_replicas(rs) - down, spec);
                budget -= down;
            }
        }
        if wrote {
            return true;
        }
        // scaleDownOldReplicaSetsForRollingUpdate
        let available_now: usize = sets.iter().map(available).sum();
        let mut budget = available_now.saturating_sub(min_available);
        for rs in &old {
            if budget == 0 {
                break;
            }
            let down = spec_replicas(rs).min(budget);
            wrote |= self.scale(rs, spec_replicas(rs) - down, spec);
            budget -= down;
        }
        wrote
    }

    /// `rolloutRecreate`: old ReplicaSets to 0, then, once their pods are gone, the new one up.
    fn recreate(&self, sets: &[Value], new: usize, spec: &Spec) -> bool {
        let mut wrote = false;
        for (i, rs) in sets.iter().enumerate() {
            if i != new && spec_replicas(rs) > 0 {
                wrote |= self.scale(rs, 0, spec);
            }
        }
        if wrote {
            return true;
        }
        let old_uids: BTreeSet<&str> = sets
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != new)
            .map(|(_, rs)| meta::uid(rs))
            .collect();
        let namespace = meta::namespace(&sets[new]);
        let old_pods_left = self
            .store
            .list_shared("v1", "Pod", namespace)
            .iter()
            .any(|pod| {
                meta::controller_ref(pod).is_some_and(|owner| old_uids.contains(owner.uid.as_str()))
            });
        if old_pods_left || spec_replicas(&sets[new]) == spec.replicas {
            return false;
        }
        self.scale(&sets[new], spec.replicas, spec)
    }

    /// Sets a ReplicaSet's replicas (and the Deployment's size annotations on it).
    fn scale(&self, rs: &Value, replicas: usize, spec: &Spec) -> bool {
        let from = spec_replicas(rs);
        if from == replicas {
            return false;
        }
        let mut updated = rs.clone();
        updated["spec"]["replicas"] = json!(replicas);
        let annotations = &mut updated["metadata"]["annotations"];
        annotations[DESIRED_REPLICAS_ANNOTATION] = json!(spec.replicas.to_string());
        annotations[MAX_REPLICAS_ANNOTATION] = json!((spec.replicas + spec.max_surge).to_string());
        if self.store.update(updated).is_err() {
            return false;
        }
        let direction = if replicas > from { "up" } else { "down" };
        let message = format!(
            "Scaled {direction} replica set {} from {from} to {replicas}",
            meta::name(rs)
        );
        if let Some(owner) = meta::controller_ref(rs)
            && let Some(deployment) =
                self.store
                    .get("apps/v1", "Deployment", meta::namespace(rs), &owner.name)
        {
            events::normal(
                &self.store,
                &deployment,
                COMPONENT,
                "ScalingReplicaSet",
                &message,
            );
        }
        true
    }

    /// `cleanupDeployment`: old ReplicaSets with no pods beyond `revisionHistoryLimit` go,
    /// oldest first.
    fn clean_up(&self, sets: &[Value], new: Option<usize>, spec: &Spec) {
        let idle: Vec<&Value> = sets
            .iter()
            .enumerate()
            .filter(|(i, rs)| {
                Some(*i) != new
                    && spec_replicas(rs) == 0
                    && rs
                        .pointer("/status/replicas")
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                        == 0
                    && !meta::is_deleting(rs)
            })
            .map(|(_, rs)| rs)
            .collect();
        let excess = idle.len().saturating_sub(spec.revision_history_limit);
        for rs in idle.into_iter().take(excess) {
            let options = DeleteOptions {
                precondition_uid: Some(meta::uid(rs).to_string()),
                ..DeleteOptions::default()
            };
            let _ = self.store.delete(
                "apps/v1",
                "ReplicaSet",
                meta::namespace(rs),
                meta::name(rs),
                options,
            );
        }
    }
}

impl Controller for DeploymentController {
    fn store(&self) -> &Store {
        &self.store
    }

    fn observe(&mut self, event: &StoreEvent) {
        let obj = &event.object;
        let Some(namespace) = meta::namespace(obj) else {
            return;
        };
        if meta::is(obj, "apps/v1", "Deployment") {
            self.queue.mark(namespace, meta::name(obj));
        } else if meta::is(obj, "apps/v1", "ReplicaSet") {
            // An orphan may be adopted by any Deployment of its namespace.
            self.queue.mark_controller_of(namespace, obj);
        } else if meta::is(obj, "v1", "Pod") && event_is_deletion(event) {
            // Recreate waits for the old pods to be gone.
            if let Some(owner) = meta::controller_ref(obj).filter(|o| o.kind == "ReplicaSet")
                && let Some(rs) =
                    self.store
                        .get_shared("apps/v1", "ReplicaSet", Some(namespace), &owner.name)
                && let Some(deployment) = meta::controller_ref(&rs)
            {
                self.queue.mark(namespace, deployment.name);
            }
        }
    }

    fn resync(&mut self) {
        self.queue.mark_all(&self.store);
    }

    fn work(&mut self, now: Instant) -> Option<Instant> {
        let mut queue = std::mem::replace(&mut self.queue, WorkQueue::new("apps/v1", "Deployment"));
        let store = self.store.clone();
        let next = queue.run(&store, now, |namespace, name| self.sync(namespace, name));
        self.queue = queue;
        next
    }
}

fn event_is_deletion(event: &StoreEvent) -> bool {
    matches!(event.event_type, EventType::Deleted) || meta::is_deleting(&event.object)
}

/// The parts of a Deployment's spec the controller acts on, with API defaults applied.
struct Spec {
    replicas: usize,
    max_surge: usize,
    max_unavailable: usize,
    recreate: bool,
    paused: bool,
    min_ready_seconds: u64,
    revision_history_limit: usize,
    selector: LabelSelector,
    template: Value,
    collision_count: u64,
}

impl Spec {
    fn parse(deployment: &Value) -> Option<Spec> {
        let spec = deployment.get("spec")?;
        let replicas = spec.get("replicas").and_then(Value::as_u64).unwrap_or(1) as usize;
        let rolling = spec.pointer("/strategy/rollingUpdate");
        let fencepost = |field: &str, round_up: bool| {
            resolve(
                rolling.and_then(|r| r.get(field)).unwrap_or(&json!("25%")),
                replicas,
                round_up,
            )
        };
        let max_surge = fencepost("maxSurge", true);
        let mut max_unavailable = fencepost("maxUnavailable", false).min(replicas);
        if max_surge == 0 && max_unavailable == 0 {
            max_unavailable = 1;
        }
        Some(Spec {
            replicas,
            max_surge,
            max_unavailable,
            recreate: spec.pointer("/strategy/type").and_then(Value::as_str) == Some("Recreate"),
            paused: spec.get("paused").and_then(Value::as_bool) == Some(true),
            min_ready_seconds: spec
                .get("minReadySeconds")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            revision_history_limit: spec
                .get("revisionHistoryLimit")
                .and_then(Value::as_u64)
                .unwrap_or(10) as usize,
            selector: LabelSelector::from_label_selector(spec.get("selector")?).ok()?,
            template: spec.get("template").cloned().unwrap_or(json!({})),
            collision_count: deployment
                .pointer("/status/collisionCount")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        })
    }
}

/// An int-or-percent of `total` (`GetScaledValueFromIntOrPercent`).
fn resolve(value: &Value, total: usize, round_up: bool) -> usize {
    match value {
        Value::Number(n) => n.as_u64().unwrap_or(0) as usize,
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(percent) if round_up => (percent * total).div_ceil(100),
            Some(percent) => percent * total / 100,
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// Whether `rs`'s template is `template` but for the `pod-template-hash` label.
fn same_template(rs: &Value, template: &Value) -> bool {
    let mut theirs = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    if let Some(labels) = theirs
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            theirs["metadata"]
                .as_object_mut()
                .map(|m| m.remove("labels"));
        }
    }
    theirs == *template
}

fn revision(rs: &Value) -> u64 {
    rs.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn spec_replicas(rs: &Value) -> usize {
    rs.pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize
}

/// Available pods of `rs`, at most its replicas: right after a scale-down its status may still
/// count pods it is deleting.
fn available(rs: &Value) -> usize {
    let reported = rs
        .pointer("/status/availableReplicas")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    reported.min(spec_replicas(rs))
}

fn count(rs: &Value, field: &str) -> usize {
    rs.pointer(&format!("/status/{field}"))
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize
}

/// The status the Deployment should report (`calculateStatus`, `syncRolloutStatus`).
fn status(deployment: &Value, sets: &[Value], spec: &Spec) -> Value {
    let new = sets.iter().find(|rs| same_template(rs, &spec.template));
    let replicas: usize = sets.iter().map(|rs| count(rs, "replicas")).sum();
    let updated = new.map_or(0, |rs| count(rs, "replicas"));
    let ready: usize = sets.iter().map(|rs| count(rs, "readyReplicas")).sum();
    let available: usize = sets.iter().map(|rs| count(rs, "availableReplicas")).sum();
    let unavailable = spec.replicas.saturating_sub(available);
    let mut status = Map::new();
    if let Some(generation) = deployment.pointer("/metadata/generation") {
        status.insert("observedGeneration".into(), generation.clone());
    }
    for (field, value) in [
        ("replicas", replicas),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", unavailable),
    ] {
        if value != 0 {
            status.insert(field.into(), json!(value));
        }
    }
    if spec.collision_count > 0 {
        status.insert("collisionCount".into(), json!(spec.collision_count));
    }
    let previous = deployment
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_available = available >= spec.replicas.saturating_sub(spec.max_unavailable);
    let complete = updated == spec.replicas
        && replicas == spec.replicas
        && available >= spec.replicas
        && !spec.paused;
    let new_name = new.map(|rs| meta::name(rs).to_string()).unwrap_or_default();
    let conditions = vec![
        available_condition(&previous, is_available),
        progressing_condition(&previous, spec, complete, &new_name),
    ];
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// `Available`: whether at least `replicas - maxUnavailable` pods are available.
fn available_condition(previous: &[Value], is_available: bool) -> Value {
    if is_available {
        condition(
            previous,
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".to_string(),
        )
    } else {
        condition(
            previous,
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".to_string(),
        )
    }
}

/// `Progressing`: false while paused, else true with whether the new ReplicaSet `new_name`
/// has completed the rollout or is still progressing.
fn progressing_condition(previous: &[Value], spec: &Spec, complete: bool, new_name: &str) -> Value {
    if spec.paused {
        condition(
            previous,
            "Progressing",
            false,
            "DeploymentPaused",
            "Deployment is paused".to_string(),
        )
    } else if complete {
        condition(
            previous,
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
        )
    } else {
        condition(
            previous,
            "Progressing",
            true,
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{new_name}\" is progressing."),
        )
    }
}

/// A condition, keeping its previous transition time while its status is unchanged.
fn condition(previous: &[Value], type_: &str, ok: bool, reason: &str, message: String) -> Value {
    let status = if ok { "True" } else { "False" };
    let before = previous.iter().find(|c| c["type"] == type_);
    let unchanged = before.is_some_and(|c| c["status"] == status);
    let transitioned = before
        .filter(|_| unchanged)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(meta::now_rfc3339()));
    let updated = before
        .filter(|c| unchanged && c["reason"] == reason && c["message"] == message.as_str())
        .and_then(|c| c.get("lastUpdateTime").cloned())
        .unwrap_or_else(|| json!(meta::now_rfc3339()));
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transitioned,
        "lastUpdateTime": updated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_rounds_up_and_unavailable_down_and_never_both_zero() {
        assert_eq!(resolve(&json!("25%"), 3, true), 1);
        assert_eq!(resolve(&json!("25%"), 3, false), 0);
        assert_eq!(resolve(&json!(2), 3, false), 2);
        let deployment = json!({"spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "a"}},
            "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}},
        }});
        let spec = Spec::parse(&deployment).unwrap();
        assert_eq!((spec.max_surge, spec.max_unavailable), (0, 1));
    }

    #[test]
    fn a_replicaset_matches_the_template_but_for_the_hash_label() {
        let template = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"x": 1}});
        let rs = json!({"spec": {"template": {
            "metadata": {"labels": {"app": "a", POD_TEMPLATE_HASH_LABEL: "h"}},
            "spec": {"x": 1},
        }}});
        assert!(same_template(&rs, &template));
        let other = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"x": 2}});
        assert!(!same_template(&rs, &other));
    }
}
