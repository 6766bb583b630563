//! Conformance of the controllers running inside the simulation (cases 20-23 of the sim
//! spec, plus Background/Orphan garbage collection, Parallel pod management and the mounts
//! endpoint). Every check goes through the HTTP API as a client would.
//!
//! This module is the harness; the checks are grouped by the controller they are about:
//! [`statefulset`], [`kubelet`] (pods starting, mounting and ending), [`garbage_collection`]
//! and [`deployment`] (the ReplicaSet and Deployment controllers).

mod deployment;
mod garbage_collection;
mod kubelet;
mod statefulset;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube_sim::{Sim, SimConfig};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Generous upper bound for anything to happen; never a performance goal.
const PATIENCE: Duration = Duration::from_secs(20);

struct Harness {
    sim: Sim,
    http: Client,
}

impl Harness {
    /// A simulation where a 30 s grace period takes 0.3 s and pods start after `ready_delay`
    /// simulated seconds.
    async fn start(time_scale: f64, ready_delay: Duration) -> Self {
        let config = SimConfig {
            time_scale,
            pod_ready_delay: ready_delay,
            ..SimConfig::default()
        };
        let sim = Sim::start(config).await.expect("simulation starts");
        Self {
            sim,
            http: Client::new(),
        }
    }

    async fn fast() -> Self {
        Self::start(0.01, Duration::from_secs(1)).await
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.request_as(method, path, body, "application/json")
            .await
    }

    async fn request_as(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        content_type: &str,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.sim.url()))
            .header("Accept", "application/json");
        if let Some(body) = body {
            req = req
                .header("Content-Type", content_type)
                .body(body.to_string());
        }
        let resp = req.send().await.expect("request is answered");
        let status = resp.status();
        let text = resp.text().await.expect("body is readable");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let (status, body) = self.request(Method::GET, path, None).await;
        match status {
            StatusCode::OK => Some(body),
            StatusCode::NOT_FOUND => None,
            other => panic!("GET {path}: unexpected {other}: {body}"),
        }
    }

    async fn create(&self, path: &str, obj: Value) -> Value {
        let (status, body) = self.request(Method::POST, path, Some(obj)).await;
        assert_eq!(status, StatusCode::CREATED, "POST {path}: {body}");
        body
    }

    async fn delete(&self, path: &str, options: Value) -> Value {
        let (status, body) = self.request(Method::DELETE, path, Some(options)).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::ACCEPTED,
            "DELETE {path}: {status} {body}"
        );
        body
    }

    async fn pod(&self, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await
    }

    async fn pods(&self) -> Vec<Value> {
        let list = self
            .get("/api/v1/namespaces/default/pods")
            .await
            .expect("pods are listable");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    async fn statefulset(&self, name: &str) -> Option<Value> {
        self.get(&format!(
            "/apis/apps/v1/namespaces/default/statefulsets/{name}"
        ))
        .await
    }

    async fn mounts(&self) -> Vec<Value> {
        let body = self
            .get("/kube-sim/v1/mounts")
            .await
            .expect("mounts endpoint is served");
        body.as_array().cloned().expect("mounts is a JSON list")
    }

    /// Polls `check` until it returns `Some`, panicking with `what` after [`PATIENCE`].
    async fn eventually<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts a watch on `path` from `resource_version`, collecting every event.
    async fn watch(&self, path: &str, resource_version: &str) -> Watch {
        let url = format!(
            "{}{path}?watch=true&resourceVersion={resource_version}",
            self.sim.url()
        );
        let resp = self.http.get(url).send().await.expect("watch starts");
        assert_eq!(resp.status(), StatusCode::OK);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut stream = resp.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                        sink.lock().unwrap().push(event);
                    }
                }
            }
        });
        Watch { events, task }
    }

    async fn list_resource_version(&self, path: &str) -> String {
        let list = self.get(path).await.expect("list is served");
        list["metadata"]["resourceVersion"]
            .as_str()
            .expect("a list has a resourceVersion")
            .to_string()
    }
}

struct Watch {
    events: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn statefulset(name: &str, replicas: u32, policy: Option<&str>) -> Value {
    let mut sts = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}]}
            }
        }
    });
    if let Some(policy) = policy {
        sts["spec"]["podManagementPolicy"] = json!(policy);
    }
    sts
}

const STS_PATH: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const PODS_PATH: &str = "/api/v1/namespaces/default/pods";

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn uid_of(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn is_terminating(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// Position of the first event matching `predicate`.
fn first(events: &[Value], predicate: impl Fn(&str, &Value) -> bool) -> Option<usize> {
    events
        .iter()
        .position(|e| predicate(e["type"].as_str().unwrap_or_default(), &e["object"]))
}

async fn wait_all_ready(h: &Harness, set: &str, replicas: usize) {
    h.eventually(
        &format!("{set} to have {replicas} ready replicas"),
        || async {
            let sts = h.statefulset(set).await?;
            (sts["status"]["readyReplicas"] == json!(replicas)
                && sts["status"]["availableReplicas"] == json!(replicas)
                && sts["status"]["replicas"] == json!(replicas))
            .then_some(())
        },
    )
    .await;
}
