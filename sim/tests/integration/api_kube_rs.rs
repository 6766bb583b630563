//! kube-rs 5.0 against the simulation: the paths the operator relies on (server-side apply,
//! watchers with bookmarks and streaming lists, metadata watchers, the event Recorder,
//! deletes with preconditions, json-patch finalizers).

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, Config};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

async fn start() -> (Sim, Client) {
    let sim = Sim::start(SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let config = Config::new(sim.url().parse().unwrap());
    let client = Client::try_from(config).unwrap();
    (sim, client)
}

fn cm(name: &str, value: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": value}})
}

#[tokio::test]
async fn kube_rs_server_side_apply_conflicts_then_forces() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .patch("c", &PatchParams::apply("one"), &Patch::Apply(cm("c", "1")))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["key"], "1");
    let err = api
        .patch("c", &PatchParams::apply("two"), &Patch::Apply(cm("c", "2")))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let forced = api
        .patch(
            "c",
            &PatchParams::apply("two").force(),
            &Patch::Apply(cm("c", "2")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["key"], "2");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["two".to_string()]);
}

#[tokio::test]
async fn kube_rs_watcher_lists_then_follows_changes() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("a", "1")).unwrap(),
    )
    .await
    .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        match ev {
            watcher::Event::Init => seen.push("init".to_string()),
            watcher::Event::InitApply(o) => {
                seen.push(format!("init-apply {}", o.metadata.name.unwrap()))
            }
            watcher::Event::InitDone => {
                seen.push("init-done".to_string());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, vec!["init", "init-apply a", "init-done"]);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("b", "1")).unwrap(),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut live = Vec::new();
    while live.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::Apply(o) => live.push(format!("apply {}", o.metadata.name.unwrap())),
            watcher::Event::Delete(o) => live.push(format!("delete {}", o.metadata.name.unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(live, vec!["apply b", "delete a"]);
}

#[tokio::test]
async fn kube_rs_streaming_list_watcher_gets_initial_events_end() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("a", "1")).unwrap(),
    )
    .await
    .unwrap();
    let mut stream = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(o) => names.push(o.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, vec!["a".to_string()]);
}

#[tokio::test]
async fn kube_rs_metadata_watcher_receives_partial_metadata() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let meta_api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client, "default");
    let mut stream = watcher(meta_api, watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitDone =
            tokio::time::timeout(Duration::from_secs(5), stream.try_next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
        {
            break;
        }
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("m", "1")).unwrap(),
    )
    .await
    .unwrap();
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Apply(meta) => {
            assert_eq!(meta.metadata.name.as_deref(), Some("m"));
            assert_eq!(meta.types.unwrap().kind, "PartialObjectMetadata");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_recorder_creates_then_patches_an_event_series() {
    let (_sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("t", "1")).unwrap(),
        )
        .await
        .unwrap();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: target.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: target.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "swarm-operator".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "NoStatefulSet".into(),
        note: Some("no StatefulSet matches".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=t"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("NoStatefulSet"));
    assert_eq!(e.message.as_deref(), Some("no StatefulSet matches"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
}

#[tokio::test]
async fn kube_rs_delete_with_uid_precondition_and_finalizer_json_patch() {
    let (_sim, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let c = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("c", "1")).unwrap(),
        )
        .await
        .unwrap();
    // kube-runtime's finalizer helper: test that finalizers are absent (null), then add.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["swarm.io/cleanup"]}
    ]))
    .unwrap();
    let with_finalizer = api
        .patch("c", &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap();
    assert_eq!(
        with_finalizer.metadata.finalizers,
        Some(vec!["swarm.io/cleanup".to_string()])
    );
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert!(matches!(api.delete("c", &wrong).await, Err(kube::Error::Api(s)) if s.code == 409));
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let pending = api.delete("c", &right).await.unwrap();
    let still_there = pending
        .left()
        .expect("object with a finalizer is returned, not a Status");
    assert!(still_there.metadata.deletion_timestamp.is_some());
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("c").await.unwrap().is_none());
}
