//! Conformance: DELETE options, preconditions, finalizers, propagation and pod grace.

use crate::api_support;

use std::time::Duration;

use api_support::{Api, JSON_PATCH, MERGE};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn delete_with_finalizer_marks_then_finalizer_removal_deletes() {
    let api = Api::start().await;
    api.post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f", "finalizers": ["test.io/hold"]}}))
        .await;
    let rv = api.sim.store().resource_version();
    let r = api.delete(&format!("{CM}/f"), None).await;
    assert_eq!(r.status, 200);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(api.get(&format!("{CM}/f")).await.status, 200);
    let add = api
        .patch(
            &format!("{CM}/f"),
            MERGE,
            json!({"metadata": {"finalizers": ["test.io/hold", "test.io/other"]}}),
        )
        .await;
    assert_eq!(add.status, 422);
    let (_, events, _) = api
        .watch_with(
            &format!("{CM}?watch=true&resourceVersion={rv}"),
            None,
            2,
            Duration::from_secs(2),
            || async {
                let r = api
                .patch(&format!("{CM}/f"), JSON_PATCH, json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": ["test.io/hold"]},
                    {"op": "remove", "path": "/metadata/finalizers"}
                ]))
                .await;
                assert_eq!(r.status, 200);
            },
        )
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["MODIFIED", "DELETED"]);
    assert_eq!(api.get(&format!("{CM}/f")).await.status, 404);
}

#[tokio::test]
async fn delete_with_wrong_uid_or_resource_version_precondition_is_conflict() {
    let api = Api::start().await;
    let c = api.create_configmap("c", json!({})).await.body;
    let r = api
        .delete(
            &format!("{CM}/c"),
            Some(json!({"preconditions": {"uid": "not-the-uid"}})),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["reason"], "Conflict");
    let r = api
        .delete(
            &format!("{CM}/c"),
            Some(json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(api.get(&format!("{CM}/c")).await.status, 200);
    let r = api
        .delete(
            &format!("{CM}/c"),
            Some(json!({"preconditions": {"uid": c["metadata"]["uid"]}})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"], "Success");
    assert_eq!(api.get(&format!("{CM}/c")).await.status, 404);
}

#[tokio::test]
async fn foreground_and_orphan_policies_set_their_finalizers() {
    let api = Api::start().await;
    api.create_configmap("fg", json!({})).await;
    api.create_configmap("or", json!({})).await;
    let fg = api
        .delete(&format!("{CM}/fg?propagationPolicy=Foreground"), None)
        .await;
    assert_eq!(
        fg.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let or = api
        .delete(
            &format!("{CM}/or"),
            Some(
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"}),
            ),
        )
        .await;
    assert_eq!(or.body["metadata"]["finalizers"], json!(["orphan"]));
    assert!(or.body["metadata"]["deletionTimestamp"].is_string());
}

#[tokio::test]
async fn scheduled_pod_delete_sets_deletion_timestamp_plus_grace_and_stays() {
    let api = Api::start().await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 30, "containers": [{"name": "c", "image": "busybox"}]}});
    let created = api.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(created.status, 201);
    assert_eq!(created.body["status"]["phase"], "Pending");
    let r = api
        .delete(
            "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=20",
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 20);
    let ts = chrono::DateTime::parse_from_rfc3339(
        r.body["metadata"]["deletionTimestamp"].as_str().unwrap(),
    )
    .unwrap();
    let ahead = (ts.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_seconds();
    assert!(
        (18..=21).contains(&ahead),
        "deletionTimestamp {ahead}s ahead"
    );
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/p").await.status,
        200
    );
    let gone = api
        .delete(
            "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0",
            None,
        )
        .await;
    assert_eq!(gone.status, 200);
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/p").await.status,
        404
    );
}

#[tokio::test]
async fn store_delete_api_matches_http_semantics() {
    let api = Api::start().await;
    api.create_configmap("c", json!({})).await;
    let store = api.sim.store();
    let last = store
        .delete("v1", "ConfigMap", Some("default"), "c", Default::default())
        .unwrap();
    assert_eq!(last["metadata"]["name"], "c");
    assert!(store.get("v1", "ConfigMap", Some("default"), "c").is_none());
    let err = store
        .delete("v1", "ConfigMap", Some("default"), "c", Default::default())
        .unwrap_err();
    assert_eq!(err.code, 404);
}
