//! `/openapi/v3`: an index and one document per group-version.
//!
//! Paths carry a `patch` operation with `x-kubernetes-group-version-kind` and a
//! `fieldValidation` parameter: what kubectl checks before it sends server-side field
//! validation. They have no request body, so kubectl computes strategic merge patches from
//! its compiled-in types rather than from the document. `components.schemas` hold the
//! schemas of custom resources (what `kubectl explain` reads); built-in kinds have none.

mod crd_schemas;
mod meta_schemas;

use std::sync::Arc;

use axum::response::Response;
use serde_json::{Map, Value, json};

use super::ApiServer;
use super::discovery::GIT_VERSION;
use super::http;
use crate::store::{ApiError, ResourceType};

fn gv_path(t: &ResourceType) -> String {
    if t.group.is_empty() {
        format!("api/{}", t.version)
    } else {
        format!("apis/{}/{}", t.group, t.version)
    }
}

fn param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn document(types: &[&Arc<ResourceType>]) -> Value {
    let mut paths = Map::new();
    for t in types {
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let prefix = format!("/{}", gv_path(t));
        let item = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let op = |action: &str| {
            json!({
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [param("dryRun"), param("fieldManager"), param("fieldValidation"), param("force")],
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            item,
            json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": component_schemas(types)},
    })
}

/// The schemas of the custom resources among `types`, and the metadata they refer to.
fn component_schemas(types: &[&Arc<ResourceType>]) -> Map<String, Value> {
    let mut schemas = Map::new();
    for t in types {
        if let Some(schema) = t.schema.as_deref().filter(|_| t.is_custom()) {
            schemas.extend(crd_schemas::schemas(t, schema));
        }
    }
    if !schemas.is_empty() {
        schemas.extend(meta_schemas::schemas());
    }
    schemas
}

fn hash(v: &Value) -> String {
    let text = v.to_string();
    let h = text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    format!("{h:016X}")
}

fn by_gv(api: &ApiServer) -> Vec<(String, Vec<Arc<ResourceType>>)> {
    let mut out: Vec<(String, Vec<Arc<ResourceType>>)> = Vec::new();
    for t in api.store().resource_types() {
        let key = gv_path(&t);
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ts)) => ts.push(t),
            None => out.push((key, vec![t])),
        }
    }
    out
}

pub(crate) fn root(api: &ApiServer) -> Response {
    let mut paths = Map::new();
    for (gv, types) in by_gv(api) {
        let refs: Vec<&Arc<ResourceType>> = types.iter().collect();
        let doc = document(&refs);
        paths.insert(
            gv.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", hash(&doc))}),
        );
    }
    http::json_response(200, &json!({"paths": paths}))
}

pub(crate) fn group_version(api: &ApiServer, rest: &[&str]) -> Response {
    let key = rest.join("/");
    match by_gv(api).into_iter().find(|(gv, _)| *gv == key) {
        Some((_, types)) => {
            let refs: Vec<&Arc<ResourceType>> = types.iter().collect();
            http::json_response(200, &document(&refs))
        }
        None => http::error_response(&ApiError::path_not_found()),
    }
}
