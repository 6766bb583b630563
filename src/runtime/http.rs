//! The HTTP endpoints: `/healthz` and `/readyz` in plain HTTP for the kubelet, and `/metrics` on
//! an address of its own, over HTTPS behind the API server's authentication
//! ([`crate::runtime::metrics_auth`]) unless served insecurely for a local run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_rustls::rustls::ServerConfig;

use crate::runtime::cache_health::CacheHealth;
use crate::runtime::metrics_auth::{Authorizer, Verdict};
use crate::runtime::tls::TlsListener;

/// State shared by the handlers.
pub struct HttpState {
    ready: AtomicBool,
    /// Once the controller runs, readiness is its caches' health.
    caches: OnceLock<CacheHealth>,
    registry: Registry,
}

impl HttpState {
    /// Not ready until [`HttpState::set_ready`] is called.
    pub fn new(registry: Registry) -> Self {
        Self {
            ready: AtomicBool::new(false),
            caches: OnceLock::new(),
            registry,
        }
    }

    /// Marks the operator ready without caches (a standby, ready to take over).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// From now on, ready exactly while every cache has synced and none is stale.
    pub fn follow_caches(&self, caches: CacheHealth) {
        let _ = self.caches.set(caches);
    }

    /// Why `/readyz` fails, or `None` when it answers 200.
    pub fn not_ready(&self) -> Option<String> {
        match self.caches.get() {
            Some(caches) => caches.not_ready(Instant::now()),
            None if self.ready.load(Ordering::Acquire) => None,
            None => Some("not started".to_owned()),
        }
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.not_ready().is_none()
    }
}

/// The router of the kubelet's probes: `/healthz` and `/readyz`.
pub fn health_router(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// The router of `/metrics`, answering only the clients `authorizer` allows when there is one.
pub fn metrics_router(state: Arc<HttpState>, authorizer: Option<Arc<Authorizer>>) -> Router {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .with_state(state);
    match authorizer {
        Some(authorizer) => router.route_layer(axum::middleware::from_fn_with_state(
            authorizer,
            require_review,
        )),
        None => router,
    }
}

/// Serves the request only when the API server allows its bearer token `get` on `/metrics`.
async fn require_review(
    State(authorizer): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    match authorizer.check(request.headers()).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token the API server accepts is required\n",
        )
            .into_response(),
        Ok(Verdict::Forbidden) => (
            StatusCode::FORBIDDEN,
            "this token may not get the non-resource URL /metrics\n",
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(error = %error, "could not review a /metrics client's token");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the token could not be reviewed\n",
            )
                .into_response()
        }
    }
}

async fn readyz(State(state): State<Arc<HttpState>>) -> impl IntoResponse {
    match state.not_ready() {
        None => (StatusCode::OK, "ok".to_owned()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// OpenMetrics to scrapers that ask for it (Prometheus does), the classic text format to the
/// rest (curl, `promtool check metrics`), as the Go client library negotiates.
async fn metrics(
    State(state): State<Arc<HttpState>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let openmetrics = crate::runtime::metrics::encode(&state.registry);
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"));
    if wants_openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            openmetrics,
        )
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            crate::runtime::metrics::openmetrics_to_prometheus_text(&openmetrics),
        )
    }
}

/// Serves `/healthz` and `/readyz` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, health_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Who may read `/metrics`.
pub enum MetricsAccess {
    /// Anyone, in plain HTTP (`--metrics-insecure`, for local runs).
    Insecure,
    /// Over HTTPS with `tls`, the clients `authorizer` allows.
    Authorized {
        /// The TLS configuration, with the serving certificate.
        tls: Arc<ServerConfig>,
        /// Who decides each request.
        authorizer: Arc<Authorizer>,
    },
}

/// Serves `/metrics` on `listener` as `access` says until `shutdown` resolves.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState>,
    access: MetricsAccess,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match access {
        MetricsAccess::Insecure => {
            axum::serve(listener, metrics_router(state, None))
                .with_graceful_shutdown(shutdown)
                .await
        }
        MetricsAccess::Authorized { tls, authorizer } => {
            let router = metrics_router(state, Some(authorizer));
            axum::serve(TlsListener::new(listener, tls)?, router)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_status(state: Arc<HttpState>, path: &str) -> (StatusCode, String) {
        let (status, _, body) = get(state, path, None).await;
        (status, body)
    }

    /// Status, content type and body of `path`, asking for `accept`.
    async fn get(
        state: Arc<HttpState>,
        path: &str,
        accept: Option<&str>,
    ) -> (StatusCode, String, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = health_router(state.clone()).merge(metrics_router(state, None));
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let mut request = reqwest::Client::new().get(format!("http://{addr}{path}"));
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await.unwrap();
        let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.text().await.unwrap();
        server.abort();
        (status, content_type, body)
    }

    #[tokio::test]
    async fn readyz_answers_503_until_the_caches_have_synced() {
        let state = Arc::new(HttpState::new(Registry::default()));
        assert_eq!(
            get_status(state.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            get_status(state.clone(), "/healthz").await.0,
            StatusCode::OK
        );
        state.set_ready();
        assert_eq!(get_status(state, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_endpoint_serves_the_registry() {
        let mut registry = Registry::default();
        let metrics = crate::runtime::metrics::Metrics::default().register(&mut registry);
        metrics.config_writes.inc();
        let (status, body) = get_status(Arc::new(HttpState::new(registry)), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("swarm_operator_config_writes_total 1"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_only_for_scrapers_that_ask_for_it() {
        let state = Arc::new(HttpState::new(Registry::default()));
        let prometheus_accept =
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        let (_, content_type, body) = get(state.clone(), "/metrics", Some(prometheus_accept)).await;
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (_, content_type, body) = get(state, "/metrics", None).await;
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        assert!(!body.contains("# EOF"), "{body}");
    }
}
