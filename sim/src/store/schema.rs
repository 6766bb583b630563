//! Structural schemas of custom resources: pruning of unknown fields, defaulting, and
//! validation with kube-apiserver's messages.

use serde_json::{Map, Value, json};

use super::error::Cause;

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn is_embedded(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Standard ObjectMeta fields kept by pruning.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Removes fields the schema does not know; returns their paths.
pub(crate) fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(map) = obj.as_object_mut() {
        if let Some(Value::Object(m)) = map.get_mut("metadata") {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if !OBJECT_META.contains(&k.as_str()) {
                    m.remove(&k);
                    unknown.push(format!("metadata.{k}"));
                }
            }
        }
        prune_map(schema, map, "", &mut unknown, true);
    }
    unknown
}

fn prune_map(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
    root: bool,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keep_all = preserves_unknown(schema);
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        if (root || is_embedded(schema)) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
        {
            continue;
        }
        let child_path = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let child_schema = props.and_then(|p| p.get(&k)).or(match additional {
            Some(a) if a.is_object() => Some(a),
            _ => None,
        });
        match child_schema {
            Some(cs) => {
                if let Some(v) = map.get_mut(&k) {
                    prune_value(cs, v, &child_path, unknown);
                }
            }
            None => {
                let allowed = keep_all || additional.and_then(Value::as_bool) == Some(true);
                if !allowed {
                    map.remove(&k);
                    unknown.push(child_path);
                }
            }
        }
    }
}

fn prune_value(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let structured =
                schema.get("properties").is_some() || schema.get("additionalProperties").is_some();
            if structured || !preserves_unknown(schema) {
                prune_map(schema, m, path, unknown, false);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default` values of absent fields, top-down.
pub(crate) fn default(schema: &Value, obj: &mut Value) {
    match obj {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    // A null in a non-nullable field is dropped (then defaulted, if it has a
                    // default); nullable fields keep their null.
                    let nullable = ps.get("nullable").and_then(Value::as_bool) == Some(true);
                    if !nullable && map.get(k).is_some_and(Value::is_null) {
                        map.remove(k);
                    }
                    if !map.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        default(ps, child);
                    }
                }
            }
            if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let props = schema.get("properties").and_then(Value::as_object);
                for (k, v) in map.iter_mut() {
                    if props.is_none_or(|p| !p.contains_key(k)) {
                        default(ap, v);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                items.iter_mut().for_each(|i| default(is, i));
            }
        }
        _ => {}
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validates an object against its schema; every violation is one cause.
pub(crate) fn validate(schema: &Value, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(map) = obj.as_object() {
        let stripped: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut root_schema = schema.clone();
        if let Some(req) = root_schema
            .get_mut("required")
            .and_then(Value::as_array_mut)
        {
            req.retain(|r| !matches!(r.as_str(), Some("apiVersion" | "kind" | "metadata")));
        }
        check(&root_schema, &Value::Object(stripped), "", &mut causes);
    }
    causes
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Where a checked value sits: its path for child paths, and the field its causes name
/// (`<root>` for the object itself).
struct At<'a> {
    path: &'a str,
    field: String,
}

impl<'a> At<'a> {
    fn new(path: &'a str) -> Self {
        let field = if path.is_empty() {
            "<root>".to_string()
        } else {
            path.to_string()
        };
        Self { path, field }
    }

    /// `<field> in body <msg>`, as kube-apiserver words schema violations.
    fn in_body(&self, msg: &str) -> String {
        format!("{} in body {msg}", self.field)
    }

    /// The path of the property `key` below this value.
    fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

/// The `max*`/`min*` bounds on the number of items or properties of a list or object, with
/// kube-apiserver's messages; `bounds` is (max keyword, min keyword, what is counted).
fn check_count(
    schema: &Value,
    (max_key, min_key, counted): (&str, &str, &str),
    len: usize,
    at: &At,
    causes: &mut Vec<Cause>,
) {
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && len as u64 > max
    {
        causes.push(Cause::new(
            "FieldValueTooMany",
            &at.field,
            format!("Too many: {len}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && (len as u64) < min
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            &at.field,
            format!(
                "Invalid value: {len}: {}",
                at.in_body(&format!("should have at least {min} {counted}"))
            ),
        ));
    }
}

/// Checks `v` at `path` against `schema`, recursing into lists and objects.
fn check(schema: &Value, v: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = At::new(path);
    if v.is_null() {
        check_null(schema, &at, causes);
        return;
    }
    // A value of the wrong type gets no further checks.
    if !check_type(schema, v, &at, causes) {
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        let supported = options.iter().map(show).collect::<Vec<_>>().join(", ");
        causes.push(Cause::new(
            "FieldValueNotSupported",
            &at.field,
            format!(
                "Unsupported value: {}: supported values: {supported}",
                show(v)
            ),
        ));
    }
    match v {
        Value::Number(_) => check_number(schema, v, &at, causes),
        Value::String(s) => check_string(schema, v, s, &at, causes),
        Value::Array(items) => check_array(schema, items, &at, causes),
        Value::Object(map) => check_object(schema, map, &at, causes),
        _ => {}
    }
}

/// A null is valid only where the schema is `nullable` or names no type.
fn check_null(schema: &Value, at: &At, causes: &mut Vec<Cause>) {
    if schema.get("nullable").and_then(Value::as_bool) != Some(true) && schema.get("type").is_some()
    {
        let t = schema["type"].as_str().unwrap_or("");
        causes.push(Cause::new(
            "FieldValueTypeInvalid",
            &at.field,
            format!(
                "Invalid value: \"null\": {}",
                at.in_body(&format!("must be of type {t}: \"null\""))
            ),
        ));
    }
}

/// Whether `v` has the schema's type (an integer is a number; int-or-string takes either);
/// records the cause when not.
fn check_type(schema: &Value, v: &Value, at: &At, causes: &mut Vec<Cause>) -> bool {
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let (ok, expected) = if int_or_string {
        let ok = matches!(type_name(v), "integer" | "string");
        (ok, "integer,string")
    } else if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        (actual == t || (t == "number" && actual == "integer"), t)
    } else {
        (true, "")
    };
    if !ok {
        causes.push(Cause::new(
            "FieldValueTypeInvalid",
            &at.field,
            format!(
                "Invalid value: {}: {}",
                show(v),
                at.in_body(&format!("must be of type {expected}: {:?}", type_name(v)))
            ),
        ));
    }
    ok
}

/// `minimum` and `maximum`, exclusive or not.
fn check_number(schema: &Value, v: &Value, at: &At, causes: &mut Vec<Cause>) {
    let n = number(v).unwrap_or(0.0);
    let excl_min = schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
    let excl_max = schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
    if let Some(min) = schema.get("minimum").and_then(number)
        && (n < min || (excl_min && n == min))
    {
        let rel = if excl_min {
            "greater than"
        } else {
            "greater than or equal to"
        };
        causes.push(Cause::new(
            "FieldValueInvalid",
            &at.field,
            format!(
                "Invalid value: {v}: {}",
                at.in_body(&format!("should be {rel} {}", schema["minimum"]))
            ),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(number)
        && (n > max || (excl_max && n == max))
    {
        let rel = if excl_max {
            "less than"
        } else {
            "less than or equal to"
        };
        causes.push(Cause::new(
            "FieldValueInvalid",
            &at.field,
            format!(
                "Invalid value: {v}: {}",
                at.in_body(&format!("should be {rel} {}", schema["maximum"]))
            ),
        ));
    }
}

/// `maxLength`, `minLength` (in characters) and `pattern`.
fn check_string(schema: &Value, v: &Value, s: &str, at: &At, causes: &mut Vec<Cause>) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        causes.push(Cause::new(
            "FieldValueTooLong",
            &at.field,
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            &at.field,
            format!(
                "Invalid value: {}: {}",
                show(v),
                at.in_body(&format!("should be at least {min} chars long"))
            ),
        ));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str)
        && let Ok(re) = regex::Regex::new(p)
        && !re.is_match(s)
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            &at.field,
            format!(
                "Invalid value: {}: {}",
                show(v),
                at.in_body(&format!("should match '{p}'"))
            ),
        ));
    }
}

/// Item counts, uniqueness of sets and of list-map keys, then every item.
fn check_array(schema: &Value, items: &[Value], at: &At, causes: &mut Vec<Cause>) {
    let bounds = ("maxItems", "minItems", "items");
    check_count(schema, bounds, items.len(), at, causes);
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let unique = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true);
    if list_type == Some("set") || unique {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                causes.push(Cause::new(
                    "FieldValueDuplicate",
                    format!("{}[{i}]", at.field),
                    format!("Duplicate value: {}", show(item)),
                ));
            }
        }
    }
    if list_type == Some("map") {
        check_map_keys(schema, items, at, causes);
    }
    if let Some(is) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(is, item, &format!("{}[{i}]", at.path), causes);
        }
    }
}

/// No two items of a list-map may share their `x-kubernetes-list-map-keys` values.
fn check_map_keys(schema: &Value, items: &[Value], at: &At, causes: &mut Vec<Cause>) {
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let same = |o: &Value| keys.iter().all(|k| o.get(k) == item.get(k));
        if items[..i].iter().any(same) {
            let key: Map<String, Value> = keys
                .iter()
                .filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("{}[{i}]", at.field),
                format!("Duplicate value: {}", json!(key)),
            ));
        }
    }
}

/// Required properties, property counts, then every property the schema describes.
fn check_object(schema: &Value, map: &Map<String, Value>, at: &At, causes: &mut Vec<Cause>) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                causes.push(Cause::new(
                    "FieldValueRequired",
                    at.child(r),
                    "Required value",
                ));
            }
        }
    }
    let bounds = ("maxProperties", "minProperties", "properties");
    check_count(schema, bounds, map.len(), at, causes);
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, cv) in map {
        if let Some(ps) = props.and_then(|p| p.get(k)).or(additional) {
            check(ps, cv, &at.child(k), causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["jobs"], "properties": {
            "jobs": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string", "minLength": 1}},
            "port": {"x-kubernetes-int-or-string": true},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            "replicas": {"type": "integer", "minimum": 0}
        }}}})
    }

    #[test]
    fn set_list_duplicates_are_reported_with_index() {
        let causes = validate(&schema(), &json!({"spec": {"jobs": ["x", "y", "x"]}}));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.jobs[2]");
        assert_eq!(causes[0].reason, "FieldValueDuplicate");
    }

    #[test]
    fn int_or_string_accepts_both_and_rejects_others() {
        assert!(validate(&schema(), &json!({"spec": {"jobs": [], "port": 8080}})).is_empty());
        assert!(validate(&schema(), &json!({"spec": {"jobs": [], "port": "http"}})).is_empty());
        assert_eq!(
            validate(&schema(), &json!({"spec": {"jobs": [], "port": true}})).len(),
            1
        );
    }

    #[test]
    fn prune_drops_unknown_and_default_fills_absent() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "spec": {"jobs": [], "bogus": 1}});
        assert_eq!(prune(&schema(), &mut obj), vec!["spec.bogus".to_string()]);
        default(&schema(), &mut obj);
        assert_eq!(obj["spec"]["mode"], "a");
    }

    #[test]
    fn non_nullable_nulls_are_dropped_or_defaulted_and_nullable_ones_kept() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "mode": {"type": "string", "default": "a"},
            "other": {"type": "string"},
            "keep": {"type": "string", "nullable": true, "default": "x"}
        }}}});
        let mut obj = json!({"spec": {"mode": null, "other": null, "keep": null}});
        default(&schema, &mut obj);
        assert_eq!(obj["spec"], json!({"mode": "a", "keep": null}));
        assert!(validate(&schema, &obj).is_empty());
    }

    #[test]
    fn required_type_enum_and_bounds_are_checked() {
        let causes = validate(&schema(), &json!({"spec": {"mode": "c", "replicas": -1}}));
        let reasons: Vec<&str> = causes.iter().map(|c| c.reason.as_str()).collect();
        assert!(reasons.contains(&"FieldValueRequired"));
        assert!(reasons.contains(&"FieldValueNotSupported"));
        assert!(reasons.contains(&"FieldValueInvalid"));
    }
}
