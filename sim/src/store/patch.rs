//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge
//! patch with its directives.

use serde_json::{Map, Value};

use super::error::{ApiError, Cause};
use super::fields::{Hints, SmpList};

/// The four patch types, by Content-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    /// Maps a Content-Type (parameters ignored) to a patch type.
    pub(crate) fn from_content_type(ct: &str) -> Option<PatchKind> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchKind::Apply)
            }
            _ => None,
        }
    }
}

/// RFC 7386 merge patch in place.
pub(crate) fn merge_patch(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

/// Applies a merge, json or strategic merge patch to `orig`, giving the new object.
pub(crate) fn apply_patch(
    kind: PatchKind,
    orig: &Value,
    body: &Value,
    hints: &Hints,
) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Merge => {
            if !body.is_object() {
                return Err(ApiError::bad_request(
                    "the merge patch must be a JSON object",
                ));
            }
            let mut doc = orig.clone();
            merge_patch(&mut doc, body);
            Ok(doc)
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(body.clone()).map_err(|e| {
                ApiError::bad_request(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
            let mut doc = orig.clone();
            for op in ops.iter() {
                // Like kube-apiserver's json-patch library, `test` of null passes on a missing
                // path; kube-runtime's finalizer helper relies on it for the first finalizer.
                if let json_patch::PatchOperation::Test(t) = op
                    && t.value.is_null()
                    && doc.pointer(t.path.as_str()).is_none()
                {
                    continue;
                }
                json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| {
                    // A failed op (including a failed `test`) leaves the object untouched.
                    let mut err = ApiError::new(422, "Invalid", e.to_string());
                    err.details_mut().causes =
                        vec![Cause::new("FieldValueInvalid", "", e.to_string())];
                    err
                })?;
            }
            Ok(doc)
        }
        PatchKind::Strategic => {
            if !body.is_object() {
                return Err(ApiError::bad_request(
                    "the strategic merge patch must be a JSON object",
                ));
            }
            strategic(orig, body, hints, &mut Vec::new())
                .map(|v| v.unwrap_or(Value::Object(Map::new())))
        }
        PatchKind::Apply => Err(ApiError::internal("apply is not a plain patch")),
    }
}

fn is_directive(k: &str) -> bool {
    k.starts_with('$')
}

/// A patch value with its directives removed (for values inserted as they are).
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !is_directive(k))
                .map(|(k, v)| (k.clone(), clean(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|i| i.get("$patch").is_none())
                .map(clean)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Strategic merge of a map; `None` when the patch deletes it (`$patch: delete`).
fn strategic(
    orig: &Value,
    patch: &Value,
    hints: &Hints,
    path: &mut Vec<String>,
) -> Result<Option<Value>, ApiError> {
    let Some(pm) = patch.as_object() else {
        return Ok(Some(patch.clone()));
    };
    match pm.get("$patch").and_then(Value::as_str) {
        Some("replace") => return Ok(Some(clean(patch))),
        Some("delete") => return Ok(None),
        Some("merge") | None => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Unknown patch type: {other}"
            )));
        }
    }
    let mut out = orig.as_object().cloned().unwrap_or_default();
    merge_fields(&mut out, pm, hints, path)?;
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(list)), Some(del)) = (out.get_mut(field), pv.as_array())
        {
            list.retain(|i| !del.contains(i));
        }
    }
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$setElementOrder/")
            && let Some(order) = pv.as_array()
        {
            set_element_order(&mut out, field, order, hints, path);
        }
    }
    if let Some(retain) = pm.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(Value::Object(out)))
}

/// Merges every field of the patch map `pm` into `out`: null deletes, maps and lists merge
/// strategically, anything else replaces.
fn merge_fields(
    out: &mut Map<String, Value>,
    pm: &Map<String, Value>,
    hints: &Hints,
    path: &mut Vec<String>,
) -> Result<(), ApiError> {
    for (k, pv) in pm {
        if is_directive(k) {
            continue;
        }
        if pv.is_null() {
            out.remove(k);
            continue;
        }
        path.push(k.clone());
        let merged = match (out.get(k), pv) {
            (Some(ov @ Value::Object(_)), Value::Object(_)) => strategic(ov, pv, hints, path)?,
            (Some(Value::Array(ol)), Value::Array(pl)) => Some(merge_list(ol, pl, hints, path)?),
            (_, Value::Object(_)) => strategic(&Value::Object(Map::new()), pv, hints, path)?,
            (_, Value::Array(pl)) => Some(merge_list(&[], pl, hints, path)?),
            _ => Some(pv.clone()),
        };
        path.pop();
        match merged {
            Some(v) => {
                out.insert(k.clone(), v);
            }
            None => {
                out.remove(k);
            }
        }
    }
    Ok(())
}

/// `$setElementOrder/<field>`: sorts the list `field` of `out` as `order` lists its items
/// (by merge key, or by value for primitives); items `order` lacks go last, in their order.
fn set_element_order(
    out: &mut Map<String, Value>,
    field: &str,
    order: &[Value],
    hints: &Hints,
    path: &mut Vec<String>,
) {
    path.push(field.to_string());
    let key = match hints.smp_list(path) {
        SmpList::MergeByKey(key) => Some(key),
        _ => None,
    };
    path.pop();
    let Some(Value::Array(list)) = out.get_mut(field) else {
        return;
    };
    let rank = |item: &Value| {
        order
            .iter()
            .position(|o| match &key {
                Some(key) => o.get(key) == item.get(key),
                None => o == item,
            })
            .unwrap_or(usize::MAX)
    };
    let mut indexed: Vec<(usize, usize, Value)> = list
        .drain(..)
        .enumerate()
        .map(|(i, v)| (rank(&v), i, v))
        .collect();
    indexed.sort_by_key(|(r, i, _)| (*r, *i));
    list.extend(indexed.into_iter().map(|(_, _, v)| v));
}

fn merge_list(
    orig: &[Value],
    patch: &[Value],
    hints: &Hints,
    path: &mut Vec<String>,
) -> Result<Value, ApiError> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(clean(&Value::Array(patch.to_vec())));
    }
    match hints.smp_list(path) {
        SmpList::Replace => Ok(clean(&Value::Array(patch.to_vec()))),
        SmpList::MergePrimitives => {
            let mut out = orig.to_vec();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        SmpList::MergeByKey(key) => {
            let mut out = orig.to_vec();
            path.push("[]".into());
            for item in patch {
                let Some(kv) = item.get(&key) else {
                    path.pop();
                    return Err(ApiError::bad_request(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let pos = out.iter().position(|o| o.get(&key) == Some(kv));
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(p) = pos {
                        out.remove(p);
                    }
                    continue;
                }
                match pos {
                    Some(p) => {
                        if let Some(v) = strategic(&out[p], item, hints, path)? {
                            out[p] = v;
                        } else {
                            out.remove(p);
                        }
                    }
                    None => out.push(clean(item)),
                }
            }
            path.pop();
            Ok(Value::Array(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::types::builtin_types;
    use serde_json::json;

    fn sts_hints() -> Hints {
        let rt = builtin_types()
            .into_iter()
            .find(|t| t.kind == "StatefulSet")
            .unwrap();
        Hints::for_type(&rt)
    }

    #[test]
    fn strategic_merge_merges_containers_and_env_by_name() {
        let orig = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "b", "image": "y:1"}
        ]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x:2", "env": [{"name": "B", "value": "2"}]}
        ]}}}});
        let out = apply_patch(PatchKind::Strategic, &orig, &patch, &sts_hints()).unwrap();
        let cs = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs.as_array().unwrap().len(), 2);
        assert_eq!(cs[0]["image"], "x:2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strategic_merge_honours_delete_and_element_order() {
        let orig = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a"}, {"name": "b"}, {"name": "c"}
        ]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}],
            "containers": [{"name": "b", "$patch": "delete"}]
        }}}});
        let out = apply_patch(PatchKind::Strategic, &orig, &patch, &sts_hints()).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c"}, {"name": "a"}])
        );
    }

    #[test]
    fn strategic_merge_retain_keys_drops_other_keys() {
        let orig = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = apply_patch(PatchKind::Strategic, &orig, &patch, &sts_hints()).unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn json_patch_test_of_null_passes_on_missing_path() {
        let orig = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]);
        let out = apply_patch(PatchKind::Json, &orig, &patch, &Hints::none()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn failed_json_patch_test_is_invalid() {
        let orig = json!({"metadata": {"finalizers": ["a"]}});
        let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": ["b"]}]);
        let err = apply_patch(PatchKind::Json, &orig, &patch, &Hints::none()).unwrap_err();
        assert_eq!(err.code, 422);
    }
}
