//! Field sets (the `FieldsV1` format of managedFields), the list and map semantics they
//! follow, and the bookkeeping of Update operations.
//!
//! [`hints`] says how each list and map of a type merges, [`set`] builds and combines field
//! sets, and [`managed`] keeps the managedFields entries; comparisons of whole objects that
//! every update makes are here.

mod hints;
mod managed;
mod set;

use serde_json::Value;

use super::meta;

pub(crate) use hints::{Hints, ListType, SmpList};
pub(crate) use managed::{
    Entry, encode, entries, managed_of, object_diff, object_fields, record_update, set_managed,
    tracked_part,
};
pub(crate) use set::{FieldSet, item_matches, key_pe, remove_paths, render_path};

/// Whether two maps are equal apart from the keys `skip` names.
pub(crate) fn eq_except(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let count = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether two objects are equal apart from resourceVersion and managedFields times.
/// Compares in place: every update runs it on two whole objects.
pub(crate) fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return same_by_copy(a, b);
    };
    let empty = serde_json::Map::new();
    fn metadata<'a>(
        m: &'a serde_json::Map<String, Value>,
        empty: &'a serde_json::Map<String, Value>,
    ) -> Option<&'a serde_json::Map<String, Value>> {
        match m.get("metadata") {
            None => Some(empty),
            Some(Value::Object(md)) => Some(md),
            Some(_) => None,
        }
    }
    let (Some(amd), Some(bmd)) = (metadata(am, &empty), metadata(bm, &empty)) else {
        return same_by_copy(a, b);
    };
    let same_managed = match (amd.get("managedFields"), bmd.get("managedFields")) {
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(x, y)| match (x.as_object(), y.as_object()) {
                        (Some(x), Some(y)) => eq_except(x, y, |k| k == "time"),
                        _ => x == y,
                    })
        }
        (x, y) => x == y,
    };
    same_managed
        && eq_except(am, bm, |k| k == "metadata")
        && eq_except(amd, bmd, |k| k == "resourceVersion" || k == "managedFields")
}

/// [`same_ignoring_times`] for objects that are not maps or have a non-map `metadata`.
fn same_by_copy(a: &Value, b: &Value) -> bool {
    let norm = |v: &Value| {
        let mut v = v.clone();
        let m = meta::meta_mut(&mut v);
        m.remove("resourceVersion");
        if let Some(Value::Array(list)) = m.get_mut("managedFields") {
            for e in list.iter_mut() {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
        v
    };
    norm(a) == norm(b)
}
