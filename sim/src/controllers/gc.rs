//! The garbage collector, following kube-controller-manager's `GarbageCollector`.
//!
//! It keeps a graph of every object's owner references (by uid) built from store events and:
//! - deletes a dependent once none of its owners exists any more (Background propagation);
//!   an owner that the graph misses is looked up by name before anything is deleted, and
//!   counts only if its uid matches;
//! - for an owner deleted with `propagationPolicy=Foreground` (it carries the
//!   `foregroundDeletion` finalizer), deletes its dependents and removes the finalizer once
//!   no dependent with `blockOwnerDeletion: true` is left;
//! - for an owner deleted with `propagationPolicy=Orphan` (finalizer `orphan`), removes the
//!   owner's reference from every dependent, then the finalizer.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tracing::debug;

use super::Controller;
use super::meta::{self, OwnerRef};
use super::timers::Timers;
use crate::store::{DeleteOptions, EventType, Store, StoreEvent};

/// Finalizer the API server sets for `propagationPolicy=Foreground`.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// Finalizer the API server sets for `propagationPolicy=Orphan`.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// How soon an object whose processing hit a failed write is processed again.
const RETRY: Duration = Duration::from_millis(50);

/// One object as the graph knows it.
#[derive(Clone, Debug)]
struct Node {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerRef>,
    deleting: bool,
    finalizers: Vec<String>,
}

impl Node {
    fn from_object(obj: &Value) -> Self {
        Self {
            api_version: meta::api_version(obj).to_string(),
            kind: meta::kind(obj).to_string(),
            namespace: meta::namespace(obj).map(String::from),
            name: meta::name(obj).to_string(),
            owners: meta::owner_refs(obj),
            deleting: meta::is_deleting(obj),
            finalizers: meta::finalizers(obj)
                .into_iter()
                .map(String::from)
                .collect(),
        }
    }

    fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Deleted in the foreground: its dependents must go first.
    fn waits_for_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND_FINALIZER)
    }
}

/// How one owner reference of a dependent resolves.
enum OwnerState {
    /// The owner exists and is not waiting for its dependents.
    Solid,
    /// The owner exists and is being deleted in the foreground.
    WaitingForDependents,
    /// No object of that name exists with that uid.
    Dangling,
}

/// Deletes dependents of deleted owners and processes the propagation finalizers.
pub struct GarbageCollector {
    store: Store,
    nodes: HashMap<String, Node>,
    /// Owner uid to the uids of the objects referencing it.
    dependents: HashMap<String, BTreeSet<String>>,
    dirty: BTreeSet<String>,
    timers: Timers<String>,
}

impl GarbageCollector {
    /// A garbage collector over `store`.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            nodes: HashMap::new(),
            dependents: HashMap::new(),
            dirty: BTreeSet::new(),
            timers: Timers::new(),
        }
    }

    fn upsert(&mut self, uid: &str, node: Node) {
        self.remove(uid);
        for owner in &node.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(uid.to_string());
            self.dirty.insert(owner.uid.clone());
        }
        self.nodes.insert(uid.to_string(), node);
        self.dirty.insert(uid.to_string());
    }

    fn remove(&mut self, uid: &str) {
        let Some(old) = self.nodes.remove(uid) else {
            return;
        };
        for owner in &old.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
            self.dirty.insert(owner.uid.clone());
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<String> {
        self.dependents
            .get(uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Processes one object; returns false when a write failed and it must be retried.
    fn process(&mut self, uid: &str) -> bool {
        let Some(node) = self.nodes.get(uid).cloned() else {
            return true;
        };
        if node.deleting {
            if node.has_finalizer(ORPHAN_FINALIZER) {
                return self.orphan_dependents(uid, &node);
            }
            if node.has_finalizer(FOREGROUND_FINALIZER) {
                return self.delete_dependents_first(uid, &node);
            }
            return true;
        }
        if node.owners.is_empty() {
            return true;
        }
        self.collect_if_unowned(uid, &node)
    }

    /// Orphan propagation: drop the references, then the finalizer.
    fn orphan_dependents(&mut self, uid: &str, node: &Node) -> bool {
        let mut ok = true;
        for dependent in self.dependents_of(uid) {
            let Some(dep) = self.nodes.get(&dependent).cloned() else {
                continue;
            };
            ok &= self.remove_owner_refs(&dependent, &dep, &[uid]);
        }
        ok && self.remove_finalizer(uid, node, ORPHAN_FINALIZER)
    }

    /// Foreground propagation: delete the dependents; drop the finalizer once none that
    /// blocks (`blockOwnerDeletion: true`) is left.
    fn delete_dependents_first(&mut self, uid: &str, node: &Node) -> bool {
        let mut ok = true;
        let mut blocked = false;
        for dependent in self.dependents_of(uid) {
            let Some(dep) = self.nodes.get(&dependent).cloned() else {
                continue;
            };
            blocked |= dep
                .owners
                .iter()
                .any(|o| o.uid == uid && o.block_owner_deletion);
            if !dep.deleting {
                ok &= self.collect_if_unowned(&dependent, &dep);
            }
        }
        if blocked {
            // Each dependent's removal (or release) is an event that brings the owner back.
            return ok;
        }
        ok && self.remove_finalizer(uid, node, FOREGROUND_FINALIZER)
    }

    /// Deletes `node` if it has no live owner left; drops references to owners that are gone
    /// or waiting for their dependents when another owner still holds it.
    fn collect_if_unowned(&mut self, uid: &str, node: &Node) -> bool {
        let mut solid = false;
        let mut waiting = false;
        let mut stale: Vec<String> = Vec::new();
        for owner in &node.owners {
            match self.owner_state(node, owner) {
                None => return true,
                Some(OwnerState::Solid) => solid = true,
                Some(OwnerState::WaitingForDependents) => {
                    waiting = true;
                    stale.push(owner.uid.clone());
                }
                Some(OwnerState::Dangling) => stale.push(owner.uid.clone()),
            }
        }
        if solid {
            if stale.is_empty() {
                return true;
            }
            let stale: Vec<&str> = stale.iter().map(String::as_str).collect();
            return self.remove_owner_refs(uid, node, &stale);
        }
        // Dependents of a foreground deletion that have dependents of their own are deleted
        // in the foreground too, so the whole tree goes bottom-up.
        let policy = if node.has_finalizer(ORPHAN_FINALIZER) {
            "Orphan"
        } else if node.has_finalizer(FOREGROUND_FINALIZER)
            || (waiting && !self.dependents_of(uid).is_empty())
        {
            "Foreground"
        } else {
            "Background"
        };
        self.delete(uid, node, policy)
    }

    /// Resolves an owner reference by uid, checking the store when the graph lacks it.
    /// `None` when the owner's kind is not served: nothing is decided about such owners.
    fn owner_state(&self, dependent: &Node, owner: &OwnerRef) -> Option<OwnerState> {
        if let Some(found) = self.nodes.get(&owner.uid) {
            return Some(if found.waits_for_dependents() {
                OwnerState::WaitingForDependents
            } else {
                OwnerState::Solid
            });
        }
        let owner_type = self
            .store
            .resource_types()
            .into_iter()
            .find(|rt| rt.api_version() == owner.api_version && rt.kind == owner.kind)?;
        // A namespaced owner lives in its dependent's namespace.
        let namespace = if owner_type.namespaced {
            dependent.namespace.as_deref()
        } else {
            None
        };
        let live = self
            .store
            .get(&owner.api_version, &owner.kind, namespace, &owner.name)
            .filter(|obj| meta::uid(obj) == owner.uid);
        Some(match live {
            Some(obj)
                if meta::is_deleting(&obj) && meta::has_finalizer(&obj, FOREGROUND_FINALIZER) =>
            {
                OwnerState::WaitingForDependents
            }
            Some(_) => OwnerState::Solid,
            None => OwnerState::Dangling,
        })
    }

    fn delete(&self, uid: &str, node: &Node, policy: &str) -> bool {
        let options = DeleteOptions {
            propagation_policy: Some(policy.to_string()),
            precondition_uid: Some(uid.to_string()),
            ..DeleteOptions::default()
        };
        let result = self.store.delete(
            &node.api_version,
            &node.kind,
            node.namespace.as_deref(),
            &node.name,
            options,
        );
        match result {
            Ok(_) => true,
            // Already gone, or replaced by a new instance: nothing left to collect.
            Err(err) if err.code == 404 || err.code == 409 => true,
            Err(err) => {
                debug!(kind = %node.kind, name = %node.name, error = %err.message, "garbage collection delete failed");
                false
            }
        }
    }

    /// Rewrites the object without the owner references to `owner_uids`.
    fn remove_owner_refs(&self, uid: &str, node: &Node, owner_uids: &[&str]) -> bool {
        self.edit(uid, node, |obj| {
            meta::retain_owner_refs(obj, |owner| !owner_uids.contains(&owner));
        })
    }

    fn remove_finalizer(&self, uid: &str, node: &Node, finalizer: &str) -> bool {
        self.edit(uid, node, |obj| {
            if let Some(list) = obj
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|f| f.as_str() != Some(finalizer));
            }
        })
    }

    /// Applies `change` to the current object (same uid) and writes it with its
    /// resourceVersion as precondition; false on a failed write.
    fn edit(&self, uid: &str, node: &Node, change: impl FnOnce(&mut Value)) -> bool {
        let Some(mut obj) = self
            .store
            .get(
                &node.api_version,
                &node.kind,
                node.namespace.as_deref(),
                &node.name,
            )
            .filter(|obj| meta::uid(obj) == uid)
        else {
            return true;
        };
        let before = obj.clone();
        change(&mut obj);
        if obj == before {
            return true;
        }
        match self.store.update(obj) {
            Ok(_) => true,
            Err(err) if err.code == 404 => true,
            Err(err) => {
                debug!(kind = %node.kind, name = %node.name, error = %err.message, "garbage collection update failed");
                false
            }
        }
    }
}

impl Controller for GarbageCollector {
    fn store(&self) -> &Store {
        &self.store
    }

    fn observe(&mut self, event: &StoreEvent) {
        let obj = &event.object;
        let uid = meta::uid(obj).to_string();
        if uid.is_empty() {
            return;
        }
        match event.event_type {
            EventType::Deleted => {
                self.remove(&uid);
                // The dependents may have lost their last owner.
                self.dirty.extend(self.dependents_of(&uid));
            }
            _ => self.upsert(&uid, Node::from_object(obj)),
        }
    }

    fn resync(&mut self) {
        self.nodes.clear();
        self.dependents.clear();
        // Several served versions can share one storage; each object is listed once.
        let mut seen_storage = BTreeSet::new();
        let mut objects = Vec::new();
        for rt in self.store.resource_types() {
            if seen_storage.insert(rt.storage.clone()) {
                objects.extend(self.store.list_shared(&rt.api_version(), &rt.kind, None));
            }
        }
        for obj in &objects {
            let uid = meta::uid(obj);
            if !uid.is_empty() {
                self.upsert(uid, Node::from_object(obj));
            }
        }
    }

    fn work(&mut self, now: Instant) -> Option<Instant> {
        self.dirty.extend(self.timers.pop_due(now));
        for uid in std::mem::take(&mut self.dirty) {
            if !self.process(&uid) {
                self.timers.schedule(now + RETRY, uid);
            }
        }
        self.timers.next()
    }
}
