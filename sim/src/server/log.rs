//! The request log: what `GET /kube-sim/v1/requests` returns, so tests can count API calls.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde::Serialize;

/// How many requests the log keeps (oldest dropped first).
const LOG_LIMIT: usize = 200_000;

/// One served HTTP request.
#[derive(Clone, Debug, Serialize)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// `User-Agent` header.
    #[serde(rename = "userAgent")]
    pub user_agent: String,
    /// HTTP status of the response (for watches: of the response head).
    pub status: u16,
    /// When the request arrived, RFC 3339 with milliseconds.
    pub time: String,
}

/// Shared, bounded list of served requests.
#[derive(Clone, Default)]
pub struct RequestLog {
    inner: Arc<Mutex<Vec<RequestRecord>>>,
}

impl RequestLog {
    /// All recorded requests, oldest first.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn push(&self, record: RequestRecord) {
        let mut list = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= LOG_LIMIT {
            list.remove(0);
        }
        list.push(record);
    }
}

/// Middleware recording every request outside `/kube-sim/`.
pub(crate) async fn record(State(log): State<RequestLog>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let user_agent = req
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let response = next.run(req).await;
    if !path.starts_with("/kube-sim/") {
        log.push(RequestRecord {
            method,
            path,
            query,
            user_agent,
            status: response.status().as_u16(),
            time,
        });
    }
    response
}
