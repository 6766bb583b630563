//! Conformance: Events are one store behind core/v1 and events.k8s.io/v1; namespaces and
//! the request log.

use crate::api_support;

use api_support::Api;
use serde_json::json;

#[tokio::test]
async fn events_k8s_io_event_is_visible_as_core_event_and_back() {
    let api = Api::start().await;
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "pool.1", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "swarm-operator", "reportingInstance": "swarm-operator-0",
        "action": "Reconcile", "reason": "Balanced", "type": "Normal", "note": "all jobs assigned",
        "regarding": {"kind": "SwarmPool", "name": "pool", "namespace": "default", "apiVersion": "swarm.io/v1alpha1"}
    });
    let r = api
        .post("/apis/events.k8s.io/v1/namespaces/default/events", ev)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["note"], "all jobs assigned");
    let core = api.get("/api/v1/namespaces/default/events/pool.1").await;
    assert_eq!(core.status, 200);
    assert_eq!(core.body["apiVersion"], "v1");
    assert_eq!(core.body["message"], "all jobs assigned");
    assert_eq!(core.body["involvedObject"]["name"], "pool");
    assert_eq!(core.body["reportingComponent"], "swarm-operator");
    let selected = api
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dpool,involvedObject.kind%3DSwarmPool")
        .await;
    assert_eq!(selected.body["items"].as_array().unwrap().len(), 1);
    let back = api
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .await;
    assert_eq!(back.body["items"][0]["regarding"]["kind"], "SwarmPool");
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_content() {
    let api = Api::start().await;
    let r = api
        .post(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["status"]["phase"], "Active");
    api.post(
        "/api/v1/namespaces/team/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    let del = api.delete("/api/v1/namespaces/team", None).await;
    assert_eq!(del.status, 200);
    assert_eq!(
        api.get("/api/v1/namespaces/team/configmaps/c").await.status,
        404
    );
    assert_eq!(api.get("/api/v1/namespaces/team").await.status, 404);
}

#[tokio::test]
async fn request_log_records_method_path_status_and_user_agent() {
    let api = Api::start().await;
    api.send(
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=500",
        None,
        None,
        None,
    )
    .await;
    let log = api.get("/kube-sim/v1/requests").await.body;
    let entry = log
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "/api/v1/namespaces/default/configmaps")
        .unwrap()
        .clone();
    assert_eq!(entry["method"], "GET");
    assert_eq!(entry["query"], "limit=500");
    assert_eq!(entry["status"], 200);
    assert!(entry["time"].is_string());
    assert!(entry.get("userAgent").is_some());
    assert!(
        !log.as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"].as_str().unwrap().starts_with("/kube-sim/"))
    );
}
