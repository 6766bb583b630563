//! What kube-sim served to one client: its request log (`GET /kube-sim/v1/requests`, the last
//! 200,000 requests with their user agent and time), counted by verb and resource.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::process::Requests;

/// One entry of kube-sim's request log.
#[derive(Deserialize)]
struct Entry {
    method: String,
    path: String,
    query: String,
    #[serde(rename = "userAgent")]
    user_agent: String,
    /// RFC 3339 in UTC with milliseconds: ordered as text.
    time: String,
}

/// A point in kube-sim's log: the time of the latest request it held.
#[derive(Clone, Debug, Default)]
pub struct Mark(String);

/// Requests of `user_agent` that kube-sim at `url` served after `since`, and a mark of now.
pub async fn since(url: &str, user_agent: &str, since: &Mark) -> Option<(Requests, Mark)> {
    let log: Vec<Entry> = reqwest::get(format!("{url}/kube-sim/v1/requests"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let mut counts = BTreeMap::new();
    for entry in log.iter().filter(|e| e.time > since.0) {
        if entry.user_agent == user_agent {
            *counts.entry(verb_and_resource(entry)).or_default() += 1;
        }
    }
    let latest = log.iter().map(|e| e.time.clone()).max().unwrap_or_default();
    Some((Requests(counts), Mark(latest)))
}

/// The client's verb and the resource of a request, as `swarm_operator_api_requests_total`
/// names them: `get` of one object, `list` of many, `watch`, and the writes.
fn verb_and_resource(entry: &Entry) -> (String, String) {
    // /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or /apis/GROUP/VERSION/namespaces/NS/...
    let parts: Vec<&str> = entry.path.trim_matches('/').split('/').collect();
    let base = if parts.first() == Some(&"api") { 2 } else { 3 };
    let rest = match parts.get(base) {
        Some(&"namespaces") if parts.len() > base + 2 => &parts[base + 2..],
        _ => parts.get(base..).unwrap_or_default(),
    };
    let resource = match rest {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => (*resource).to_owned(),
        [] => String::new(),
    };
    let named = rest.len() >= 2;
    let verb = match entry.method.as_str() {
        _ if entry.query.contains("watch=true") || entry.query.contains("watch=1") => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "PUT" => "update",
        "POST" => "create",
        other => return (other.to_lowercase(), resource),
    };
    (verb.to_owned(), resource)
}
