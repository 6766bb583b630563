//! The simulation's inspection endpoints: what each pod mounted, and every request served.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// User agent of the suite's own API reads, so they are never taken for the operator's.
pub const HARNESS_USER_AGENT: &str = "swarm-e2e";

/// One ConfigMap as a pod instance mounted it when it started.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountedConfigMap {
    /// The ConfigMap's resourceVersion when it was read.
    pub resource_version: String,
    /// Its data.
    pub data: BTreeMap<String, String>,
}

/// `GET /kube-sim/v1/mounts` entry: one live pod instance.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMounts {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Pod uid (the instance).
    pub uid: String,
    /// ConfigMaps mounted, by name; absent when an optional one was missing at start.
    pub config_maps: BTreeMap<String, MountedConfigMap>,
}

/// `GET /kube-sim/v1/requests` entry: one HTTP request the simulated API server answered.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Raw query string, if any.
    #[serde(default)]
    pub query: Option<String>,
    /// The User-Agent header, if any.
    #[serde(default)]
    pub user_agent: Option<String>,
    /// Response status code.
    pub status: u16,
    /// When it arrived (RFC 3339).
    #[serde(default)]
    pub time: String,
}

impl RequestRecord {
    /// Whether the operator sent it: the only clients of a test's simulation are kubectl,
    /// the suite's own reads and the operator, so anything else is the operator, whatever
    /// user agent it sets.
    pub fn is_from_operator(&self) -> bool {
        let agent = self.user_agent.as_deref().unwrap_or("");
        !agent.starts_with("kubectl") && !agent.starts_with(HARNESS_USER_AGENT)
    }

    /// Whether it changes state (POST, PUT, PATCH, DELETE).
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }

    /// The resource it addressed, if it is a Kubernetes API resource path.
    pub fn target(&self) -> Option<ApiTarget> {
        ApiTarget::parse(&self.path)
    }

    /// The RBAC verb the request needs (get, list, watch, create, update, patch, delete,
    /// deletecollection).
    pub fn verb(&self) -> String {
        let named = self.target().is_some_and(|t| t.name.is_some());
        let watch = self.query.as_deref().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
        });
        match (self.method.as_str(), named) {
            ("GET", _) if watch => "watch",
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            (other, _) => other,
        }
        .to_string()
    }

    /// One line for failure messages.
    pub fn describe(&self) -> String {
        match &self.query {
            Some(q) if !q.is_empty() => format!(
                "{} {} {}?{} -> {}",
                self.time, self.method, self.path, q, self.status
            ),
            _ => format!(
                "{} {} {} -> {}",
                self.time, self.method, self.path, self.status
            ),
        }
    }
}

/// A parsed Kubernetes API path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiTarget {
    /// API group ("" for the core group).
    pub group: String,
    /// Namespace, for namespaced paths.
    pub namespace: Option<String>,
    /// Resource (plural).
    pub resource: String,
    /// Object name, when the path names one.
    pub name: Option<String>,
    /// Subresource such as `status` or `scale`.
    pub subresource: Option<String>,
}

impl ApiTarget {
    /// Parses `/api/v1/...` and `/apis/<group>/<version>/...` paths; `None` for anything
    /// else (discovery, health, inspection endpoints).
    pub fn parse(path: &str) -> Option<ApiTarget> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] => (String::new(), rest),
            ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, resource, tail @ ..] => {
                (Some(ns.to_string()), [&[*resource], tail].concat())
            }
            _ => (None, rest.to_vec()),
        };
        let own = |i: usize| rest.get(i).map(|s| s.to_string());
        Some(ApiTarget {
            group,
            namespace,
            resource: own(0)?,
            name: own(1),
            subresource: own(2),
        })
    }

    /// `resource` or `resource/subresource`, as RBAC rules name it.
    pub fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// Client for the inspection endpoints of one simulation.
#[derive(Clone)]
pub struct SimInspector {
    base: String,
    http: reqwest::Client,
}

impl SimInspector {
    /// Inspects the simulation serving at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: String, http: reqwest::Client) -> SimInspector {
        SimInspector { base, http }
    }

    /// Every live pod instance and what it mounted.
    pub async fn mounts(&self) -> Vec<PodMounts> {
        self.get_json("/kube-sim/v1/mounts").await
    }

    /// Like [`SimInspector::mounts`], with failures returned rather than fatal.
    pub async fn try_mounts(&self) -> Result<Vec<PodMounts>, String> {
        let url = format!("{}/kube-sim/v1/mounts", self.base);
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        response.json().await.map_err(|e| e.to_string())
    }

    /// Every request served so far, oldest first.
    pub async fn requests(&self) -> Vec<RequestRecord> {
        self.get_json("/kube-sim/v1/requests").await
    }

    /// The operator's requests, fetched without async (for the failure report printed while a
    /// test unwinds); `None` when the simulation cannot be reached.
    pub fn operator_requests_blocking(&self) -> Option<Vec<RequestRecord>> {
        use std::io::{Read, Write};
        let addr = self.base.strip_prefix("http://")?;
        let mut stream = std::net::TcpStream::connect(addr).ok()?;
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .ok()?;
        let request = format!(
            "GET /kube-sim/v1/requests HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: {HARNESS_USER_AGENT}\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (_, body) = response.split_once("\r\n\r\n")?;
        let all: Vec<RequestRecord> = serde_json::from_str(body).ok()?;
        Some(
            all.into_iter()
                .filter(RequestRecord::is_from_operator)
                .collect(),
        )
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let url = format!("{}{path}", self.base);
        let body: Value = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: body is not JSON: {e}"));
        serde_json::from_value(body.clone())
            .unwrap_or_else(|e| panic!("GET {url}: unexpected shape ({e}): {body:.2000}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, query: &str) -> RequestRecord {
        RequestRecord {
            method: method.into(),
            path: path.into(),
            query: Some(query.into()),
            user_agent: None,
            status: 200,
            time: String::new(),
        }
    }

    #[test]
    fn parses_core_and_group_paths() {
        let pod = ApiTarget::parse("/api/v1/namespaces/swarm/pods/swarm-worker-0").unwrap();
        assert_eq!(
            (
                pod.group.as_str(),
                pod.namespace.as_deref(),
                pod.resource.as_str()
            ),
            ("", Some("swarm"), "pods")
        );
        assert_eq!(pod.name.as_deref(), Some("swarm-worker-0"));
        let status =
            ApiTarget::parse("/apis/swarm.io/v1alpha1/namespaces/swarm/swarmpools/p/status")
                .unwrap();
        assert_eq!(status.rbac_resource(), "swarmpools/status");
        let all = ApiTarget::parse("/apis/apps/v1/statefulsets").unwrap();
        assert_eq!((all.namespace, all.name), (None, None));
        assert_eq!(ApiTarget::parse("/apis"), None);
        assert_eq!(ApiTarget::parse("/kube-sim/v1/mounts"), None);
    }

    #[test]
    fn maps_methods_to_rbac_verbs() {
        assert_eq!(
            request("GET", "/api/v1/pods", "watch=true&x=1").verb(),
            "watch"
        );
        assert_eq!(request("GET", "/api/v1/pods", "limit=500").verb(), "list");
        assert_eq!(
            request("GET", "/api/v1/namespaces/a/pods/p", "").verb(),
            "get"
        );
        assert_eq!(
            request("DELETE", "/api/v1/namespaces/a/pods/p", "").verb(),
            "delete"
        );
        assert_eq!(
            request("PATCH", "/api/v1/namespaces/a/configmaps/c", "").verb(),
            "patch"
        );
    }
}
