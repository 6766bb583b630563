//! Conformance: server-side apply (managedFields, conflicts, force, removal) and Leases.

use crate::api_support;

use api_support::{APPLY, Api};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apply_of_another_managers_field_conflicts_unless_forced() {
    let api = Api::start().await;
    let a = api
        .patch(
            &format!("{CM}/c?fieldManager=a"),
            APPLY,
            cm(json!({"x": "1"})),
        )
        .await;
    assert_eq!(a.status, 201);
    let entry = &a.body["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "a");
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {"f:x": {}}}));
    assert!(entry["time"].is_string());
    let b = api
        .patch(
            &format!("{CM}/c?fieldManager=b"),
            APPLY,
            cm(json!({"x": "2"})),
        )
        .await;
    assert_eq!(b.status, 409);
    assert_eq!(b.body["reason"], "Conflict");
    let cause = &b.body["details"]["causes"][0];
    assert_eq!(cause["reason"], "FieldManagerConflict");
    assert_eq!(cause["field"], ".data.x");
    assert_eq!(api.get(&format!("{CM}/c")).await.body["data"]["x"], "1");
    let forced = api
        .patch(
            &format!("{CM}/c?fieldManager=b&force=true"),
            APPLY,
            cm(json!({"x": "2"})),
        )
        .await;
    assert_eq!(forced.status, 200);
    assert_eq!(forced.body["data"]["x"], "2");
    assert_eq!(
        managers(&forced.body),
        vec![("b".to_string(), "Apply".to_string())]
    );
}

#[tokio::test]
async fn equal_values_share_ownership() {
    let api = Api::start().await;
    api.patch(
        &format!("{CM}/c?fieldManager=a"),
        APPLY,
        cm(json!({"x": "1"})),
    )
    .await;
    let b = api
        .patch(
            &format!("{CM}/c?fieldManager=b"),
            APPLY,
            cm(json!({"x": "1"})),
        )
        .await;
    assert_eq!(b.status, 200);
    assert_eq!(managers(&b.body).len(), 2);
}

#[tokio::test]
async fn field_applied_before_and_omitted_now_is_removed() {
    let api = Api::start().await;
    api.patch(
        &format!("{CM}/c?fieldManager=a"),
        APPLY,
        cm(json!({"a": "1", "b": "2"})),
    )
    .await;
    let r = api
        .patch(
            &format!("{CM}/c?fieldManager=a"),
            APPLY,
            cm(json!({"a": "1"})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["data"], json!({"a": "1"}));
}

#[tokio::test]
async fn field_omitted_but_owned_by_another_manager_stays() {
    let api = Api::start().await;
    api.patch(
        &format!("{CM}/c?fieldManager=a"),
        APPLY,
        cm(json!({"a": "1", "b": "2"})),
    )
    .await;
    api.patch(
        &format!("{CM}/c?fieldManager=b"),
        APPLY,
        cm(json!({"b": "2"})),
    )
    .await;
    let r = api
        .patch(
            &format!("{CM}/c?fieldManager=a"),
            APPLY,
            cm(json!({"a": "1"})),
        )
        .await;
    assert_eq!(r.body["data"], json!({"a": "1", "b": "2"}));
}

#[tokio::test]
async fn apply_without_field_manager_is_invalid() {
    let api = Api::start().await;
    let r = api
        .patch(&format!("{CM}/c"), APPLY, cm(json!({"a": "1"})))
        .await;
    assert_eq!(r.status, 422);
}

#[tokio::test]
async fn unchanged_apply_does_not_bump_resource_version() {
    let api = Api::start().await;
    let first = api
        .patch(
            &format!("{CM}/c?fieldManager=a"),
            APPLY,
            cm(json!({"a": "1"})),
        )
        .await;
    let again = api
        .patch(
            &format!("{CM}/c?fieldManager=a"),
            APPLY,
            cm(json!({"a": "1"})),
        )
        .await;
    assert_eq!(
        first.body["metadata"]["resourceVersion"],
        again.body["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn custom_resource_lists_are_atomic_unless_marked_set() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let w = |spec: Value| json!({"apiVersion": "test.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    let path = format!("{}/w", api.widgets());
    api.patch(
        &format!("{path}?fieldManager=a"),
        APPLY,
        w(json!({"size": 1, "tags": ["x"], "items": ["x"]})),
    )
    .await;
    let b = api
        .patch(
            &format!("{path}?fieldManager=b"),
            APPLY,
            w(json!({"tags": ["y"]})),
        )
        .await;
    assert_eq!(b.status, 200, "{}", b.body);
    assert_eq!(b.body["spec"]["tags"], json!(["x", "y"]));
    let c = api
        .patch(
            &format!("{path}?fieldManager=c"),
            APPLY,
            w(json!({"items": ["y"]})),
        )
        .await;
    assert_eq!(c.status, 409, "atomic list owned by a is a conflict");
}

#[tokio::test]
async fn status_apply_without_metadata_takes_the_name_from_the_url() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    api.create_widget("w", json!({"size": 1})).await;
    let r = api
        .patch(
            &format!("{}/w/status?fieldManager=ctl&force=true", api.widgets()),
            APPLY,
            json!({"apiVersion": "test.io/v1", "kind": "Widget", "status": {"phase": "Ready"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"]["phase"], "Ready");
}

#[tokio::test]
async fn apply_to_status_subresource_tracks_status_only() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    api.create_widget("w", json!({"size": 1})).await;
    let r = api
        .patch(
            &format!("{}/w/status?fieldManager=ctl&force=true", api.widgets()),
            APPLY,
            json!({"apiVersion": "test.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 5}, "status": {"phase": "Ready"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"]["phase"], "Ready");
    assert_eq!(r.body["spec"]["size"], 1);
    let entry = r.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "ctl")
        .unwrap()
        .clone();
    assert_eq!(entry["subresource"], "status");
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

fn lease(holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
}

#[tokio::test]
async fn second_lease_create_is_already_exists() {
    let api = Api::start().await;
    assert_eq!(api.post(LEASES, lease("a")).await.status, 201);
    let r = api.post(LEASES, lease("b")).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["reason"], "AlreadyExists");
}

#[tokio::test]
async fn non_forced_apply_of_another_managers_holder_is_conflict() {
    let api = Api::start().await;
    let a = api
        .patch(
            &format!("{LEASES}/leader?fieldManager=a"),
            APPLY,
            lease("a"),
        )
        .await;
    assert_eq!(a.status, 201);
    let b = api
        .patch(
            &format!("{LEASES}/leader?fieldManager=b"),
            APPLY,
            lease("b"),
        )
        .await;
    assert_eq!(b.status, 409);
    assert_eq!(
        b.body["details"]["causes"][0]["field"],
        ".spec.holderIdentity"
    );
    let got = api.get(&format!("{LEASES}/leader")).await;
    assert_eq!(got.body["spec"]["holderIdentity"], "a");
}

#[tokio::test]
async fn apply_with_a_resource_version_is_a_precondition_on_update_and_ignored_on_create() {
    // As kube-apiserver 1.37 answers: an apply that creates ignores metadata.resourceVersion;
    // an apply to an existing object with a stale one is a 409 Conflict, even when forced.
    let api = Api::start().await;
    let mut with_rv = cm(json!({"x": "1"}));
    with_rv["metadata"]["resourceVersion"] = json!("12345");
    let created = api
        .patch(&format!("{CM}/c?fieldManager=a&force=true"), APPLY, with_rv)
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let current = created.body["metadata"]["resourceVersion"].clone();

    let mut stale = cm(json!({"x": "2"}));
    stale["metadata"]["resourceVersion"] = json!("1");
    let refused = api
        .patch(&format!("{CM}/c?fieldManager=a&force=true"), APPLY, stale)
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["reason"], "Conflict");
    assert_eq!(api.get(&format!("{CM}/c")).await.body["data"]["x"], "1");

    let mut fresh = cm(json!({"x": "3"}));
    fresh["metadata"]["resourceVersion"] = current;
    let applied = api
        .patch(&format!("{CM}/c?fieldManager=a&force=true"), APPLY, fresh)
        .await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_eq!(applied.body["data"]["x"], "3");
}
