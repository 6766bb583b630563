//! `/version`, `/api`, `/apis` and the per group-version resource lists (legacy discovery;
//! kubectl falls back to it when the aggregated form is not answered).

use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use super::ApiServer;
use super::authorization;
use super::http::{self, RequestContext};
use crate::store::{ApiError, ResourceType};

/// The Kubernetes version the simulation claims (within kubectl 1.37's skew).
pub(crate) const GIT_VERSION: &str = "v1.36.0";

pub(crate) fn version() -> Response {
    http::json_response(
        200,
        &json!({
            "major": "1",
            "minor": "36",
            "emulationMajor": "1",
            "emulationMinor": "36",
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": "35",
            "gitVersion": GIT_VERSION,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.25.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    )
}

pub(crate) fn api_versions(_api: &ApiServer, _ctx: &RequestContext) -> Response {
    http::json_response(
        200,
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        }),
    )
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first.
pub(crate) fn version_rank(v: &str) -> (u8, i64, i64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse::<i64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<i64>() {
        Ok(n) => (level, major, n),
        Err(_) => (0, 0, 0),
    }
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let mut sorted = versions.to_vec();
    sorted.sort_by(|a, b| version_rank(b).cmp(&version_rank(a)).then(a.cmp(b)));
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": sorted.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(&sorted[0]),
    })
}

fn groups(types: &[Arc<ResourceType>]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in types {
        match out.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, vs)) => {
                if !vs.contains(&t.version) {
                    vs.push(t.version.clone());
                }
            }
            None => out.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    out
}

/// The groups of the store's types and the groups served beside the store.
fn all_groups(api: &ApiServer) -> Vec<(String, Vec<String>)> {
    let mut out = groups(&api.store().resource_types());
    out.push((
        authorization::GROUP.to_string(),
        vec![authorization::VERSION.to_string()],
    ));
    out
}

pub(crate) fn api_groups(api: &ApiServer) -> Response {
    let list: Vec<Value> = all_groups(api)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    http::json_response(
        200,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}),
    )
}

pub(crate) fn api_group(api: &ApiServer, group: &str) -> Response {
    match all_groups(api)
        .iter()
        .find(|(g, _)| g == group && !g.is_empty())
    {
        Some((g, vs)) => {
            let mut doc = group_json(g, vs);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            http::json_response(200, &doc)
        }
        None => http::error_response(&ApiError::path_not_found()),
    }
}

/// The APIResourceList entries of one type: the resource and its subresources.
pub(crate) fn resource_entries(t: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": t.plural,
        "singularName": t.singular,
        "namespaced": t.namespaced,
        "kind": t.kind,
        "verbs": t.verbs(),
    });
    if !t.short_names.is_empty() {
        main["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        main["categories"] = json!(t.categories);
    }
    let mut out = vec![main];
    if t.status_subresource {
        out.push(json!({
            "name": format!("{}/status", t.plural),
            "singularName": "",
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if t.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", t.plural),
            "singularName": "",
            "namespaced": t.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

pub(crate) fn resource_list(api: &ApiServer, group: &str, version: &str) -> Response {
    if (group, version) == (authorization::GROUP, authorization::VERSION) {
        return http::json_response(
            200,
            &json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": format!("{group}/{version}"),
                "resources": authorization::resource_entries(),
            }),
        );
    }
    let types = api.store().resource_types();
    let matching: Vec<&Arc<ResourceType>> = types
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if matching.is_empty() {
        return http::error_response(&ApiError::path_not_found());
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = matching.iter().flat_map(|t| resource_entries(t)).collect();
    http::json_response(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_ga_beta_alpha() {
        let mut vs = vec!["v1alpha1", "v1beta1", "v1", "v2beta1", "v2"];
        vs.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
        assert_eq!(vs, vec!["v2", "v1", "v2beta1", "v1beta1", "v1alpha1"]);
    }
}
