//! The kubelet stand-in: pods end after their grace period, record what they mounted when
//! they started, and wait for the ConfigMaps they need.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    Harness, PODS_PATH, STS_PATH, first, is_ready, is_terminating, name_of, statefulset, uid_of,
    wait_all_ready,
};

#[tokio::test]
async fn pod_delete_sets_deletion_timestamp_from_the_grace_period_and_removes_the_pod_when_it_ends()
{
    let h = Harness::fast().await;
    for (name, grace) in [("default-grace", None), ("short-grace", Some(5))] {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        });
        if let Some(grace) = grace {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(grace);
        }
        h.create(PODS_PATH, pod).await;
    }
    for name in ["default-grace", "short-grace"] {
        h.eventually("pod to run", || async {
            is_ready(&h.pod(name).await?).then_some(())
        })
        .await;
    }

    // The request's grace period wins over the pod's; without one the pod's (30 s) applies.
    let cases = [
        ("default-grace", json!({}), 30),
        ("short-grace", json!({"gracePeriodSeconds": 20}), 20),
    ];
    for (name, options, grace) in cases {
        let rv = h.list_resource_version(PODS_PATH).await;
        let watch = h.watch(PODS_PATH, &rv).await;
        let requested = chrono::Utc::now();
        let asked = Instant::now();
        let deleted = h.delete(&format!("{PODS_PATH}/{name}"), options).await;
        let stamp = deleted["metadata"]["deletionTimestamp"]
            .as_str()
            .expect("the DELETE answer carries deletionTimestamp");
        let stamp = chrono::DateTime::parse_from_rfc3339(stamp).unwrap();
        let offset = (stamp.with_timezone(&chrono::Utc) - requested).num_seconds();
        assert!(
            (grace - 2..=grace + 1).contains(&offset),
            "{name}: deletionTimestamp is {offset}s after the request, expected about {grace}s"
        );
        assert_eq!(
            deleted["metadata"]["deletionGracePeriodSeconds"],
            json!(grace)
        );

        h.eventually("pod to be gone", || async {
            h.pod(name).await.is_none().then_some(())
        })
        .await;
        let took = asked.elapsed();
        // Scaled grace is grace * 0.01 s: the pod may not vanish earlier than that.
        let scaled = Duration::from_millis(grace as u64 * 10);
        assert!(
            took >= scaled,
            "{name} was removed after {took:?}, before its grace {scaled:?}"
        );
        let events = watch.events();
        let marked = first(&events, |t, o| {
            t == "MODIFIED" && name_of(o) == name && is_terminating(o)
        })
        .expect("the pod stays, marked for deletion");
        let removed = first(&events, |t, o| t == "DELETED" && name_of(o) == name)
            .expect("the pod is removed when its grace ends");
        assert!(marked < removed);
    }
    h.sim.shutdown().await;
}

#[tokio::test]
async fn mounts_record_each_pod_instance_config_map_content_as_of_its_start() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let cm = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "jobs", "namespace": "default"},
            "data": {"config.yml": "version: 1"}}),
        )
        .await;
    let mut sts = statefulset("web", 2, None);
    sts["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "jobs", "configMap": {"name": "jobs"}},
        {"name": "extra", "configMap": {"name": "missing-but-optional", "optional": true}}
    ]);
    h.create(STS_PATH, sts).await;
    wait_all_ready(&h, "web", 2).await;

    let mounts = h.mounts().await;
    let pods = h.pods().await;
    assert_eq!(mounts.len(), 2, "one entry per live pod: {mounts:#?}");
    for (entry, pod) in mounts.iter().zip(&pods) {
        assert_eq!(entry["namespace"], "default");
        assert_eq!(entry["pod"], pod["metadata"]["name"]);
        assert_eq!(entry["uid"], pod["metadata"]["uid"]);
        assert_eq!(entry["startedAt"], pod["status"]["startTime"]);
        assert_eq!(
            entry["configMaps"],
            json!({"jobs": {"resourceVersion": cm["metadata"]["resourceVersion"],
                            "data": {"config.yml": "version: 1"}}}),
            "the optional missing ConfigMap is absent"
        );
    }

    // A running pod keeps what it mounted; a re-created one mounts the new content.
    let (status, updated) = h
        .request_as(
            Method::PATCH,
            &format!("{cm_path}/jobs"),
            Some(json!({"data": {"config.yml": "version: 2"}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let old_uid = uid_of(&h.pod("web-1").await.unwrap()).to_string();
    h.delete(&format!("{PODS_PATH}/web-1"), json!({})).await;
    let fresh = h
        .eventually("web-1 re-created and started", || async {
            let mounts = h.mounts().await;
            let web1: Vec<&Value> = mounts.iter().filter(|m| m["pod"] == "web-1").collect();
            (web1.len() == 1 && web1[0]["uid"] != json!(old_uid)).then(|| mounts.clone())
        })
        .await;
    let by_pod: BTreeMap<String, &Value> = fresh
        .iter()
        .map(|m| (m["pod"].as_str().unwrap().to_string(), m))
        .collect();
    assert_eq!(
        by_pod["web-0"]["configMaps"]["jobs"]["data"]["config.yml"],
        "version: 1"
    );
    assert_eq!(
        by_pod["web-1"]["configMaps"]["jobs"]["data"]["config.yml"],
        "version: 2"
    );
    assert_eq!(
        by_pod["web-1"]["configMaps"]["jobs"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    assert!(
        fresh.iter().all(|m| m["uid"] != json!(old_uid)),
        "the gone instance is dropped"
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn pod_waits_in_pending_until_a_required_config_map_exists() {
    let h = Harness::fast().await;
    h.create(
        PODS_PATH,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "needs-cm", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "cfg", "configMap": {"name": "later"}}]}
        }),
    )
    .await;
    // Many start delays pass; without the ConfigMap the pod must not start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pod = h.pod("needs-cm").await.unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    assert!(h.mounts().await.is_empty());

    h.create(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"name": "later", "namespace": "default"},
        "data": {"k": "v"}}),
    )
    .await;
    h.eventually("the pod to start", || async {
        is_ready(&h.pod("needs-cm").await?).then_some(())
    })
    .await;
    let mounts = h.mounts().await;
    assert_eq!(mounts[0]["configMaps"]["later"]["data"], json!({"k": "v"}));
    h.sim.shutdown().await;
}
