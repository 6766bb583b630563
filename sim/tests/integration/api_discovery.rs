//! Conformance: discovery, /version, `/openapi/v3` and the authorization reviews.

use crate::api_support;

use api_support::Api;
use serde_json::Value;

const AGGREGATED_ACCEPT: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

#[tokio::test]
async fn apis_with_kubectl_accept_header_is_plain_json_group_list() {
    let api = Api::start().await;
    let r = api
        .send("GET", "/apis", None, Some(AGGREGATED_ACCEPT), None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.body["kind"], "APIGroupList");
    let names: Vec<&str> = r.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "apps",
        "coordination.k8s.io",
        "events.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(names.contains(&g), "{g} missing from {names:?}");
    }
    let core = api
        .send("GET", "/api", None, Some(AGGREGATED_ACCEPT), None)
        .await;
    assert_eq!(core.content_type, "application/json");
    assert_eq!(core.body["kind"], "APIVersions");
    assert_eq!(core.body["versions"][0], "v1");
}

#[tokio::test]
async fn version_claims_a_release_within_kubectl_skew() {
    let api = Api::start().await;
    let r = api.get("/version").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["major"], "1");
    assert_eq!(r.body["minor"], "36");
    assert!(r.body["gitVersion"].as_str().unwrap().starts_with("v1.36."));
}

fn resource<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
}

#[tokio::test]
async fn resource_lists_name_subresources_short_names_and_verbs() {
    let api = Api::start().await;
    let apps = api.get("/apis/apps/v1").await;
    assert_eq!(apps.body["kind"], "APIResourceList");
    let sts = resource(&apps.body, "statefulsets").unwrap();
    assert_eq!(sts["kind"], "StatefulSet");
    assert_eq!(sts["namespaced"], true);
    assert_eq!(sts["singularName"], "statefulset");
    assert_eq!(sts["shortNames"][0], "sts");
    assert!(
        sts["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "watch")
    );
    let scale = resource(&apps.body, "statefulsets/scale").unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["group"], "autoscaling");
    assert!(resource(&apps.body, "statefulsets/status").is_some());
    let core = api.get("/api/v1").await;
    assert_eq!(resource(&core.body, "pods").unwrap()["shortNames"][0], "po");
    assert_eq!(
        resource(&core.body, "namespaces").unwrap()["namespaced"],
        false
    );
    assert_eq!(api.get("/apis/nothing.io/v1").await.status, 404);
}

#[tokio::test]
async fn discovery_follows_crd_creation_and_deletion_at_once() {
    let api = Api::start().await;
    assert_eq!(api.get("/apis/test.io/v1").await.status, 404);
    assert_eq!(api.create_widget_crd().await.status, 201);
    let list = api.get("/apis/test.io/v1").await;
    assert_eq!(list.status, 200);
    assert!(resource(&list.body, "widgets").is_some());
    assert!(resource(&list.body, "widgets/status").is_some());
    assert!(resource(&list.body, "widgets/scale").is_some());
    let groups = api.get("/apis").await;
    assert!(
        groups.body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "test.io")
    );
    let del = api
        .delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.io",
            None,
        )
        .await;
    assert_eq!(del.status, 200);
    assert_eq!(api.get("/apis/test.io/v1").await.status, 404);
    assert_eq!(
        api.get("/apis/test.io/v1/namespaces/default/widgets")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn openapi_v3_stub_lists_group_versions_with_field_validation_on_patch() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let root = api.get("/openapi/v3").await;
    assert_eq!(root.status, 200);
    let url = root.body["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(root.body["paths"]["apis/test.io/v1"].is_object());
    let doc = api.get(&url).await;
    assert_eq!(doc.status, 200);
    let path =
        &doc.body["paths"]["/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"]["patch"];
    assert_eq!(
        path["x-kubernetes-group-version-kind"]["kind"],
        "StatefulSet"
    );
    assert!(
        path["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation")
    );
    assert_eq!(api.get("/openapi/v2").await.status, 404);
    assert_eq!(api.get("/swagger-2.0.0.pb-v1").await.status, 404);
}

#[tokio::test]
async fn authorization_reviews_are_discovered_and_always_allow() {
    let api = Api::start().await;
    let groups = api.get("/apis").await;
    assert!(
        groups.body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "authorization.k8s.io"),
        "{}",
        groups.body
    );
    let list = api.get("/apis/authorization.k8s.io/v1").await;
    let review = resource(&list.body, "selfsubjectaccessreviews").expect("listed");
    assert_eq!(review["verbs"], serde_json::json!(["create"]));
    assert_eq!(
        resource(&list.body, "localsubjectaccessreviews").unwrap()["namespaced"],
        true
    );

    let spec = serde_json::json!({"resourceAttributes": {"verb": "delete", "resource": "pods"}});
    let r = api
        .post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["status"]["allowed"], true);
    assert_eq!(r.body["spec"], spec);

    let r = api
        .post(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            serde_json::json!({"spec": {"namespace": "default"}}),
        )
        .await;
    assert_eq!(r.body["kind"], "SelfSubjectRulesReview");
    assert_eq!(
        r.body["status"]["resourceRules"],
        serde_json::json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])
    );

    // A local review names its namespace in the path, and its attributes must agree.
    let r = api
        .post(
            "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews",
            serde_json::json!({"spec": {"user": "bob", "resourceAttributes": {"namespace": "other", "verb": "get"}}}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = api
        .get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        .await;
    assert_eq!(r.status, 405);
}
