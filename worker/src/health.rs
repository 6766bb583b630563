//! `/readyz` and `/healthz` for the kubelet: readiness, not Lease renewals, proves to the
//! operator that a worker is live, and the probe never reaches the API server.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;

/// Serves `GET /readyz` (`200` while `ready()` says so, else `503`) and `GET /healthz` (`200`
/// while the process serves) on `listener`, until the task is dropped or the listener fails.
pub async fn serve(
    listener: TcpListener,
    ready: impl Fn() -> bool + Clone + Send + Sync + 'static,
) {
    let readyz = move || {
        let ready = ready();
        async move {
            if ready {
                (StatusCode::OK, "ready\n")
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
    };
    let app = Router::new()
        .route("/readyz", get(readyz))
        .route("/healthz", get(|| async { (StatusCode::OK, "ok\n") }));
    if let Err(error) = axum::serve(listener, app).await {
        tracing::warn!(%error, "the readiness endpoint failed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn readyz_answers_what_ready_says_and_healthz_always_200_on_a_free_port() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let flag = Arc::new(AtomicBool::new(false));
        let ready = flag.clone();
        let server = tokio::spawn(serve(listener, move || ready.load(Ordering::SeqCst)));
        let status =
            async |path: &str| reqwest::get(format!("{url}{path}")).await.unwrap().status();
        assert_eq!(status("/readyz").await, 503);
        assert_eq!(status("/healthz").await, 200);
        flag.store(true, Ordering::SeqCst);
        assert_eq!(status("/readyz").await, 200);
        assert_eq!(status("/metrics").await, 404);
        server.abort();
    }
}
