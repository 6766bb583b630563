//! Response shapes other than the plain object: `meta.k8s.io/v1` Tables for kubectl and
//! PartialObjectMetadata for metadata-only clients.

use std::sync::Arc;

use axum::response::Response;
use serde::Serialize;
use serde_json::{Value, json};

use super::http::{self, RequestContext};
use super::printers;
use crate::store::ResourceType;
use crate::store::meta;

/// What representation the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Full,
    Table,
    Metadata,
}

pub(crate) fn mode(accept: &str) -> Mode {
    if accept.contains("as=Table") {
        Mode::Table
    } else if accept.contains("as=PartialObjectMetadata") {
        Mode::Metadata
    } else {
        Mode::Full
    }
}

/// Go's `duration.HumanDuration`, as kube-apiserver renders ages.
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(ts: Option<&str>) -> Value {
    let Some(ts) = ts else {
        return json!("<unknown>");
    };
    match chrono::DateTime::parse_from_rfc3339(ts) {
        Ok(t) => json!(human_duration(
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()
        )),
        Err(_) => json!("<unknown>"),
    }
}

/// Where a cell comes from: a JSONPath, or a computation like kube-apiserver's printers.
pub(crate) enum Source {
    Path(String),
    Computed(fn(&Value) -> Value),
}

/// One table column.
pub(crate) struct Column {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub source: Source,
}

impl Column {
    /// A computed column with the given type and priority.
    pub(crate) fn computed(name: &str, type_: &str, priority: i64, f: fn(&Value) -> Value) -> Self {
        Self {
            name: name.to_string(),
            type_: type_.to_string(),
            format: String::new(),
            description: String::new(),
            priority,
            source: Source::Computed(f),
        }
    }
}

/// The Name column every table starts with.
pub(crate) fn name_column() -> Column {
    Column {
        name: "Name".into(),
        type_: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names".into(),
        priority: 0,
        source: Source::Path(".metadata.name".into()),
    }
}

/// The Age column (rendered server-side, like kube-apiserver does).
pub(crate) fn age_column() -> Column {
    Column {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
        priority: 0,
        source: Source::Path(".metadata.creationTimestamp".into()),
    }
}

/// Age of an RFC 3339 timestamp, as a table cell.
pub(crate) fn age_cell(ts: Option<&str>) -> Value {
    age(ts)
}

fn columns(rt: &ResourceType) -> Vec<Column> {
    if !rt.is_custom() {
        if let Some(cols) = printers::columns(rt) {
            return cols;
        }
        return vec![name_column(), age_column()];
    }
    let mut cols = vec![name_column()];
    if rt.printer_columns.is_empty() {
        cols.push(age_column());
    }
    cols.extend(rt.printer_columns.iter().map(|c| Column {
        name: c.name.clone(),
        type_: c.type_.clone(),
        format: c.format.clone(),
        description: c.description.clone(),
        priority: c.priority,
        source: Source::Path(c.json_path.clone()),
    }));
    cols
}

fn cell(col: &Column, obj: &Value) -> Value {
    let path = match &col.source {
        Source::Computed(f) => return f(obj),
        Source::Path(p) => p,
    };
    let v = meta::json_path(obj, path);
    match (col.type_.as_str(), v) {
        (_, None) | (_, Some(Value::Null)) => Value::Null,
        ("date", Some(Value::String(s))) => age(Some(s)),
        ("string", Some(Value::String(s))) => json!(s),
        ("string", Some(other)) if !other.is_array() && !other.is_object() => {
            json!(other.to_string())
        }
        ("string", Some(other)) => json!(other.to_string()),
        (_, Some(other)) => other.clone(),
    }
}

/// PartialObjectMetadata of an object.
pub(crate) fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn row(obj: &Value, cols: &[Column], include: &str) -> Value {
    let cells: Vec<Value> = cols.iter().map(|c| cell(c, obj)).collect();
    match include {
        "None" => json!({"cells": cells}),
        "Object" => json!({"cells": cells, "object": obj}),
        _ => json!({"cells": cells, "object": partial(obj)}),
    }
}

/// A Table of `items`; `headers` false leaves the column definitions out (later watch
/// events).
pub(crate) fn table(
    rt: &ResourceType,
    items: &[&Value],
    metadata: Value,
    include: &str,
    headers: bool,
) -> Value {
    let cols = columns(rt);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect();
    let rows: Vec<Value> = items.iter().map(|o| row(o, &cols, include)).collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "rows": rows,
    });
    if headers {
        t["columnDefinitions"] = Value::Array(defs);
    }
    t
}

/// The object in the representation `Accept` asked for.
pub(crate) fn render_object(rt: &ResourceType, obj: Value, ctx: &RequestContext) -> Response {
    match mode(&ctx.accept) {
        Mode::Full => http::json_response(200, &obj),
        Mode::Metadata => http::json_response(200, &partial(&obj)),
        Mode::Table => {
            let md = json!({"resourceVersion": meta::resource_version(&obj)});
            let include = ctx.param("includeObject").unwrap_or("Metadata");
            http::json_response(200, &table(rt, &[&obj], md, include, true))
        }
    }
}

/// A `<Kind>List` borrowing its items.
#[derive(Serialize)]
struct List<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<&'a Value>,
}

/// A list in the representation `Accept` asked for.
pub(crate) fn render_list(
    rt: &ResourceType,
    items: &[Arc<Value>],
    metadata: Value,
    ctx: &RequestContext,
) -> Response {
    let items: Vec<&Value> = items.iter().map(Arc::as_ref).collect();
    match mode(&ctx.accept) {
        // Serialized straight from the shared objects: a list copies no object.
        Mode::Full => http::json_response(
            200,
            &List {
                kind: format!("{}List", rt.kind),
                api_version: rt.api_version(),
                metadata,
                items,
            },
        ),
        Mode::Metadata => http::json_response(
            200,
            &json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
                "items": items.iter().map(|o| partial(o)).collect::<Vec<_>>(),
            }),
        ),
        Mode::Table => {
            let include = ctx.param("includeObject").unwrap_or("Metadata");
            http::json_response(200, &table(rt, &items, metadata, include, true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_matches_kubernetes() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
    }
}
