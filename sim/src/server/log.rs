//! The request log: what `GET /kube-sim/v1/requests` returns, so tests can count API calls.

use std::collections::VecDeque;
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

/// One served request as kept in the log: the few distinct methods and user agents are
/// shared and the time stays binary, so a full log costs about 200 bytes per request.
struct Entry {
    method: axum::http::Method,
    path: Box<str>,
    query: Box<str>,
    user_agent: Arc<str>,
    status: u16,
    time: chrono::DateTime<chrono::Utc>,
}

impl Entry {
    fn record(&self) -> RequestRecord {
        RequestRecord {
            method: self.method.to_string(),
            path: self.path.to_string(),
            query: self.query.to_string(),
            user_agent: self.user_agent.to_string(),
            status: self.status,
            time: self
                .time
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

#[derive(Default)]
struct Inner {
    entries: VecDeque<Entry>,
    /// The user agents seen lately, so each entry holds a shared copy.
    agents: Vec<Arc<str>>,
}

impl Inner {
    fn agent(&mut self, agent: &str) -> Arc<str> {
        if let Some(found) = self.agents.iter().find(|a| ***a == *agent) {
            return found.clone();
        }
        if self.agents.len() >= 32 {
            self.agents.remove(0);
        }
        let shared: Arc<str> = Arc::from(agent);
        self.agents.push(shared.clone());
        shared
    }
}

/// Shared, bounded list of served requests.
#[derive(Clone, Default)]
pub struct RequestLog {
    inner: Arc<Mutex<Inner>>,
}

impl RequestLog {
    /// All recorded requests, oldest first.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.entries.iter().map(Entry::record).collect()
    }

    fn push(
        &self,
        method: axum::http::Method,
        path: &str,
        query: &str,
        user_agent: &str,
        status: u16,
        time: chrono::DateTime<chrono::Utc>,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let user_agent = inner.agent(user_agent);
        if inner.entries.len() >= LOG_LIMIT {
            inner.entries.pop_front();
        }
        inner.entries.push_back(Entry {
            method,
            path: path.into(),
            query: query.into(),
            user_agent,
            status,
            time,
        });
    }
}

/// Middleware recording every request outside `/kube-sim/`.
pub(crate) async fn record(State(log): State<RequestLog>, req: Request, next: Next) -> Response {
    let time = chrono::Utc::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let user_agent = req.headers().get(axum::http::header::USER_AGENT).cloned();
    let response = next.run(req).await;
    if !uri.path().starts_with("/kube-sim/") {
        log.push(
            method,
            uri.path(),
            uri.query().unwrap_or(""),
            user_agent
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
            response.status().as_u16(),
            time,
        );
    }
    response
}
