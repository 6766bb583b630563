//! Handlers of resource paths: get, list, create, replace, patch, delete, deletecollection,
//! and the `/status` and `/scale` subresources.

use std::sync::Arc;

use axum::http::Method;
use axum::response::Response;
use serde_json::{Value, json};

use super::ApiServer;
use super::http::{self, RequestContext};
use super::{table, watch};
use crate::store::{
    ApiError, DeleteOptions, FieldSelector, FieldValidation, LabelSelector, PatchKind,
    ResourceType, ScaleUpdate, Sub, WriteOptions,
};

/// A parsed resource path.
struct Target<'a> {
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
    watch_path: bool,
}

fn parse<'a>(group: &str, rest: &'a [&'a str]) -> Option<Target<'a>> {
    let (watch_path, rest) = match rest.first() {
        Some(&"watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let namespace_object = group.is_empty()
        && rest.len() == 3
        && rest[0] == "namespaces"
        && matches!(rest[2], "status" | "finalize");
    if rest.len() >= 3 && rest[0] == "namespaces" && !namespace_object {
        if rest.len() > 5 {
            return None;
        }
        Some(Target {
            namespace: Some(rest[1]),
            plural: rest[2],
            name: rest.get(3).copied(),
            sub: rest.get(4).copied(),
            watch_path,
        })
    } else {
        if rest.is_empty() || rest.len() > 3 {
            return None;
        }
        Some(Target {
            namespace: None,
            plural: rest[0],
            name: rest.get(1).copied(),
            sub: rest.get(2).copied(),
            watch_path,
        })
    }
}

/// Serves one request on a resource path below `/api/v1` or `/apis/{group}/{version}`.
pub(crate) async fn handle(
    api: &ApiServer,
    ctx: &RequestContext,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Response {
    match handle_inner(api, ctx, group, version, rest).await {
        Ok(r) => r,
        Err(e) => http::error_response(&e),
    }
}

async fn handle_inner(
    api: &ApiServer,
    ctx: &RequestContext,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response, ApiError> {
    let target = parse(group, rest).ok_or_else(ApiError::path_not_found)?;
    let rt = api
        .store()
        .lock()
        .registry()
        .by_resource(group, version, target.plural)
        .ok_or_else(ApiError::path_not_found)?;
    if target.namespace.is_some() && !rt.namespaced {
        return Err(ApiError::path_not_found());
    }
    let ns = target.namespace.unwrap_or("");
    match (&ctx.method, target.name, target.sub) {
        (&Method::GET, None, None) => {
            if target.watch_path || ctx.flag("watch") {
                watch::serve(api, &rt, target.namespace, ctx)
            } else {
                list(api, &rt, target.namespace, ctx)
            }
        }
        (&Method::GET, Some(name), None | Some("status")) => {
            if rt.namespaced && target.namespace.is_none() {
                return Err(ApiError::path_not_found());
            }
            check_sub(&rt, target.sub)?;
            let obj = api.store().lock().get(&rt, ns, name)?;
            Ok(table::render_object(&rt, obj, ctx))
        }
        (&Method::GET, Some(name), Some("scale")) => {
            check_sub(&rt, target.sub)?;
            let scale = api.store().lock().get_scale(&rt, ns, name)?;
            Ok(http::json_response(200, &scale))
        }
        (&Method::POST, None, None) => create(api, &rt, ns, ctx),
        (&Method::PUT, Some(name), sub) => {
            check_sub(&rt, sub)?;
            replace(api, &rt, ns, name, sub, ctx)
        }
        (&Method::PATCH, Some(name), sub) => {
            check_sub(&rt, sub)?;
            patch(api, &rt, ns, name, sub, ctx)
        }
        (&Method::DELETE, Some(name), None) => delete(api, &rt, ns, name, ctx),
        (&Method::DELETE, None, None) => delete_collection(api, &rt, target.namespace, ctx),
        (_, _, Some(s)) if !matches!(s, "status" | "scale") => Err(ApiError::path_not_found()),
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            ctx.method
        ))),
    }
}

fn check_sub(rt: &ResourceType, sub: Option<&str>) -> Result<(), ApiError> {
    match sub {
        None => Ok(()),
        Some("status") if rt.status_subresource => Ok(()),
        Some("scale") if rt.scale.is_some() => Ok(()),
        _ => Err(ApiError::path_not_found()),
    }
}

fn write_options(ctx: &RequestContext) -> Result<WriteOptions, ApiError> {
    let field_validation = match ctx.param("fieldValidation") {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: \"{other}\", supported values: \"Ignore\", \"Warn\", \"Strict\""
            )));
        }
    };
    Ok(WriteOptions {
        manager: ctx.manager(),
        dry_run: ctx.dry_run()?,
        field_validation,
        allow_unconditional: false,
        force: ctx.flag("force"),
    })
}

pub(crate) fn selectors(
    rt: &ResourceType,
    ctx: &RequestContext,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(ctx.param("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse(
        ctx.param("fieldSelector").unwrap_or(""),
        &rt.selectable_fields,
        &rt.kind,
    )?;
    Ok((labels, fields))
}

fn list(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rt, ctx)?;
    let limit = match ctx.param("limit") {
        Some(l) if !l.is_empty() => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        _ => None,
    };
    let cont = ctx.param("continue").filter(|c| !c.is_empty());
    let page = api
        .store()
        .lock()
        .list_page(rt, ns, &labels, &fields, limit, cont)?;
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(r) = page.remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    Ok(table::render_list(rt, &page.items, metadata, ctx))
}

fn create(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: &str,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let body = ctx.body_value()?;
    let opts = write_options(ctx)?;
    let result = api.store().lock().create(rt, ns, body, &opts)?;
    Ok(http::json_with_warnings(
        201,
        &result.object,
        &result.warnings,
    ))
}

fn sub_of(sub: Option<&str>) -> Sub {
    match sub {
        Some("status") => Sub::Status,
        Some("scale") => Sub::Scale,
        _ => Sub::Main,
    }
}

fn replace(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    sub: Option<&str>,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let body = ctx.body_value()?;
    let opts = write_options(ctx)?;
    let mut state = api.store().lock();
    let result = match sub_of(sub) {
        Sub::Scale => state.write_scale(rt, ns, name, ScaleUpdate::Replace(&body), &opts)?,
        s => state.replace(rt, ns, name, body, &opts, s)?,
    };
    Ok(http::json_with_warnings(
        200,
        &result.object,
        &result.warnings,
    ))
}

fn patch(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    sub: Option<&str>,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let kind = PatchKind::from_content_type(&ctx.content_type)
        .ok_or_else(|| ApiError::unsupported_media_type(&ctx.content_type))?;
    let body = if kind == PatchKind::Apply {
        if ctx.body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        serde_yaml::from_slice::<Value>(&ctx.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice::<Value>(&ctx.body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })?
    };
    let mut opts = write_options(ctx)?;
    if kind == PatchKind::Apply {
        opts.manager = ctx.param("fieldManager").unwrap_or("").to_string();
    } else if ctx.param("force").is_some() {
        return Err(ApiError::bad_request(
            "force is only allowed for apply patches",
        ));
    }
    let mut state = api.store().lock();
    let result = match sub_of(sub) {
        Sub::Scale => state.write_scale(rt, ns, name, ScaleUpdate::Patch(kind, &body), &opts)?,
        s => state.patch(rt, ns, name, kind, &body, &opts, s)?,
    };
    let code = if result.created { 201 } else { 200 };
    Ok(http::json_with_warnings(
        code,
        &result.object,
        &result.warnings,
    ))
}

/// DeleteOptions from the body and the query (the query wins, like kube-apiserver).
fn delete_options(ctx: &RequestContext) -> Result<DeleteOptions, ApiError> {
    let mut opts = DeleteOptions::default();
    if !ctx.body.is_empty() {
        let body: Value = serde_json::from_slice(&ctx.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        opts.grace_period_seconds = body.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.propagation_policy = body
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(String::from);
        if let (None, Some(orphan)) = (
            &opts.propagation_policy,
            body.get("orphanDependents").and_then(Value::as_bool),
        ) {
            opts.propagation_policy = Some(if orphan { "Orphan" } else { "Background" }.into());
        }
        if let Some(p) = body.get("preconditions") {
            opts.precondition_uid = p.get("uid").and_then(Value::as_str).map(String::from);
            opts.precondition_resource_version = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(String::from);
        }
    }
    if let Some(g) = ctx.param("gracePeriodSeconds") {
        opts.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    if let Some(p) = ctx.param("propagationPolicy") {
        opts.propagation_policy = Some(p.to_string());
    } else if let Some(o) = ctx.param("orphanDependents") {
        opts.propagation_policy = Some(if o == "true" { "Orphan" } else { "Background" }.into());
    }
    Ok(opts)
}

fn dry_run_of_body(ctx: &RequestContext) -> bool {
    serde_json::from_slice::<Value>(&ctx.body)
        .ok()
        .and_then(|b| {
            b.get("dryRun")
                .and_then(Value::as_array)
                .map(|a| !a.is_empty())
        })
        .unwrap_or(false)
}

fn delete(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let opts = delete_options(ctx)?;
    let dry_run = ctx.dry_run()? || dry_run_of_body(ctx);
    let (obj, removed) = api.store().lock().delete(rt, ns, name, &opts, dry_run)?;
    if removed && !rt.is_custom() {
        let uid = obj["metadata"]["uid"].clone();
        return Ok(http::json_response(
            200,
            &json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": success_details(rt, name, uid),
            }),
        ));
    }
    Ok(http::json_response(200, &obj))
}

fn success_details(rt: &ResourceType, name: &str, uid: Value) -> Value {
    let mut d = json!({"name": name, "kind": rt.plural, "uid": uid});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

fn delete_collection(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rt, ctx)?;
    let opts = delete_options(ctx)?;
    let dry_run = ctx.dry_run()?;
    let mut state = api.store().lock();
    let items: Vec<Value> = state
        .list_all(rt, ns)
        .into_iter()
        .filter(|o| labels.matches(o) && fields.matches(o))
        .collect();
    let mut deleted = Vec::new();
    for item in items {
        let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ins = item["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Ok((obj, _)) = state.delete(rt, &ins, &name, &opts, dry_run) {
            deleted.push(obj);
        }
    }
    let rv = state.rv();
    drop(state);
    Ok(http::json_response(
        200,
        &json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": deleted,
        }),
    ))
}
