//! Read helpers over objects held as JSON: metadata fields, owner references, conditions
//! and timestamps, shared by the controllers.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

/// `metadata.name` (empty when missing).
pub fn name(obj: &Value) -> &str {
    str_at(obj, "/metadata/name")
}

/// `metadata.namespace`, `None` for cluster-scoped objects.
pub fn namespace(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
}

/// `metadata.uid` (empty when missing).
pub fn uid(obj: &Value) -> &str {
    str_at(obj, "/metadata/uid")
}

/// `apiVersion` (empty when missing).
pub fn api_version(obj: &Value) -> &str {
    str_at(obj, "/apiVersion")
}

/// `kind` (empty when missing).
pub fn kind(obj: &Value) -> &str {
    str_at(obj, "/kind")
}

/// Whether the object has `apiVersion` and `kind` as given.
pub fn is(obj: &Value, api_version_: &str, kind_: &str) -> bool {
    api_version(obj) == api_version_ && kind(obj) == kind_
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|ts| !ts.is_null())
}

/// A pod's `status.phase` (`""` when unset).
pub fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The pod's phase is terminal (`Succeeded` or `Failed`): its containers have stopped and the
/// kubelet never starts them again.
pub fn is_finished(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether `metadata.finalizers` contains `finalizer`.
pub fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    finalizers(obj).contains(&finalizer)
}

/// `metadata.labels` as a map (non-string values ignored).
pub fn labels(obj: &Value) -> BTreeMap<&str, &str> {
    string_map(obj.pointer("/metadata/labels"))
}

/// A map of strings, as in `labels` or ConfigMap `data`.
pub fn string_map(value: Option<&Value>) -> BTreeMap<&str, &str> {
    value
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// One entry of `metadata.ownerReferences`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's `kind`.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid: owners are matched by uid, never by name alone.
    pub uid: String,
    /// Whether this owner is the managing controller.
    pub controller: bool,
    /// Whether the owner's foreground deletion waits for this dependent.
    pub block_owner_deletion: bool,
}

/// `metadata.ownerReferences`, skipping malformed entries.
pub fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some(OwnerRef {
                        api_version: r.get("apiVersion")?.as_str()?.to_string(),
                        kind: r.get("kind")?.as_str()?.to_string(),
                        name: r.get("name")?.as_str()?.to_string(),
                        uid: r.get("uid")?.as_str()?.to_string(),
                        controller: r.get("controller").and_then(Value::as_bool) == Some(true),
                        block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool)
                            == Some(true),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps the owner references whose uid satisfies `keep`; drops the field when none is left,
/// as the API server omits an empty list.
pub fn retain_owner_refs(obj: &mut Value, mut keep: impl FnMut(&str) -> bool) {
    let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(refs) = metadata
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    refs.retain(|r| keep(r.get("uid").and_then(Value::as_str).unwrap_or("")));
    if refs.is_empty() {
        metadata.remove("ownerReferences");
    }
}

/// The owner reference marked `controller: true`, if any.
pub fn controller_ref(obj: &Value) -> Option<OwnerRef> {
    owner_refs(obj).into_iter().find(|r| r.controller)
}

/// The current time as Kubernetes writes timestamps: RFC 3339 in UTC, whole seconds.
pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Parses an RFC 3339 timestamp.
pub fn parse_time(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The `status` of the condition of type `type_` in `status.conditions`.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// Whether the condition `type_` has status `"True"`.
pub fn condition_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A controller owner reference to `owner`, an apps/v1 object of `kind`, as
/// `metav1.NewControllerRef` builds it.
pub fn controller_ref_to(owner: &Value, kind: &str) -> Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// How long the pod's Ready condition has been true (zero if unknown).
pub fn ready_for(pod: &Value, now: DateTime<Utc>) -> std::time::Duration {
    condition(pod, "Ready")
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .and_then(parse_time)
        .and_then(|since| (now - since).to_std().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owner_refs_read_controller_and_blocking_flags() {
        let obj = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1",
             "controller": true, "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u2"}
        ]}});
        let refs = owner_refs(&obj);
        assert_eq!(refs.len(), 2);
        assert!(refs[0].controller && refs[0].block_owner_deletion);
        assert!(!refs[1].controller && !refs[1].block_owner_deletion);
        assert_eq!(controller_ref(&obj).unwrap().uid, "u1");
    }

    #[test]
    fn removing_the_last_owner_reference_drops_the_field() {
        let mut obj = json!({"metadata": {"name": "x", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "u1"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "u2"}
        ]}});
        retain_owner_refs(&mut obj, |uid| uid != "u1");
        assert_eq!(owner_refs(&obj).len(), 1);
        retain_owner_refs(&mut obj, |uid| uid != "u2");
        assert_eq!(obj, json!({"metadata": {"name": "x"}}));
    }
}
