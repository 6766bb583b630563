//! Claiming dependents by controller reference, as upstream's `ControllerRefManager.ClaimObject`
//! (pkg/controller/controller_ref_manager.go) does for the StatefulSet, ReplicaSet and
//! Deployment controllers:
//!
//! - a dependent whose controller reference names the owner is kept while the owner's selector
//!   matches it, and released (that reference removed) once it stops matching;
//! - an orphan that matches is adopted (a controller reference to the owner added), unless the
//!   owner or the orphan is being deleted;
//! - a dependent controlled by anyone else is left alone.
//!
//! Neither adoption nor release happens while the owner is being deleted.

use std::sync::Arc;

use serde_json::{Value, json};

use super::meta;
use crate::store::{LabelSelector, Store};

/// The owner that claims, and what it matches.
pub struct Claimant<'a> {
    /// The owning object.
    pub owner: &'a Value,
    /// Its kind, for the controller references it writes.
    pub kind: &'a str,
    /// Its selector over the candidates.
    pub selector: &'a LabelSelector,
}

impl Claimant<'_> {
    /// The `candidates` this owner controls once orphans are adopted and dependents that
    /// stopped matching are released, in the candidates' order. A write that fails (a
    /// conflict: the dependent changed) is skipped; the dependent's event brings the owner back.
    pub fn claim(&self, store: &Store, candidates: Vec<Arc<Value>>) -> Vec<Arc<Value>> {
        let uid = meta::uid(self.owner);
        let owner_deleting = meta::is_deleting(self.owner);
        let mut owned = Vec::new();
        for dependent in candidates {
            let matches = self.selector.matches(&dependent);
            match meta::controller_ref(&dependent) {
                Some(owner) if owner.uid == uid => {
                    if matches {
                        owned.push(dependent);
                    } else if !owner_deleting {
                        let mut released = Value::clone(&dependent);
                        meta::retain_owner_refs(&mut released, |owner| owner != uid);
                        let _ = store.update(released);
                    }
                }
                None if matches && !owner_deleting && !meta::is_deleting(&dependent) => {
                    if let Some(adopted) = self.adopt(store, Value::clone(&dependent)) {
                        owned.push(Arc::new(adopted));
                    }
                }
                _ => {}
            }
        }
        owned
    }

    fn adopt(&self, store: &Store, mut orphan: Value) -> Option<Value> {
        orphan["metadata"]
            .as_object_mut()?
            .entry("ownerReferences")
            .or_insert_with(|| json!([]))
            .as_array_mut()?
            .push(meta::controller_ref_to(self.owner, self.kind));
        store.update(orphan).ok()
    }
}
