//! An object's metadata as the summaries read it: every field but `managedFields`, which is
//! skipped unparsed. k8s-openapi reads each entry's `fieldsV1` into a `serde_json::Value`
//! tree, about 13 KB per worker ConfigMap, only for the cache to drop it: a live list of a
//! 1,000-worker pool's ConfigMaps held 12.8 MiB of them at once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// `#[serde(deserialize_with)]` for a `metadata` field: the object's metadata without its
/// managed fields.
pub(crate) fn without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    MetaFields::deserialize(deserializer).map(ObjectMeta::from)
}

/// `meta` as [`without_managed_fields`] reads it.
pub(crate) fn read_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        managed_fields: None,
        self_link: None,
        ..meta.clone()
    }
}

/// `ObjectMeta`'s fields but `managedFields` (and `selfLink`, which API servers no longer set).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    uid: Option<String>,
}

impl From<MetaFields> for ObjectMeta {
    fn from(meta: MetaFields) -> Self {
        ObjectMeta {
            annotations: meta.annotations,
            creation_timestamp: meta.creation_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            generate_name: meta.generate_name,
            generation: meta.generation,
            labels: meta.labels,
            managed_fields: None,
            name: meta.name,
            namespace: meta.namespace,
            owner_references: meta.owner_references,
            resource_version: meta.resource_version,
            self_link: None,
            uid: meta.uid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Object {
        #[serde(deserialize_with = "without_managed_fields")]
        metadata: ObjectMeta,
    }

    #[test]
    fn every_field_but_the_managed_fields_is_read() {
        let metadata = json!({
            "annotations": {"a": "1"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-01-01T00:01:00Z",
            "finalizers": ["f"],
            "generateName": "w-",
            "generation": 3,
            "labels": {"app": "w"},
            "managedFields": [{
                "manager": "swarm-operator",
                "operation": "Apply",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:config.yml": {}}},
            }],
            "name": "w-0",
            "namespace": "ns",
            "ownerReferences": [{
                "apiVersion": "swarm.io/v1alpha1",
                "kind": "SwarmPool",
                "name": "p",
                "uid": "pool-uid",
                "controller": true,
            }],
            "resourceVersion": "42",
            "uid": "u-1",
        });
        let mut expected: ObjectMeta = serde_json::from_value(metadata.clone()).unwrap();
        assert!(expected.managed_fields.is_some());
        expected.managed_fields = None;
        let read: Object = serde_json::from_value(json!({"metadata": metadata})).unwrap();
        assert_eq!(read.metadata, expected);
    }
}
