//! Version conversion between the stored form of an object and the version a client asked
//! for. Custom resources convert with strategy `None` (only apiVersion changes); the two
//! Event APIs share one storage kept in the core/v1 shape.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::types::ResourceType;

/// core/v1 Event field <-> events.k8s.io/v1 Event field.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn is_events_v1(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io"
}

fn rename(obj: &Value, from_core: bool) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(map) = obj.as_object() {
        for (k, v) in map {
            let renamed = RENAMES.iter().find_map(|(core, ev)| {
                if from_core && k == core {
                    Some(*ev)
                } else if !from_core && k == ev {
                    Some(*core)
                } else {
                    None
                }
            });
            out.insert(renamed.unwrap_or(k).to_string(), v.clone());
        }
    }
    out
}

/// The stored object as `rt`'s version presents it.
pub(crate) fn to_served(obj: &Value, rt: &ResourceType) -> Value {
    if is_events_v1(rt) {
        let mut out = rename(obj, true);
        out.insert("apiVersion".into(), json!(rt.api_version()));
        out.insert("kind".into(), json!("Event"));
        return Value::Object(out);
    }
    let av = rt.api_version();
    if obj.get("apiVersion").and_then(Value::as_str) == Some(av.as_str()) {
        return obj.clone();
    }
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(av));
    }
    out
}

/// Like [`to_served`], sharing the object when `rt` is its storage version (no copy).
pub(crate) fn served_shared(obj: &Arc<Value>, rt: &ResourceType) -> Arc<Value> {
    if !is_events_v1(rt)
        && obj.get("apiVersion").and_then(Value::as_str) == Some(rt.api_version().as_str())
    {
        return obj.clone();
    }
    Arc::new(to_served(obj, rt))
}

/// A request body of `rt`'s version in storage form.
pub(crate) fn to_storage(obj: Value, rt: &ResourceType) -> Value {
    if is_events_v1(rt) {
        let mut out = rename(&obj, false);
        out.insert("apiVersion".into(), json!("v1"));
        out.insert("kind".into(), json!("Event"));
        return Value::Object(out);
    }
    let mut obj = obj;
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.storage_api_version()));
    }
    obj
}
