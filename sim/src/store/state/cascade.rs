//! What a deletion sets off in the objects that hold others: a terminating namespace deletes
//! its content and a terminating CRD its instances; each goes once it is empty.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Key, State};
use crate::store::types::ResourceType;
use crate::store::{DeleteOptions, EventType, crd, meta};

impl State {
    /// Deletes everything in a terminating namespace, then the namespace once empty.
    pub(super) fn empty_namespace(&mut self, ns: &str) {
        let targets: Vec<(Arc<ResourceType>, String)> = self
            .buckets
            .iter()
            .filter_map(|(storage, objs)| {
                let rt = self.registry.storage_type(storage)?;
                rt.namespaced.then_some((rt, objs))
            })
            .flat_map(|(rt, objs)| {
                objs.keys()
                    .filter(|(ons, _)| ons == ns)
                    .map(move |(_, n)| (rt.clone(), n.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (rt, name) in targets {
            let _ = self.delete(&rt, ns, &name, &DeleteOptions::default(), false);
        }
        self.maybe_finish_namespace(ns.to_string());
    }

    /// Removes a terminating namespace without finalizers once nothing is left in it.
    pub(super) fn maybe_finish_namespace(&mut self, ns: String) {
        let ns_type = self.registry.by_gvk("v1", "Namespace").expect("built in");
        let Some(nso) = self.stored(&ns_type, "", &ns).cloned() else {
            return;
        };
        if meta::at(&nso, &["metadata", "deletionTimestamp"]).is_none()
            || !meta::finalizers(&nso).is_empty()
        {
            return;
        }
        let empty = self.buckets.iter().all(|(storage, objs)| {
            !self
                .registry
                .storage_type(storage)
                .is_some_and(|t| t.namespaced)
                || !objs.keys().any(|(ons, _)| *ons == ns)
        });
        if empty {
            self.remove(&ns_type, nso);
        }
    }

    /// Deletes every instance of a terminating CRD, then the CRD once none is left.
    pub(super) fn empty_crd(&mut self, crd_obj: &Value) {
        let crd_name = meta::name(crd_obj).to_string();
        let storage = crd::storage_key(crd_obj);
        let Some(rt) = self.registry.storage_type(&storage) else {
            self.maybe_finish_crd(&crd_name);
            return;
        };
        let keys: Vec<Key> = self
            .buckets
            .get(&storage)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, name) in keys {
            let _ = self.delete(&rt, &ns, &name, &DeleteOptions::default(), false);
        }
        self.maybe_finish_crd(&crd_name);
    }

    /// Once a terminating CRD has no instances left, drops its cleanup finalizer, which
    /// removes it unless other finalizers remain.
    pub(super) fn maybe_finish_crd(&mut self, crd_name: &str) {
        let crd_type = self
            .registry
            .by_gvk("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .expect("built in");
        let Some(crd_obj) = self.stored(&crd_type, "", crd_name).cloned() else {
            return;
        };
        if meta::at(&crd_obj, &["metadata", "deletionTimestamp"]).is_none() {
            return;
        }
        let storage = crd::storage_key(&crd_obj);
        if self.buckets.get(&storage).is_some_and(|b| !b.is_empty()) {
            return;
        }
        let mut new = crd_obj.clone();
        let finalizers: Vec<String> = meta::finalizers(&crd_obj)
            .into_iter()
            .filter(|f| f != crd::CLEANUP_FINALIZER)
            .collect();
        if finalizers.is_empty() {
            meta::meta_mut(&mut new).remove("finalizers");
            self.remove(&crd_type, new);
        } else {
            meta::meta_mut(&mut new).insert("finalizers".into(), json!(finalizers));
            self.commit(&crd_type, EventType::Modified, new);
        }
    }
}
