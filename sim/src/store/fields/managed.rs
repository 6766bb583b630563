//! managedFields: the part of an object a manager can own, its parsed entries, and the
//! bookkeeping of Update operations.

use serde_json::{Map, Value, json};

use super::hints::Hints;
use super::set::{FieldSet, diff, to_fields};
use crate::store::meta;

/// The part of an object a write through `subresource` may touch, without the fields
/// server-side apply never tracks (identity, resourceVersion, managedFields...).
pub(crate) fn tracked_part(obj: &Value, subresource: Option<&str>, hints: &Hints) -> Value {
    let Some(map) = obj.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    for (k, v) in map {
        match (k.as_str(), subresource) {
            ("apiVersion" | "kind", _) => {}
            ("status", None) if hints.status_subresource => {}
            ("status", Some("status")) => {
                out.insert(k.clone(), v.clone());
            }
            (_, Some("status")) => {}
            ("metadata", _) => {
                let mut m = v.as_object().cloned().unwrap_or_default();
                // metadata itself is never owned, only what is inside it.
                for f in [
                    "name",
                    "namespace",
                    "uid",
                    "resourceVersion",
                    "generation",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "selfLink",
                    "managedFields",
                    "generateName",
                ] {
                    m.remove(f);
                }
                out.insert(k.clone(), Value::Object(m));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if subresource != Some("status") {
        out.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Value::Object(out)
}

/// Clears the membership of `metadata` itself (it always exists, nobody owns it).
fn unmark_metadata(set: FieldSet) -> FieldSet {
    set.without_top_level_members(&["f:metadata"])
}

/// [`to_fields`] of a whole tracked object.
pub(crate) fn object_fields(v: &Value, hints: &Hints) -> FieldSet {
    unmark_metadata(to_fields(v, hints, &mut Vec::new()))
}

/// [`diff`] of two whole tracked objects.
pub(crate) fn object_diff(old: &Value, new: &Value, hints: &Hints) -> (FieldSet, FieldSet) {
    let (c, r) = diff(old, new, hints, &mut Vec::new());
    (unmark_metadata(c), unmark_metadata(r))
}

/// One managedFields entry, parsed.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub set: FieldSet,
}

impl Entry {
    pub(crate) fn parse(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        Some(Entry {
            manager: s("manager").unwrap_or_default(),
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            set: v
                .get("fieldsV1")
                .map(FieldSet::from_json)
                .unwrap_or_default(),
        })
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_json());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    /// Whether `self` is the same manager identity (manager, operation, subresource).
    pub(crate) fn same_identity(
        &self,
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

/// Parsed managedFields of an object.
pub(crate) fn entries(list: &[Value]) -> Vec<Entry> {
    list.iter().filter_map(Entry::parse).collect()
}

/// Serializes entries in kube-apiserver's order (operation, time, manager, subresource),
/// dropping empty ones.
pub(crate) fn encode(mut entries: Vec<Entry>) -> Vec<Value> {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager, &a.subresource).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.subresource,
        ))
    });
    entries.iter().map(Entry::to_json).collect()
}

/// The managedFields of an object.
pub(crate) fn managed_of(obj: &Value) -> Vec<Value> {
    meta::at(obj, &["metadata", "managedFields"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Sets (or removes, when empty) the managedFields of an object.
pub(crate) fn set_managed(obj: &mut Value, list: Vec<Value>) {
    let m = meta::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// Records an Update operation by `manager`: it takes ownership of what it changed, and
/// nobody keeps owning what it removed.
pub(crate) fn record_update(
    managed: Vec<Value>,
    old: &Value,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    hints: &Hints,
) -> Vec<Value> {
    let old_t = tracked_part(old, subresource, hints);
    let new_t = tracked_part(new, subresource, hints);
    let (changed, removed) = object_diff(&old_t, &new_t, hints);
    let mut list = entries(&managed);
    if changed.is_empty() && removed.is_empty() {
        return encode(list);
    }
    for e in list.iter_mut() {
        if !e.same_identity(manager, "Update", subresource) {
            e.set = e.set.difference(&changed).difference(&removed);
        }
    }
    match list
        .iter_mut()
        .find(|e| e.same_identity(manager, "Update", subresource))
    {
        Some(own) => {
            own.set = own.set.union(&changed).difference(&removed);
            own.api_version = api_version.to_string();
            own.time = Some(meta::now());
        }
        None => list.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: Some(meta::now()),
            subresource: subresource.map(String::from),
            set: changed.difference(&removed),
        }),
    }
    encode(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_takes_changed_fields_from_other_managers() {
        let hints = Hints::none();
        let old = json!({"data": {"a": "1", "b": "2"}});
        let managed = record_update(
            Vec::new(),
            &Value::Null,
            &old,
            "creator",
            None,
            "v1",
            &hints,
        );
        let new = json!({"data": {"a": "9", "b": "2"}});
        let managed = record_update(managed, &old, &new, "editor", None, "v1", &hints);
        let e = entries(&managed);
        let creator = e.iter().find(|e| e.manager == "creator").unwrap();
        let editor = e.iter().find(|e| e.manager == "editor").unwrap();
        assert_eq!(
            creator.set.to_json(),
            json!({"f:data": {".": {}, "f:b": {}}})
        );
        assert_eq!(editor.set.to_json(), json!({"f:data": {"f:a": {}}}));
    }
}
