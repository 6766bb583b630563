//! Raw-HTTP helpers for the API conformance tests: a fresh simulation per test and small
//! request wrappers that return (status, JSON body).

use std::time::Duration;

use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};

pub const JSON: &str = "application/json";
pub const MERGE: &str = "application/merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";
pub const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// A running simulation and an HTTP client for it.
pub struct Api {
    pub sim: Sim,
    pub http: reqwest::Client,
    pub base: String,
}

/// Status and parsed body of a response.
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
}

impl Api {
    pub async fn start() -> Api {
        let sim = Sim::start(SimConfig {
            time_scale: 0.01,
            ..SimConfig::default()
        })
        .await
        .expect("sim starts");
        let base = sim.url();
        Api {
            sim,
            http: reqwest::Client::new(),
            base,
        }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(ct) = content_type {
            req = req.header("Content-Type", ct);
        }
        if let Some(a) = accept {
            req = req.header("Accept", a);
        }
        if let Some(b) = body {
            req = req.body(serde_json::to_vec(&b).unwrap());
        }
        let resp = req.send().await.expect("request sent");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = resp.bytes().await.expect("body read");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None, None, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send("POST", path, Some(JSON), None, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.send("PUT", path, Some(JSON), None, Some(body)).await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: Value) -> Reply {
        self.send("PATCH", path, Some(content_type), None, Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, body: Option<Value>) -> Reply {
        self.send("DELETE", path, Some(JSON), None, body).await
    }

    /// Reads watch events until `count` arrived, the stream ended, or `limit` passed.
    pub async fn watch(
        &self,
        path: &str,
        count: usize,
        limit: Duration,
    ) -> (u16, Vec<Value>, bool) {
        self.watch_with(path, None, count, limit, || async {}).await
    }

    /// Like [`Api::watch`], running `during` once the response head arrived. Returns the
    /// status, the events, and whether the server closed the stream.
    pub async fn watch_with<F, Fut>(
        &self,
        path: &str,
        accept: Option<&str>,
        count: usize,
        limit: Duration,
        during: F,
    ) -> (u16, Vec<Value>, bool)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut req = self.http.get(format!("{}{}", self.base, path));
        if let Some(a) = accept {
            req = req.header("Accept", a);
        }
        let mut resp = req.send().await.expect("watch starts");
        let status = resp.status().as_u16();
        during().await;
        let mut events = Vec::new();
        let mut buf = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        let mut closed = false;
        while events.len() < count {
            match tokio::time::timeout_at(deadline, resp.chunk()).await {
                Err(_) => break,
                Ok(Ok(Some(chunk))) => {
                    buf.extend_from_slice(&chunk);
                    while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=pos).collect();
                        if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                            events.push(v);
                        }
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
            }
        }
        (status, events, closed)
    }

    /// Creates the `widgets.test.io` CRD used by the custom-resource tests.
    pub async fn create_widget_crd(&self) -> Reply {
        self.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            widget_crd(),
        )
        .await
    }

    pub fn widgets(&self) -> &'static str {
        "/apis/test.io/v1/namespaces/default/widgets"
    }

    pub async fn create_widget(&self, name: &str, spec: Value) -> Reply {
        self.post(
            self.widgets(),
            json!({"apiVersion": "test.io/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
        )
        .await
    }

    pub async fn create_configmap(&self, name: &str, labels: Value) -> Reply {
        self.post(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
        )
        .await
    }
}

/// A CRD exercising the structural-schema features the tests check.
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.io"},
        "spec": {
            "group": "test.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
                },
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 0, "maximum": 10},
                                "replicas": {"type": "integer"},
                                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
                                "port": {"x-kubernetes-int-or-string": true},
                                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                                "items": {"type": "array", "items": {"type": "string"}},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "phase": {"type": "string"},
                                "replicas": {"type": "integer"}
                            }
                        }
                    }
                }}
            }]
        }
    })
}
