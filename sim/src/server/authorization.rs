//! `authorization.k8s.io/v1`: access and rules reviews. kube-sim has no authorization, so
//! every review allows, as kube-apiserver's `AlwaysAllow` authorizer answers them.

use axum::http::Method;
use axum::response::Response;
use serde_json::{Value, json};

use super::http::{self, RequestContext};
use crate::store::ApiError;

pub(crate) const GROUP: &str = "authorization.k8s.io";
pub(crate) const VERSION: &str = "v1";

/// (plural, kind, namespaced) of the review resources.
const REVIEWS: [(&str, &str, bool); 4] = [
    (
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        true,
    ),
    ("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
    ("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
    ("subjectaccessreviews", "SubjectAccessReview", false),
];

/// The APIResourceList entries of the group: create is the only verb.
pub(crate) fn resource_entries() -> Vec<Value> {
    REVIEWS
        .iter()
        .map(|(plural, kind, namespaced)| {
            json!({
                "name": plural,
                "singularName": kind.to_lowercase(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create"],
            })
        })
        .collect()
}

/// Serves a path below `/apis/authorization.k8s.io/v1`.
pub(crate) fn handle(ctx: &RequestContext, rest: &[&str]) -> Response {
    match review(ctx, rest) {
        Ok(r) => r,
        Err(e) => http::error_response(&e),
    }
}

fn review(ctx: &RequestContext, rest: &[&str]) -> Result<Response, ApiError> {
    let (namespace, plural) = match rest {
        [plural] => (None, *plural),
        ["namespaces", ns, plural] => (Some(*ns), *plural),
        _ => return Err(ApiError::path_not_found()),
    };
    let &(_, kind, _) = REVIEWS
        .iter()
        .find(|(p, _, namespaced)| *p == plural && *namespaced == namespace.is_some())
        .ok_or_else(ApiError::path_not_found)?;
    if ctx.method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            ctx.method
        )));
    }
    let mut body = ctx.body_value()?;
    if !body.is_object() {
        return Err(ApiError::bad_request(format!("a {kind} must be an object")));
    }
    if let Some(ns) = namespace {
        let spec_ns = body["spec"]["resourceAttributes"]["namespace"].as_str();
        if spec_ns.is_some_and(|s| s != ns) {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {ns}"
            )));
        }
    }
    body["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
    body["kind"] = json!(kind);
    if !body["metadata"].is_object() {
        body["metadata"] = json!({});
    }
    body["metadata"]["creationTimestamp"] = Value::Null;
    body["status"] = if kind == "SelfSubjectRulesReview" {
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        })
    } else {
        json!({"allowed": true})
    };
    Ok(http::json_response(201, &body))
}
