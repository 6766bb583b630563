//! Small helpers over `serde_json::Value` objects: metadata access, paths, time.

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value};

/// RFC 3339 timestamp with second precision, the way Kubernetes writes `metav1.Time`.
pub(crate) fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// RFC 3339 timestamp `secs` seconds from now.
pub(crate) fn now_plus(secs: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(secs)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(obj, path).and_then(Value::as_str)
}

pub(crate) fn at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.get(p)?;
    }
    Some(cur)
}

pub(crate) fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"]).unwrap_or("")
}

pub(crate) fn namespace(obj: &Value) -> &str {
    str_at(obj, &["metadata", "namespace"]).unwrap_or("")
}

pub(crate) fn resource_version(obj: &Value) -> &str {
    str_at(obj, &["metadata", "resourceVersion"]).unwrap_or("")
}

pub(crate) fn uid(obj: &Value) -> &str {
    str_at(obj, &["metadata", "uid"]).unwrap_or("")
}

/// The `metadata` map, created when missing.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("object");
    let m = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("metadata object")
}

/// Drops the `metadata` fields kube-apiserver never returns empty: `labels`, `annotations`,
/// `ownerReferences` and `finalizers` are `omitempty` in `ObjectMeta`, so an empty (or null)
/// value written by a client is gone from the stored object, and clients reading
/// `ownerReferences[0]` see a missing field rather than an empty list.
pub(crate) fn drop_empty_metadata(obj: &mut Value) {
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
        let empty = match m.get(field) {
            Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        if empty {
            m.remove(field);
        }
    }
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    at(obj, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    at(obj, &["metadata", "labels"]).and_then(Value::as_object)
}

/// Evaluates a simple JSONPath (`.status.replicas`, `{.spec.x}`, `.status.conditions[?(@.type=="Ready")].status`,
/// `.items[0]`) against `obj`; `None` when a step is missing.
pub(crate) fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut cur = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if !key.is_empty() {
                cur = cur.get(key)?;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur.as_array()?.iter().find(|item| {
                    json_path(item, &format!(".{}", field.trim()))
                        .map(|v| {
                            v.as_str()
                                .map(String::from)
                                .unwrap_or_else(|| v.to_string())
                                == want
                        })
                        .unwrap_or(false)
                })?;
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.as_array()?.get(i)?;
            } else {
                let key = inner.trim_matches(|c| c == '"' || c == '\'');
                cur = cur.get(key)?;
            }
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            cur = cur.get(&rest[..end])?;
            rest = &rest[end..];
        }
    }
    Some(cur)
}

/// Sets a dotted path (`.spec.replicas`), creating maps on the way.
pub(crate) fn set_path(obj: &mut Value, path: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let map = cur.as_object_mut().expect("object");
        if i + 1 == parts.len() {
            map.insert(p.to_string(), value);
            return;
        }
        cur = map
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// DNS-1123 subdomain: what most object names must be.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// DNS-1123 label: what namespace names must be.
pub(crate) fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// Characters kube-apiserver uses for `generateName` suffixes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` plus five random characters.
pub(crate) fn generate_name(prefix: &str) -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes[..5]
        .iter()
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_path_handles_fields_indices_and_filters() {
        let obj = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}
        ]}, "spec": {"jobs": ["a", "b"]}});
        assert_eq!(json_path(&obj, ".spec.jobs[1]"), Some(&json!("b")));
        assert_eq!(
            json_path(&obj, r#".status.conditions[?(@.type=="Degraded")].status"#),
            Some(&json!("False"))
        );
        assert_eq!(json_path(&obj, ".status.missing"), None);
    }

    #[test]
    fn dns_names_are_checked() {
        assert!(is_dns_subdomain("swarmpools.swarm.io"));
        assert!(!is_dns_subdomain("Upper"));
        assert!(!is_dns_label("a.b"));
    }
}
