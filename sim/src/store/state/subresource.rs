//! The `pods/binding` write and the `/scale` subresource.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Managed, State, Sub, WriteOptions, WriteResult};
use crate::store::error::{ApiError, Cause};
use crate::store::fields::Hints;
use crate::store::patch::{self, PatchKind};
use crate::store::types::ResourceType;
use crate::store::{EventType, LabelSelector, events, meta};

/// A `/scale` write: a full Scale (PUT) or a patch of the current Scale.
pub(crate) enum ScaleUpdate<'a> {
    Replace(&'a Value),
    Patch(PatchKind, &'a Value),
}

impl State {
    /// The `pods/binding` write: sets `spec.nodeName` of an unbound pod. Like the apiserver's
    /// binding storage it skips the update strategy, so `generation` and managedFields stay
    /// as they are (a pod's generation follows spec changes made by its users only).
    pub(crate) fn bind_pod(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        node: &str,
    ) -> Result<Value, ApiError> {
        if !rt.group.is_empty() || rt.plural != "pods" {
            return Err(ApiError::path_not_found());
        }
        let mut pod = self.current(rt, ns, name)?;
        if meta::at(&pod, &["metadata", "deletionTimestamp"]).is_some() {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let assigned = meta::str_at(&pod, &["spec", "nodeName"]).unwrap_or("");
        if !assigned.is_empty() {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("pod {name} is already assigned to node {assigned:?}"),
            ));
        }
        pod.as_object_mut()
            .expect("stored objects are maps")
            .entry("spec")
            .or_insert_with(|| json!({}))["nodeName"] = json!(node);
        let stored = self.commit(rt, EventType::Modified, pod);
        Ok(events::to_served(&stored, rt))
    }

    /// The `autoscaling/v1 Scale` view of an object.
    pub(crate) fn get_scale(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let obj = self.get(rt, ns, name)?;
        scale_of(rt, &obj)
    }

    /// PUT or PATCH of `/scale`: `scale` is the new Scale; only replicas are written.
    pub(crate) fn write_scale(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        scale_update: ScaleUpdate<'_>,
        opts: &WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let spec = rt.scale.clone().ok_or_else(ApiError::path_not_found)?;
        let cur = self.current(rt, ns, name)?;
        let served = events::to_served(&cur, rt);
        let current_scale = scale_of(rt, &served)?;
        let new_scale = match scale_update {
            ScaleUpdate::Replace(s) => s.clone(),
            ScaleUpdate::Patch(kind, body) => {
                if kind == PatchKind::Apply {
                    let mut merged = current_scale.clone();
                    patch::merge_patch(&mut merged, body);
                    merged
                } else {
                    patch::apply_patch(kind, &current_scale, body, &Hints::none())
                        .map_err(|e| e.about_object(rt, name))?
                }
            }
        };
        let rv = meta::resource_version(&new_scale);
        if !rv.is_empty() && rv != meta::resource_version(&cur) {
            return Err(ApiError::stale(rt, name));
        }
        let replicas = meta::at(&new_scale, &["spec", "replicas"])
            .cloned()
            .unwrap_or(json!(0));
        if replicas.as_i64().is_none_or(|r| r < 0) {
            return Err(ApiError::invalid(
                rt,
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.replicas",
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let mut new = cur.clone();
        meta::set_path(&mut new, &spec.spec_replicas_path, replicas);
        let result = self.finish_update(rt, cur, new, opts, Sub::Scale, Managed::Update)?;
        Ok(WriteResult {
            object: scale_of(rt, &result.object)?,
            warnings: result.warnings,
            created: false,
        })
    }
}

fn scale_of(rt: &ResourceType, obj: &Value) -> Result<Value, ApiError> {
    let spec = rt.scale.as_ref().ok_or_else(ApiError::path_not_found)?;
    let replicas = meta::json_path(obj, &spec.spec_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let status_replicas = meta::json_path(obj, &spec.status_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let mut status = json!({"replicas": status_replicas});
    let selector = match spec.label_selector_path.as_deref() {
        Some(".status.selector") if rt.crd.is_none() => obj
            .get("spec")
            .and_then(|s| s.get("selector"))
            .and_then(|s| LabelSelector::from_label_selector(s).ok())
            .map(|s| s.to_query()),
        Some(path) => meta::json_path(obj, path)
            .and_then(Value::as_str)
            .map(String::from),
        None => None,
    };
    if let Some(sel) = selector {
        status["selector"] = json!(sel);
    }
    let m = obj.get("metadata").cloned().unwrap_or(json!({}));
    let mut md = Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = m.get(f) {
            md.insert(f.into(), v.clone());
        }
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": md,
        "spec": {"replicas": replicas},
        "status": status,
    }))
}
