//! Per-type list and map semantics: how server-side apply and strategic merge patch treat
//! each list and map, from built-in tables or a CRD's structural schema.

use std::sync::Arc;

use serde_json::Value;

use crate::store::types::ResourceType;

/// How a list merges: replaced whole, as a set of scalars, or as a map keyed by fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// How a strategic merge patch treats a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SmpList {
    Replace,
    MergePrimitives,
    MergeByKey(String),
}

#[derive(Clone)]
enum Source {
    None,
    Builtin,
    Schema(Arc<Value>),
}

/// Per-type knowledge of list and map semantics (built-in tables or a CRD's schema).
/// Paths are field names from the root, with `[]` standing for a list item.
#[derive(Clone)]
pub(crate) struct Hints {
    source: Source,
    /// Whether `.status` belongs to the `/status` subresource.
    pub status_subresource: bool,
}

fn last_is(path: &[String], name: &str) -> bool {
    path.last().is_some_and(|l| l == name)
}

fn builtin_list_type(path: &[String]) -> ListType {
    let n = path.len();
    let Some(last) = path.last().map(String::as_str) else {
        return ListType::Atomic;
    };
    let keys = |ks: &[&str]| ListType::Map(ks.iter().map(|k| k.to_string()).collect());
    if n == 2 && path[0] == "metadata" {
        return match last {
            "finalizers" => ListType::Set,
            "ownerReferences" => keys(&["uid"]),
            _ => ListType::Atomic,
        };
    }
    match last {
        "containers" | "initContainers" | "ephemeralContainers" => keys(&["name"]),
        "env" | "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates" => {
            keys(&["name"])
        }
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "conditions" => keys(&["type"]),
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "ports" if n >= 3 && path[n - 2] == "[]" && path[n - 3].ends_with("ontainers") => {
            keys(&["containerPort", "protocol"])
        }
        "ports" if n == 2 && path[0] == "spec" => keys(&["port", "protocol"]),
        _ => ListType::Atomic,
    }
}

/// Walks a structural schema along `path`.
fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = schema;
    for p in path {
        cur = if p == "[]" {
            cur.get("items")?
        } else if let Some(s) = cur.get("properties").and_then(|ps| ps.get(p.as_str())) {
            s
        } else {
            match cur.get("additionalProperties") {
                Some(s) if s.is_object() => s,
                _ => return None,
            }
        };
    }
    Some(cur)
}

impl Hints {
    /// Hints for objects of `rt`.
    pub(crate) fn for_type(rt: &ResourceType) -> Self {
        let source = match &rt.schema {
            Some(s) => Source::Schema(s.clone()),
            None => Source::Builtin,
        };
        Self {
            source,
            status_subresource: rt.status_subresource,
        }
    }

    /// No knowledge: every list atomic (for `Scale` and other synthetic objects).
    pub(crate) fn none() -> Self {
        Self {
            source: Source::None,
            status_subresource: false,
        }
    }

    /// Server-side apply semantics of the list at `path`.
    pub(crate) fn list_type(&self, path: &[String]) -> ListType {
        if path.first().is_some_and(|p| p == "metadata") {
            return builtin_list_type(path);
        }
        match &self.source {
            Source::None => ListType::Atomic,
            Source::Builtin => builtin_list_type(path),
            Source::Schema(schema) => {
                let Some(s) = schema_at(schema, path) else {
                    return ListType::Atomic;
                };
                match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(
                        s.get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|k| k.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    ),
                    _ => ListType::Atomic,
                }
            }
        }
    }

    /// Whether the map at `path` is replaced whole by apply.
    pub(crate) fn map_atomic(&self, path: &[String]) -> bool {
        if path.first().is_some_and(|p| p == "metadata") {
            return false;
        }
        match &self.source {
            Source::None => false,
            Source::Builtin => last_is(path, "selector") || last_is(path, "nodeSelector"),
            Source::Schema(schema) => schema_at(schema, path).is_some_and(|s| {
                s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
                    || s.get("x-kubernetes-int-or-string").is_some()
            }),
        }
    }

    /// Strategic merge patch semantics of the list at `path` (built-in types only).
    pub(crate) fn smp_list(&self, path: &[String]) -> SmpList {
        match builtin_list_type(path) {
            ListType::Atomic => SmpList::Replace,
            ListType::Set => SmpList::MergePrimitives,
            ListType::Map(keys) => SmpList::MergeByKey(keys[0].clone()),
        }
    }
}
