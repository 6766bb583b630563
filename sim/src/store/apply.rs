//! Server-side apply: merge a configuration into the live object, track ownership in
//! managedFields, report conflicts, and remove what a manager stopped applying.

use serde_json::{Map, Value};

use super::error::{ApiError, Cause};
use super::fields::{self, Entry, FieldSet, Hints, ListType};
use super::meta;
use super::state::Sub;
use super::types::ResourceType;

/// The result of an apply: the merged object and the new managedFields.
pub(crate) struct Outcome {
    pub object: Value,
    pub managed: Vec<Value>,
}

/// Drops nulls: in an apply configuration a null means "not set by this manager".
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Merges `cfg` into `live` following the list and map semantics of `hints`.
pub(crate) fn merge(live: &Value, cfg: &Value, hints: &Hints, path: &mut Vec<String>) -> Value {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) if !hints.map_atomic(path) => {
            let mut out = l.clone();
            for (k, cv) in c {
                path.push(k.clone());
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, cv, hints, path),
                    None => cv.clone(),
                };
                path.pop();
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => match hints.list_type(path) {
            ListType::Atomic => cfg.clone(),
            ListType::Set => {
                let mut out = l.clone();
                for item in c {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            ListType::Map(keys) => {
                path.push("[]".into());
                let mut out: Vec<Value> = l
                    .iter()
                    .map(
                        |li| match c.iter().find(|ci| fields::item_matches(ci, li, &keys)) {
                            Some(ci) => merge(li, ci, hints, path),
                            None => li.clone(),
                        },
                    )
                    .collect();
                for ci in c {
                    if !l.iter().any(|li| fields::item_matches(li, ci, &keys)) {
                        out.push(ci.clone());
                    }
                }
                path.pop();
                Value::Array(out)
            }
        },
        _ => cfg.clone(),
    }
}

/// Checks list-map keys and set uniqueness of a configuration (duplicates are 422 in apply).
fn check_config(cfg: &Value, hints: &Hints, path: &mut Vec<String>, causes: &mut Vec<Cause>) {
    match cfg {
        Value::Object(m) => {
            for (k, v) in m {
                path.push(k.clone());
                check_config(v, hints, path, causes);
                path.pop();
            }
        }
        Value::Array(items) => {
            let field = path
                .iter()
                .filter(|p| *p != "[]")
                .cloned()
                .collect::<Vec<_>>()
                .join(".");
            match hints.list_type(path) {
                ListType::Set => {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i].contains(item) {
                            causes.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("{field}[{i}]"),
                                format!("Duplicate value: {item}"),
                            ));
                        }
                    }
                }
                ListType::Map(keys) => {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i]
                            .iter()
                            .any(|o| fields::item_matches(o, item, &keys))
                        {
                            causes.push(Cause::new(
                                "FieldValueDuplicate",
                                format!("{field}[{i}]"),
                                format!(
                                    "Duplicate value: {}",
                                    fields::key_pe(item, &keys).trim_start_matches("k:")
                                ),
                            ));
                        }
                    }
                }
                ListType::Atomic => {}
            }
            path.push("[]".into());
            for item in items {
                check_config(item, hints, path, causes);
            }
            path.pop();
        }
        _ => {}
    }
}

fn conflict_error(conflicts: &[(Entry, Vec<Vec<String>>)]) -> ApiError {
    let total: usize = conflicts.iter().map(|(_, p)| p.len()).sum();
    let mut causes = Vec::new();
    let mut lines = Vec::new();
    for (e, paths) in conflicts {
        let mut who = format!("conflict with \"{}\"", e.manager);
        if let Some(s) = &e.subresource {
            who.push_str(&format!(" with subresource \"{s}\""));
        }
        if e.operation == "Update" {
            who.push_str(&format!(" using {}", e.api_version));
        }
        for p in paths {
            let field = fields::render_path(p);
            causes.push(Cause::new(
                "FieldManagerConflict",
                field.clone(),
                who.clone(),
            ));
            lines.push((who.clone(), field));
        }
    }
    let message = if total == 1 {
        format!(
            "Apply failed with 1 conflict: {}: {}",
            lines[0].0, lines[0].1
        )
    } else {
        let mut m = format!("Apply failed with {total} conflicts: ");
        let mut last_who = String::new();
        for (who, field) in &lines {
            if *who != last_who {
                m.push_str(&format!(
                    "{}:",
                    who.replacen("conflict with", "conflicts with", 1)
                ));
                last_who = who.clone();
            }
            m.push_str(&format!("\n- {field}"));
        }
        m
    };
    let mut err = ApiError::new(409, "Conflict", message);
    err.details_mut().causes = causes;
    err
}

/// The identity of the applying manager: its Apply entry through one subresource.
#[derive(Clone, Copy)]
struct Applier<'a> {
    manager: &'a str,
    subresource: Option<&'a str>,
}

impl Applier<'_> {
    fn owns(&self, e: &Entry) -> bool {
        e.same_identity(self.manager, "Apply", self.subresource)
    }
}

/// Applies `config` (already checked for apiVersion, kind and name) over `live` (Null when
/// the object does not exist yet) on behalf of `manager`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    live: &Value,
    config: &Value,
    managed: &[Value],
    manager: &str,
    sub: Sub,
    api_version: &str,
    hints: &Hints,
    rt: &ResourceType,
    force: bool,
) -> Result<Outcome, ApiError> {
    let me = Applier {
        manager,
        subresource: sub.name(),
    };
    let config = strip_nulls(config);
    let tracked_cfg = fields::tracked_part(&config, me.subresource, hints);
    let mut causes = Vec::new();
    check_config(&tracked_cfg, hints, &mut Vec::new(), &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(rt, meta::name(&config), causes));
    }
    let cfg_set = fields::object_fields(&tracked_cfg, hints);

    let live_obj = if live.is_null() {
        identity_of(&config)
    } else {
        live.clone()
    };
    let mut merged = merge(
        &live_obj,
        &mergeable_part(&tracked_cfg, me.subresource),
        hints,
        &mut Vec::new(),
    );
    let mut list = fields::entries(managed);
    fields::remove_paths(&mut merged, &no_longer_applied(&list, me, &cfg_set));

    let live_t = fields::tracked_part(&live_obj, me.subresource, hints);
    let merged_t = fields::tracked_part(&merged, me.subresource, hints);
    let (changed, removed) = fields::object_diff(&live_t, &merged_t, hints);
    let conflicts = conflicts_with_others(&list, me, &changed);
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    for e in list.iter_mut().filter(|e| !me.owns(e)) {
        e.set = e.set.difference(&changed).difference(&removed);
    }
    record_apply(&mut list, me, cfg_set, live_t != merged_t, api_version);
    Ok(Outcome {
        object: merged,
        managed: fields::encode(list),
    })
}

/// The object an apply creates starts from the configuration's apiVersion, kind and
/// metadata.
fn identity_of(config: &Value) -> Value {
    let mut base = Map::new();
    for k in ["apiVersion", "kind", "metadata"] {
        if let Some(v) = config.get(k) {
            base.insert(k.into(), v.clone());
        }
    }
    Value::Object(base)
}

/// Merge only what this endpoint may touch; the rest of the live object stays.
fn mergeable_part(tracked_cfg: &Value, subresource: Option<&str>) -> Value {
    if subresource != Some("status") {
        return tracked_cfg.clone();
    }
    let mut m = Map::new();
    if let Some(s) = tracked_cfg.get("status") {
        m.insert("status".into(), s.clone());
    }
    Value::Object(m)
}

/// What the applier applied last time and leaves out now, unless someone else owns it.
///
/// Like structured-merge-diff's prune: what this manager applied last time, minus what
/// anyone (itself now included) owns, with fields that have owned children counting as
/// owned; the object's identity is never removed.
fn no_longer_applied(list: &[Entry], me: Applier, cfg_set: &FieldSet) -> FieldSet {
    let last_set: FieldSet = list
        .iter()
        .find(|e| me.owns(e))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let others_set = list
        .iter()
        .filter(|e| !me.owns(e))
        .fold(FieldSet::default(), |acc, e| acc.union(&e.set));
    let owned = cfg_set.union(&others_set).with_parents_as_members();
    last_set
        .with_parents_as_members()
        .difference(&owned)
        .without_top_level_members(&["f:metadata", "f:apiVersion", "f:kind"])
}

/// The other managers' fields this apply changes, with the paths of each.
fn conflicts_with_others(
    list: &[Entry],
    me: Applier,
    changed: &FieldSet,
) -> Vec<(Entry, Vec<Vec<String>>)> {
    list.iter()
        .filter(|e| !me.owns(e))
        .filter_map(|e| {
            let c = e.set.intersection(changed);
            (!c.is_empty()).then(|| (e.clone(), c.paths()))
        })
        .collect()
}

/// The applier now owns exactly what it applied; its entry's time moves only when
/// something changed.
fn record_apply(
    list: &mut Vec<Entry>,
    me: Applier,
    cfg_set: FieldSet,
    object_changed: bool,
    api_version: &str,
) {
    match list.iter_mut().find(|e| me.owns(e)) {
        Some(own) => {
            if own.set != cfg_set || object_changed || own.api_version != api_version {
                own.time = Some(meta::now());
            }
            own.set = cfg_set;
            own.api_version = api_version.to_string();
        }
        None => list.push(Entry {
            manager: me.manager.to_string(),
            operation: "Apply".into(),
            api_version: api_version.to_string(),
            time: Some(meta::now()),
            subresource: me.subresource.map(String::from),
            set: cfg_set,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::types::builtin_types;
    use serde_json::json;

    fn cm_type() -> std::sync::Arc<ResourceType> {
        builtin_types()
            .into_iter()
            .find(|t| t.kind == "ConfigMap")
            .unwrap()
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn second_manager_with_other_value_conflicts_unless_forced() {
        let rt = cm_type();
        let hints = Hints::for_type(&rt);
        let a = apply(
            &Value::Null,
            &cm(json!({"x": "1"})),
            &[],
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        let err = apply(
            &a.object,
            &cm(json!({"x": "2"})),
            &a.managed,
            "b",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .err()
        .unwrap();
        assert_eq!(err.code, 409);
        assert_eq!(err.causes()[0].reason, "FieldManagerConflict");
        assert_eq!(err.causes()[0].field, ".data.x");
        let forced = apply(
            &a.object,
            &cm(json!({"x": "2"})),
            &a.managed,
            "b",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            true,
        )
        .unwrap();
        assert_eq!(forced.object["data"]["x"], "2");
        let owners: Vec<String> = fields::entries(&forced.managed)
            .into_iter()
            .map(|e| e.manager)
            .collect();
        assert_eq!(owners, vec!["b".to_string()]);
    }

    #[test]
    fn dropping_one_field_keeps_its_applied_siblings_and_parent() {
        let rt = cm_type();
        let hints = Hints::for_type(&rt);
        let a = apply(
            &Value::Null,
            &cm(json!({"a": "1", "b": "2"})),
            &[],
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        // A parent owned as a whole (as csaupgrade leaves it) must not take its children along.
        let mut managed = a.managed.clone();
        managed[0]["fieldsV1"]["f:data"]["."] = json!({});
        let a2 = apply(
            &a.object,
            &cm(json!({"a": "1"})),
            &managed,
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        assert_eq!(a2.object["data"], json!({"a": "1"}));
        assert_eq!(a2.object["metadata"]["name"], "c");
    }

    #[test]
    fn equal_values_share_ownership() {
        let rt = cm_type();
        let hints = Hints::for_type(&rt);
        let a = apply(
            &Value::Null,
            &cm(json!({"x": "1"})),
            &[],
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        let b = apply(
            &a.object,
            &cm(json!({"x": "1"})),
            &a.managed,
            "b",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        assert_eq!(fields::entries(&b.managed).len(), 2);
    }

    #[test]
    fn field_applied_before_and_omitted_now_is_removed() {
        let rt = cm_type();
        let hints = Hints::for_type(&rt);
        let a = apply(
            &Value::Null,
            &cm(json!({"a": "1", "b": "2"})),
            &[],
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        let a2 = apply(
            &a.object,
            &cm(json!({"a": "1"})),
            &a.managed,
            "a",
            Sub::Main,
            "v1",
            &hints,
            &rt,
            false,
        )
        .unwrap();
        assert_eq!(a2.object["data"], json!({"a": "1"}));
    }
}
