//! The work queue of a controller of one namespaced kind: objects marked by events, namespaces
//! whose every object must be looked at (an orphan may be adopted by any of them), and timers.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::meta;
use super::timers::Timers;
use crate::store::Store;

/// (namespace, name) of an object.
pub(crate) type Key = (String, String);

/// What a level-triggered controller of `api_version`/`kind` has to reconcile.
pub(crate) struct WorkQueue {
    api_version: &'static str,
    kind: &'static str,
    dirty: BTreeSet<Key>,
    namespaces: BTreeSet<String>,
    timers: Timers<Key>,
}

impl WorkQueue {
    pub(crate) fn new(api_version: &'static str, kind: &'static str) -> Self {
        Self {
            api_version,
            kind,
            dirty: BTreeSet::new(),
            namespaces: BTreeSet::new(),
            timers: Timers::new(),
        }
    }

    /// Marks one object.
    pub(crate) fn mark(&mut self, namespace: &str, name: impl Into<String>) {
        self.dirty.insert((namespace.to_string(), name.into()));
    }

    /// Marks every object of `namespace`.
    pub(crate) fn mark_namespace(&mut self, namespace: &str) {
        self.namespaces.insert(namespace.to_string());
    }

    /// Marks the controller of a dependent (a pod, a ReplicaSet): its owner when that is of
    /// this queue's kind, every object of the namespace when it has no controller.
    pub(crate) fn mark_controller_of(&mut self, namespace: &str, dependent: &serde_json::Value) {
        match meta::controller_ref(dependent) {
            Some(owner) if owner.kind == self.kind => self.mark(namespace, owner.name),
            Some(_) => {}
            None => self.mark_namespace(namespace),
        }
    }

    /// Marks every object of the kind.
    pub(crate) fn mark_all(&mut self, store: &Store) {
        for obj in store.list_shared(self.api_version, self.kind, None) {
            if let Some(namespace) = meta::namespace(&obj) {
                self.mark(namespace, meta::name(&obj));
            }
        }
    }

    /// Runs `sync` on everything marked or due; `sync` returns when its object must run again
    /// without an event. Returns when the queue next needs to run.
    pub(crate) fn run(
        &mut self,
        store: &Store,
        now: Instant,
        mut sync: impl FnMut(&str, &str) -> Option<Duration>,
    ) -> Option<Instant> {
        self.dirty.extend(self.timers.pop_due(now));
        for namespace in std::mem::take(&mut self.namespaces) {
            for obj in store.list_shared(self.api_version, self.kind, Some(&namespace)) {
                self.dirty
                    .insert((namespace.clone(), meta::name(&obj).to_string()));
            }
        }
        for (namespace, name) in std::mem::take(&mut self.dirty) {
            if let Some(after) = sync(&namespace, &name) {
                self.timers.schedule(now + after, (namespace, name));
            }
        }
        self.timers.next()
    }
}
