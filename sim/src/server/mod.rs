//! The HTTP face of the store: Kubernetes API paths, discovery, OpenAPI stub, and the
//! `/kube-sim/v1` inspection endpoints.

mod authorization;
mod discovery;
mod http;
mod log;
mod openapi;
mod printers;
mod protobuf;
mod resources;
mod table;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::watch as signal;

use crate::store::Store;

pub use log::{RequestLog, RequestRecord};

/// State shared by every handler.
#[derive(Clone)]
pub struct ApiServer {
    store: Store,
    log: RequestLog,
    closing: signal::Receiver<bool>,
}

impl ApiServer {
    /// A server over `store`; open watches end when `closing` turns true.
    pub fn new(store: Store, closing: signal::Receiver<bool>) -> Self {
        Self {
            store,
            log: RequestLog::default(),
            closing,
        }
    }

    /// The request log behind `GET /kube-sim/v1/requests`.
    pub fn request_log(&self) -> RequestLog {
        self.log.clone()
    }

    /// All routes: the Kubernetes API (as a fallback that parses paths itself), the
    /// inspection endpoints, and request logging around everything.
    pub fn router(&self) -> Router {
        let state = Arc::new(self.clone());
        Router::new()
            .route("/kube-sim/v1/requests", get(requests))
            .route("/kube-sim/v1/compact", post(compact))
            .fallback(dispatch)
            .layer(middleware::from_fn_with_state(
                self.log.clone(),
                log::record,
            ))
            .with_state(state)
    }
}

async fn requests(State(api): State<Arc<ApiServer>>) -> Response {
    http::json_response(
        200,
        &serde_json::to_value(api.log.snapshot()).unwrap_or_default(),
    )
}

async fn compact(State(api): State<Arc<ApiServer>>) -> Response {
    api.store.compact();
    http::json_response(
        200,
        &serde_json::json!({"resourceVersion": api.store.resource_version().to_string()}),
    )
}

async fn dispatch(State(api): State<Arc<ApiServer>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return http::error_response(&crate::store::ApiError::bad_request(e.to_string())),
    };
    let ctx = http::RequestContext::new(&parts, body);
    let path = parts.uri.path().trim_end_matches('/').to_string();
    let decoded: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segs: Vec<&str> = decoded.iter().map(String::as_str).collect();
    match segs.as_slice() {
        ["version"] => discovery::version(),
        ["healthz"] | ["livez"] | ["readyz"] => (axum::http::StatusCode::OK, "ok").into_response(),
        ["api"] => discovery::api_versions(&api, &ctx),
        ["apis"] => discovery::api_groups(&api),
        ["api", "v1"] => discovery::resource_list(&api, "", "v1"),
        ["apis", group] => discovery::api_group(&api, group),
        ["apis", group, version] => discovery::resource_list(&api, group, version),
        ["openapi", "v3"] => openapi::root(&api),
        ["openapi", "v3", rest @ ..] => openapi::group_version(&api, rest),
        ["openapi", ..] | ["swagger-2.0.0.pb-v1"] | ["swagger.json"] => {
            http::error_response(&crate::store::ApiError::path_not_found())
        }
        ["api", "v1", rest @ ..] => resources::handle(&api, &ctx, "", "v1", rest).await,
        [
            "apis",
            authorization::GROUP,
            authorization::VERSION,
            rest @ ..,
        ] => authorization::handle(&ctx, rest),
        ["apis", group, version, rest @ ..] => {
            resources::handle(&api, &ctx, group, version, rest).await
        }
        _ => http::error_response(&crate::store::ApiError::path_not_found()),
    }
}

impl ApiServer {
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn closing(&self) -> signal::Receiver<bool> {
        self.closing.clone()
    }
}

/// A streaming body for watches.
pub(crate) fn stream_body<S>(stream: S) -> Body
where
    S: futures::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
{
    Body::from_stream(stream)
}
