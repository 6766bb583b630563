//! Conformance: CRDs (establishment, structural validation, pruning, defaults), custom
//! resource creation and Tables.

use crate::api_support;

use api_support::{Api, TABLE_ACCEPT};
use serde_json::json;

#[tokio::test]
async fn created_crd_is_served_at_once_and_reports_established() {
    let api = Api::start().await;
    let r = api.create_widget_crd().await;
    assert_eq!(r.status, 201);
    let conditions = r.body["status"]["conditions"].as_array().unwrap();
    for t in ["Established", "NamesAccepted"] {
        let c = conditions.iter().find(|c| c["type"] == t).unwrap();
        assert_eq!(c["status"], "True", "{t}");
    }
    assert_eq!(r.body["status"]["acceptedNames"]["kind"], "Widget");
    let list = api.get(api.widgets()).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["kind"], "WidgetList");
}

#[tokio::test]
async fn same_custom_resource_twice_is_created_then_already_exists() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let first = api.create_widget("w", json!({"size": 1})).await;
    assert_eq!(first.status, 201);
    assert!(first.body["metadata"]["uid"].as_str().unwrap().len() >= 32);
    assert_eq!(first.body["metadata"]["generation"], 1);
    let second = api.create_widget("w", json!({"size": 1})).await;
    assert_eq!(second.status, 409);
    assert_eq!(second.body["kind"], "Status");
    assert_eq!(second.body["status"], "Failure");
    assert_eq!(second.body["reason"], "AlreadyExists");
    assert_eq!(second.body["details"]["name"], "w");
    assert_eq!(second.body["details"]["group"], "test.io");
}

#[tokio::test]
async fn schema_violations_are_invalid_with_one_cause_each() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let r = api
        .create_widget("bad", json!({"size": 11, "color": "green", "name": "TooLongName", "port": true, "tags": ["a", "a"]}))
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["reason"], "Invalid");
    let causes = r.body["details"]["causes"].as_array().unwrap();
    let by_field = |f: &str| {
        causes
            .iter()
            .filter(|c| c["field"] == f)
            .map(|c| c["reason"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert!(by_field("spec.size").contains(&"FieldValueInvalid".to_string()));
    assert!(by_field("spec.color").contains(&"FieldValueNotSupported".to_string()));
    assert!(by_field("spec.name").contains(&"FieldValueTooLong".to_string()));
    assert!(by_field("spec.port").contains(&"FieldValueTypeInvalid".to_string()));
    assert!(by_field("spec.tags[1]").contains(&"FieldValueDuplicate".to_string()));
    let missing = api.create_widget("missing", json!({})).await;
    assert_eq!(missing.status, 422);
    assert_eq!(missing.body["details"]["causes"][0]["field"], "spec.size");
    assert_eq!(
        missing.body["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );
    assert_eq!(api.get(&format!("{}/bad", api.widgets())).await.status, 404);
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_defaults_filled() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    let r = api
        .create_widget("w", json!({"size": 2, "port": "http", "bogus": 1}))
        .await;
    assert_eq!(r.status, 201);
    assert!(r.body["spec"].get("bogus").is_none());
    assert_eq!(r.body["spec"]["color"], "red");
    assert_eq!(r.body["spec"]["port"], "http");
    let strict = api
        .post(
            &format!("{}?fieldValidation=Strict", api.widgets()),
            json!({"apiVersion": "test.io/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": {"size": 1, "bogus": 1}}),
        )
        .await;
    assert_eq!(strict.status, 400);
    assert!(
        strict.body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.bogus\"")
    );
}

#[tokio::test]
async fn table_has_name_then_printer_columns_with_null_for_missing_paths() {
    let api = Api::start().await;
    api.create_widget_crd().await;
    api.create_widget("w", json!({"size": 3})).await;
    let r = api
        .send("GET", api.widgets(), None, Some(TABLE_ACCEPT), None)
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["kind"], "Table");
    assert_eq!(r.body["apiVersion"], "meta.k8s.io/v1");
    let names: Vec<&str> = r.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["Name", "Size", "Phase", "Age"]);
    let cells = &r.body["rows"][0]["cells"];
    assert_eq!(cells[0], "w");
    assert_eq!(cells[1], 3);
    assert!(
        cells[2].is_null(),
        "missing .status.phase must be null, got {}",
        cells[2]
    );
    assert!(cells[3].as_str().unwrap().ends_with('s'));
    assert_eq!(r.body["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let one = api
        .send(
            "GET",
            &format!("{}/w", api.widgets()),
            None,
            Some(TABLE_ACCEPT),
            None,
        )
        .await;
    assert_eq!(one.body["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn invalid_crd_is_rejected() {
    let api = Api::start().await;
    let mut crd = api_support::widget_crd();
    crd["metadata"]["name"] = json!("wrong.test.io");
    let r = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(r.body["details"]["causes"][0]["field"], "metadata.name");
}
