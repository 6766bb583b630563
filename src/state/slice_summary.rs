//! A worker's own ConfigMap (its slice, see [`crate::state::worker_slices`]) as the operator
//! reads it: its identity, its controlling owner, its pool and worker labels, its fence
//! annotation and its `config.yml`, nothing else.
//!
//! Under `Acknowledge` there is a slice per worker in the cache, and the live lists and write
//! responses of a 1,000-worker pool hold one each. A k8s-openapi `ConfigMap` keeps its labels,
//! annotations and data in three maps, and a map allocates a node for eleven entries (about
//! 640 bytes) however few it holds, so slices are deserialized straight into this summary,
//! with those entries as plain fields.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::state::object_meta::{read_meta, without_managed_fields};
use crate::state::served_as::served_as;
use swarm_protocol::config::CONFIG_KEY;
use swarm_protocol::names::{FENCED_AT_ANNOTATION, POOL_LABEL, WORKER_LABEL};

/// A worker's ConfigMap: identity in `metadata` (without labels, annotations and owners), and
/// what the operator reads of the rest.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "ConfigMapFields")]
pub struct SliceSummary {
    /// The ConfigMap's metadata, without its labels, annotations and owner references.
    pub metadata: ObjectMeta,
    /// The uid of its controlling owner (the pool whose slice it is), if it has one.
    pub controller_uid: Option<String>,
    /// Its pool label ([`POOL_LABEL`]).
    pub pool: Option<String>,
    /// Its worker label ([`WORKER_LABEL`]): the pod whose slice it is.
    pub worker: Option<String>,
    /// Its fence annotation ([`FENCED_AT_ANNOTATION`]), if it is a number.
    pub fenced_at: Option<u64>,
    /// Its `config.yml`, shared with the cache that holds it.
    pub config: Option<Arc<str>>,
}

impl SliceSummary {
    /// The ConfigMap's name.
    pub fn name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }
}

impl From<&ConfigMap> for SliceSummary {
    fn from(cm: &ConfigMap) -> Self {
        ConfigMapFields {
            metadata: read_meta(&cm.metadata),
            data: cm.data.clone(),
        }
        .into()
    }
}

// Served as ConfigMaps: the API is the ConfigMaps' API, only the Rust type is smaller.
served_as!(SliceSummary, ConfigMap);

/// What a ConfigMap is read as: `metadata` and `data` (a slice has no binary data).
#[derive(Deserialize)]
struct ConfigMapFields {
    #[serde(default, deserialize_with = "without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    data: Option<BTreeMap<String, String>>,
}

impl From<ConfigMapFields> for SliceSummary {
    fn from(cm: ConfigMapFields) -> Self {
        let mut metadata = cm.metadata;
        let mut labels = metadata.labels.take().unwrap_or_default();
        let fenced_at = metadata
            .annotations
            .take()
            .and_then(|mut annotations| annotations.remove(FENCED_AT_ANNOTATION))
            .and_then(|at| at.parse().ok());
        let controller_uid = metadata
            .owner_references
            .take()
            .into_iter()
            .flatten()
            .find(|owner| owner.controller == Some(true))
            .map(|owner| owner.uid);
        SliceSummary {
            metadata,
            controller_uid,
            pool: labels.remove(POOL_LABEL),
            worker: labels.remove(WORKER_LABEL),
            fenced_at,
            config: cm
                .data
                .and_then(|mut data| data.remove(CONFIG_KEY))
                .map(Arc::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn a_slice_is_read_as_its_labels_fence_and_config() {
        let json = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "web-config.web-0",
                "namespace": "ns",
                "resourceVersion": "12",
                "labels": {POOL_LABEL: "web", WORKER_LABEL: "web-0", "team": "video"},
                "annotations": {FENCED_AT_ANNOTATION: "7", "note": "someone's"},
                "ownerReferences": [{
                    "apiVersion": "swarm.io/v1alpha1", "kind": "SwarmPool", "name": "web",
                    "uid": "pool-uid", "controller": true,
                }],
                "managedFields": [{"manager": "swarm-operator", "operation": "Apply"}],
            },
            "data": {CONFIG_KEY: "version: 7\n", "other": "x"},
        });
        let from_json: SliceSummary = serde_json::from_value(json.clone()).unwrap();
        let cm: ConfigMap = serde_json::from_value(json).unwrap();
        assert_eq!(from_json, SliceSummary::from(&cm));

        assert_eq!(from_json.name(), Some("web-config.web-0"));
        assert_eq!(from_json.pool.as_deref(), Some("web"));
        assert_eq!(from_json.worker.as_deref(), Some("web-0"));
        assert_eq!(from_json.fenced_at, Some(7));
        assert_eq!(from_json.config.as_deref(), Some("version: 7\n"));
        assert_eq!(from_json.controller_uid.as_deref(), Some("pool-uid"));
        assert_eq!(
            from_json.metadata.owner_references, None,
            "the owner is a field"
        );
        assert_eq!(from_json.metadata.labels, None, "the labels are fields");
        assert_eq!(from_json.metadata.annotations, None, "the fence is a field");
    }

    #[test]
    fn a_config_map_without_labels_or_data_is_nobodys_slice() {
        let summary: SliceSummary =
            serde_json::from_value(json!({"metadata": {"name": "web-config.web-0",
                "annotations": {FENCED_AT_ANNOTATION: "not a number"}}}))
            .unwrap();
        assert_eq!(
            summary,
            SliceSummary {
                metadata: ObjectMeta {
                    name: Some("web-config.web-0".into()),
                    ..ObjectMeta::default()
                },
                ..SliceSummary::default()
            }
        );
    }

    #[test]
    fn is_served_as_config_maps() {
        assert_eq!(
            SliceSummary::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(SliceSummary::kind(&()), "ConfigMap");
    }
}
