//! Conformance: list paging, watch semantics, bookmarks, 410 after compaction, initial
//! events, timeouts and metadata-only responses.

use crate::api_support;

use std::time::{Duration, Instant};

use api_support::{Api, MERGE};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn limit_one_over_three_objects_gives_three_pages_with_one_resource_version() {
    let api = Api::start().await;
    for n in ["a", "b", "c"] {
        api.create_configmap(n, json!({})).await;
    }
    let mut names = Vec::new();
    let mut rvs = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let path = if token.is_empty() {
            format!("{CM}?limit=1")
        } else {
            format!("{CM}?limit=1&continue={token}")
        };
        let r = api.get(&path).await;
        assert_eq!(r.status, 200);
        pages += 1;
        rvs.push(
            r.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        for i in r.body["items"].as_array().unwrap() {
            names.push(i["metadata"]["name"].as_str().unwrap().to_string());
        }
        // A write between pages must not change what later pages show.
        if pages == 1 {
            api.create_configmap("d", json!({})).await;
        }
        token = r.body["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, vec!["a", "b", "c"]);
    assert!(rvs.iter().all(|rv| *rv == rvs[0] && !rv.is_empty()));
}

#[tokio::test]
async fn watch_from_list_resource_version_sees_exactly_added_then_deleted() {
    let api = Api::start().await;
    api.create_configmap("before", json!({})).await;
    let rv = api.get(CM).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, events, _) = api
        .watch_with(
            &format!("{CM}?watch=true&resourceVersion={rv}"),
            None,
            3,
            Duration::from_secs(2),
            || async {
                api.create_configmap("x", json!({})).await;
                api.delete(&format!("{CM}/x"), None).await;
            },
        )
        .await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["ADDED", "DELETED"]);
    assert!(
        events
            .iter()
            .all(|e| e["object"]["metadata"]["name"] == "x")
    );
    assert_eq!(
        events[1]["object"]["data"]["k"], "v",
        "DELETED carries the last state"
    );
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_synthetic_added_events() {
    let api = Api::start().await;
    api.create_configmap("a", json!({})).await;
    api.create_configmap("b", json!({})).await;
    let (_, events, _) = api
        .watch(&format!("{CM}?watch=1"), 2, Duration::from_secs(2))
        .await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
    assert!(events.iter().all(|e| e["type"] == "ADDED"));
}

#[tokio::test]
async fn relabelling_out_of_the_selector_is_deleted_and_back_in_is_added() {
    let api = Api::start().await;
    api.create_configmap("x", json!({"app": "a"})).await;
    let rv = api.sim.store().resource_version();
    let (_, events, _) = api
        .watch_with(
            &format!("{CM}?watch=true&labelSelector=app%3Da&resourceVersion={rv}"),
            None,
            3,
            Duration::from_secs(2),
            || async {
                api.patch(
                    &format!("{CM}/x"),
                    MERGE,
                    json!({"metadata": {"labels": {"app": "b"}}}),
                )
                .await;
                api.patch(&format!("{CM}/x"), MERGE, json!({"data": {"k": "changed"}}))
                    .await;
                api.patch(
                    &format!("{CM}/x"),
                    MERGE,
                    json!({"metadata": {"labels": {"app": "a"}}}),
                )
                .await;
            },
        )
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["DELETED", "ADDED"]);
}

#[tokio::test]
async fn watch_from_compacted_resource_version_gets_200_and_one_expired_error_event() {
    let api = Api::start().await;
    api.create_configmap("a", json!({})).await;
    let old = api.sim.store().resource_version();
    api.create_configmap("b", json!({})).await;
    let r = api
        .send("POST", "/kube-sim/v1/compact", None, None, None)
        .await;
    assert_eq!(r.status, 200);
    let (status, events, closed) = api
        .watch(
            &format!("{CM}?watch=true&resourceVersion={}", old - 1),
            5,
            Duration::from_secs(3),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["kind"], "Status");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert!(closed, "the stream ends after the ERROR event");
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let api = Api::start().await;
    api.create_configmap("a", json!({})).await;
    api.create_configmap("b", json!({})).await;
    let (_, events, _) = api
        .watch(
            &format!("{CM}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
            3,
            Duration::from_secs(2),
        )
        .await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["ADDED", "ADDED", "BOOKMARK"]);
    let bookmark = &events[2]["object"];
    assert_eq!(bookmark["kind"], "ConfigMap");
    assert_eq!(bookmark["apiVersion"], "v1");
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(
        !bookmark["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn timeout_seconds_closes_the_stream_cleanly() {
    let api = Api::start().await;
    let started = Instant::now();
    let (status, events, closed) = api
        .watch(
            &format!("{CM}?watch=true&timeoutSeconds=2&resourceVersion=1"),
            10,
            Duration::from_secs(10),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert!(events.is_empty());
    assert!(closed);
    assert!(
        took >= Duration::from_millis(1900),
        "closed too early: {took:?}"
    );
}

#[tokio::test]
async fn metadata_only_list_and_watch_answer_partial_object_metadata() {
    let api = Api::start().await;
    api.create_configmap("a", json!({"x": "y"})).await;
    let accept =
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let r = api.send("GET", CM, None, Some(accept), None).await;
    assert_eq!(r.body["kind"], "PartialObjectMetadataList");
    assert_eq!(r.body["apiVersion"], "meta.k8s.io/v1");
    let item = &r.body["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata");
    assert_eq!(item["metadata"]["labels"]["x"], "y");
    assert!(item.get("data").is_none());
    let accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    let (_, events, _) = api
        .watch_with(
            &format!("{CM}?watch=true"),
            Some(accept),
            1,
            Duration::from_secs(2),
            || async {},
        )
        .await;
    assert_eq!(events[0]["object"]["kind"], "PartialObjectMetadata");
    assert!(events[0]["object"].get("data").is_none());
}

#[tokio::test]
async fn bookmarks_only_when_allowed_and_watch_sees_table_rows() {
    let api = Api::start().await;
    let (_, events, _) = api
        .watch_with(
            &format!("{CM}?watch=true&resourceVersion=1"),
            Some(api_support::TABLE_ACCEPT),
            2,
            Duration::from_secs(2),
            || async {
                api.create_configmap("a", json!({})).await;
                api.create_configmap("b", json!({})).await;
            },
        )
        .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["rows"][0]["cells"][0], "a");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    assert!(events.iter().all(|e| e["type"] != "BOOKMARK"));
}

#[tokio::test]
async fn selectors_filter_lists_and_unknown_field_selectors_are_bad_requests() {
    let api = Api::start().await;
    api.create_configmap("a", json!({"tier": "web"})).await;
    api.create_configmap("b", json!({"tier": "db"})).await;
    api.create_configmap("c", json!({})).await;
    let names = |body: &serde_json::Value| -> Vec<String> {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(
            &api.get(&format!("{CM}?labelSelector=tier%21%3Dweb"))
                .await
                .body
        ),
        vec!["b", "c"]
    );
    assert_eq!(
        names(
            &api.get(&format!("{CM}?labelSelector=tier%20in%20(web,db)"))
                .await
                .body
        ),
        vec!["a", "b"]
    );
    assert_eq!(
        names(&api.get(&format!("{CM}?labelSelector=%21tier")).await.body),
        vec!["c"]
    );
    assert_eq!(
        names(
            &api.get(&format!("{CM}?fieldSelector=metadata.name%3Db"))
                .await
                .body
        ),
        vec!["b"]
    );
    assert_eq!(
        api.get(&format!("{CM}?fieldSelector=data.k%3Dv"))
            .await
            .status,
        400
    );
}
