//! Conformance: PUT, merge/json/strategic patches, subresources, dryRun.

use crate::api_support;

use api_support::{Api, JSON_PATCH, MERGE, STRATEGIC};
use serde_json::{Value, json};

fn sts(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "main", "image": "busybox:1.36", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox:1.36"}
            ]}}
        }
    })
}

const STS: &str = "/apis/apps/v1/namespaces/default/statefulsets";

#[tokio::test]
async fn put_with_stale_resource_version_is_conflict() {
    let api = Api::start().await;
    let created = api.create_configmap("c", json!({})).await.body;
    let mut first = created.clone();
    first["data"]["k"] = json!("1");
    let ok = api
        .put("/api/v1/namespaces/default/configmaps/c", first)
        .await;
    assert_eq!(ok.status, 200);
    assert_ne!(
        ok.body["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let mut stale = created.clone();
    stale["data"]["k"] = json!("2");
    let r = api
        .put("/api/v1/namespaces/default/configmaps/c", stale)
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["reason"], "Conflict");
    assert!(r.body["message"].as_str().unwrap().contains(
        "the object has been modified; please apply your changes to the latest version and try again"
    ));
}

#[tokio::test]
async fn custom_resource_put_without_resource_version_is_invalid() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let mut w = api.create_widget("w", json!({"size": 1})).await.body;
    w["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    w["spec"]["size"] = json!(2);
    let r = api.put(&format!("{}/w", api.widgets()), w).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
}

#[tokio::test]
async fn strategic_merge_patch_on_custom_resource_is_unsupported_media_type() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    api.create_widget("w", json!({"size": 1})).await;
    let r = api
        .patch(
            &format!("{}/w", api.widgets()),
            STRATEGIC,
            json!({"spec": {"size": 2}}),
        )
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(r.body["reason"], "UnsupportedMediaType");
    assert_eq!(
        api.get(&format!("{}/w", api.widgets())).await.body["spec"]["size"],
        1
    );
}

#[tokio::test]
async fn failed_json_patch_test_is_invalid_and_leaves_object_unchanged() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let before = api.create_widget("w", json!({"size": 1})).await.body;
    let r = api
        .patch(
            &format!("{}/w", api.widgets()),
            JSON_PATCH,
            json!([{"op": "test", "path": "/spec/size", "value": 5}, {"op": "replace", "path": "/spec/size", "value": 7}]),
        )
        .await;
    assert_eq!(r.status, 422);
    let after = api.get(&format!("{}/w", api.widgets())).await.body;
    assert_eq!(after, before);
    let ok = api
        .patch(
            &format!("{}/w", api.widgets()),
            JSON_PATCH,
            json!([{"op": "test", "path": "/spec/size", "value": 1}, {"op": "replace", "path": "/spec/size", "value": 7}]),
        )
        .await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body["spec"]["size"], 7);
}

#[tokio::test]
async fn status_write_keeps_spec_and_generation_while_spec_patch_bumps_generation() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let mut w = api.create_widget("w", json!({"size": 1})).await.body;
    w["spec"]["size"] = json!(9);
    w["status"] = json!({"phase": "Ready"});
    let r = api.put(&format!("{}/w/status", api.widgets()), w).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["spec"]["size"], 1);
    assert_eq!(r.body["status"]["phase"], "Ready");
    assert_eq!(r.body["metadata"]["generation"], 1);
    let main = api
        .patch(
            &format!("{}/w", api.widgets()),
            MERGE,
            json!({"spec": {"size": 2}, "status": {"phase": "Ignored"}}),
        )
        .await;
    assert_eq!(main.status, 200);
    assert_eq!(main.body["metadata"]["generation"], 2);
    assert_eq!(main.body["status"]["phase"], "Ready");
    let label = api
        .patch(
            &format!("{}/w", api.widgets()),
            MERGE,
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(label.body["metadata"]["generation"], 2);
}

#[tokio::test]
async fn scale_subresource_patch_returns_scale_with_new_replicas() {
    let api = Api::start().await;
    assert_eq!(api.post(STS, sts("web")).await.status, 201);
    let r = api
        .patch(
            &format!("{STS}/web/scale"),
            MERGE,
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["kind"], "Scale");
    assert_eq!(r.body["apiVersion"], "autoscaling/v1");
    assert_eq!(r.body["spec"]["replicas"], 3);
    assert_eq!(r.body["status"]["selector"], "app=web");
    let obj = api.get(&format!("{STS}/web")).await.body;
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(obj["metadata"]["generation"], 2);
    let mut stale = r.body.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["spec"]["replicas"] = json!(5);
    assert_eq!(
        api.put(&format!("{STS}/web/scale"), stale).await.status,
        409
    );
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name_and_defaults_are_set() {
    let api = Api::start().await;
    let created = api.post(STS, sts("web")).await.body;
    assert_eq!(created["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(created["spec"]["updateStrategy"]["type"], "RollingUpdate");
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "busybox:1.37", "env": [{"name": "B", "value": "2"}]}
    ]}}}});
    let r = api.patch(&format!("{STS}/web"), STRATEGIC, patch).await;
    assert_eq!(r.status, 200);
    let cs = r.body["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0]["image"], "busybox:1.37");
    assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
    let del = json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}});
    let r = api.patch(&format!("{STS}/web"), STRATEGIC, del).await;
    assert_eq!(
        r.body["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn patch_precondition_and_missing_targets() {
    let api = Api::start().await;
    api.create_configmap("c", json!({})).await;
    let r = api
        .patch(
            "/api/v1/namespaces/default/configmaps/c",
            MERGE,
            json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "y"}}),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        api.patch(
            "/api/v1/namespaces/default/configmaps/none",
            MERGE,
            json!({"data": {}})
        )
        .await
        .status,
        404
    );
    let r = api
        .post(
            "/api/v1/namespaces/nowhere/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["details"]["kind"], "namespaces");
}

#[tokio::test]
async fn dry_run_processes_fully_but_stores_nothing() {
    let api = Api::start().await;
    let rv_before = api.sim.store().resource_version();
    let r = api
        .post(
            "/api/v1/namespaces/default/configmaps?dryRun=All",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["metadata"]["name"], "d");
    assert_eq!(
        api.get("/api/v1/namespaces/default/configmaps/d")
            .await
            .status,
        404
    );
    assert_eq!(api.sim.store().resource_version(), rv_before);
}

#[tokio::test]
async fn generate_name_gets_a_random_suffix_and_recreation_a_new_uid() {
    let api = Api::start().await;
    let r = api
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"generateName": "gen-"}, "apiVersion": "v1", "kind": "ConfigMap"}),
        )
        .await;
    assert_eq!(r.status, 201);
    let name = r.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let uid1 = api.create_configmap("same", json!({})).await.body["metadata"]["uid"].clone();
    api.delete("/api/v1/namespaces/default/configmaps/same", None)
        .await;
    let uid2 = api.create_configmap("same", json!({})).await.body["metadata"]["uid"].clone();
    assert_ne!(uid1, uid2);
}

#[tokio::test]
async fn empty_owner_references_finalizers_labels_and_annotations_are_omitted_like_omitempty() {
    let api = Api::start().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let created = api
        .post(
            path,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": "c", "ownerReferences": [], "finalizers": [],
                    "labels": {}, "annotations": {}
                },
                "data": {"k": "v"}
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let omitted = ["ownerReferences", "finalizers", "labels", "annotations"];
    for field in omitted {
        assert!(
            created.body["metadata"].get(field).is_none(),
            "create returned {field}: {}",
            created.body
        );
    }
    let read = api.get(&format!("{path}/c")).await.body;
    for field in omitted {
        assert!(
            read["metadata"].get(field).is_none(),
            "stored {field}: {read}"
        );
    }

    // An owner set and then cleared by an update disappears as well.
    let owner = api.create_configmap("owner", json!({})).await.body;
    let owned = api
        .patch(
            &format!("{path}/c"),
            MERGE,
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner["metadata"]["uid"]
            }]}}),
        )
        .await;
    assert_eq!(owned.status, 200, "{}", owned.body);
    assert_eq!(
        owned.body["metadata"]["ownerReferences"][0]["name"],
        "owner"
    );
    let mut cleared = owned.body.clone();
    cleared["metadata"]["ownerReferences"] = json!([]);
    let put = api.put(&format!("{path}/c"), cleared).await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert!(
        put.body["metadata"].get("ownerReferences").is_none(),
        "{}",
        put.body
    );
    let read = api.get(&format!("{path}/c")).await.body;
    assert!(read["metadata"].get("ownerReferences").is_none(), "{read}");
}
