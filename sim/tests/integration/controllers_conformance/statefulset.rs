//! The StatefulSet controller: OrderedReady and Parallel pod management, pod identity,
//! scaling, rolling updates of the template and the revisions it keeps.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{
    Harness, PODS_PATH, STS_PATH, Watch, first, is_ready, is_terminating, name_of, statefulset,
    uid_of, wait_all_ready,
};

#[tokio::test]
async fn ordered_ready_creates_each_pod_after_its_predecessor_is_ready_with_identity_labels_and_owner()
 {
    let h = Harness::fast().await;
    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let sts = h.statefulset("web").await.expect("set exists");
    let revision = status_counts_every_replica_at_one_revision(&sts);
    each_pod_was_created_once_its_predecessor_was_ready(&h, &watch).await;
    for ordinal in 0..3 {
        pod_has_its_identity_and_runs(&h, &sts, ordinal, revision).await;
    }
    an_event_was_recorded_per_created_pod(&h, &sts).await;
    drop(watch);
    h.sim.shutdown().await;
}

/// The status of a settled set: every replica counted, current and updated, one revision
/// (named after the set). Returns that revision.
fn status_counts_every_replica_at_one_revision(sts: &Value) -> &str {
    let status = &sts["status"];
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["availableReplicas"], 3);
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(status["updatedReplicas"], 3);
    assert_eq!(status["observedGeneration"], sts["metadata"]["generation"]);
    assert_eq!(status["currentRevision"], status["updateRevision"]);
    let revision = status["updateRevision"]
        .as_str()
        .expect("updateRevision set");
    assert!(revision.starts_with("web-"), "{revision}");
    revision
}

/// OrderedReady: the watch saw web-1 created only after web-0 was ready, web-2 after web-1.
async fn each_pod_was_created_once_its_predecessor_was_ready(h: &Harness, watch: &Watch) {
    // Wait until the watch has seen every pod become ready, then check the order.
    h.eventually("the watch to see web-2 ready", || async {
        watch
            .events()
            .iter()
            .any(|e| name_of(&e["object"]) == "web-2" && is_ready(&e["object"]))
            .then_some(())
    })
    .await;
    let events = watch.events();
    for (before, after) in [("web-0", "web-1"), ("web-1", "web-2")] {
        let ready = first(&events, |_, o| name_of(o) == before && is_ready(o))
            .unwrap_or_else(|| panic!("{before} never became ready"));
        let created = first(&events, |t, o| t == "ADDED" && name_of(o) == after)
            .unwrap_or_else(|| panic!("{after} was never created"));
        assert!(
            ready < created,
            "{after} was created (event {created}) before {before} was ready (event {ready})"
        );
    }
}

/// Pod `web-<ordinal>`: identity labels and hostname, the set as its controller, bound to
/// the node with an IP, and running with every condition true.
async fn pod_has_its_identity_and_runs(h: &Harness, sts: &Value, ordinal: usize, revision: &str) {
    let name = format!("web-{ordinal}");
    let pod = h.pod(&name).await.expect("pod exists");
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["app"], "web");
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], json!(name));
    assert_eq!(
        labels["apps.kubernetes.io/pod-index"],
        json!(ordinal.to_string())
    );
    assert_eq!(labels["controller-revision-hash"], json!(revision));
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": uid_of(sts), "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(pod["spec"]["hostname"], json!(name));
    assert_eq!(pod["spec"]["subdomain"], "web");
    assert!(
        pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    );
    assert!(
        pod["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty())
    );
    assert!(pod["status"]["startTime"].is_string());
    for condition in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        let ok = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == condition && c["status"] == "True");
        assert!(ok, "{name} lacks condition {condition}=True");
    }
    let container = &pod["status"]["containerStatuses"][0];
    assert_eq!(container["name"], "worker");
    assert_eq!(container["ready"], true);
    assert!(container["state"]["running"]["startedAt"].is_string());
}

/// Like kube-controller-manager, the controller records an event per pod it creates.
async fn an_event_was_recorded_per_created_pod(h: &Harness, sts: &Value) {
    let events = h
        .get("/api/v1/namespaces/default/events")
        .await
        .expect("events are listable");
    let mut created: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "SuccessfulCreate"
                && e["involvedObject"]["uid"] == sts["metadata"]["uid"]
        })
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    created.sort_unstable();
    assert_eq!(
        created,
        [
            "create Pod web-0 in StatefulSet web successful",
            "create Pod web-1 in StatefulSet web successful",
            "create Pod web-2 in StatefulSet web successful"
        ]
    );
}

#[tokio::test]
async fn ordered_ready_waits_for_an_unready_pod_before_creating_the_next() {
    // Unscaled time and a long start delay: web-0 stays unready for the whole test.
    let h = Harness::start(1.0, Duration::from_secs(3600)).await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    h.eventually("web-0 to be created and bound", || async {
        let pod = h.pod("web-0").await?;
        pod["spec"]["nodeName"].is_string().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names: Vec<String> = h
        .pods()
        .await
        .iter()
        .map(|p| name_of(p).to_string())
        .collect();
    assert_eq!(
        names,
        ["web-0"],
        "only web-0 may exist while it is not ready"
    );
    let pod = h.pod("web-0").await.unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    let sts = h.statefulset("web").await.unwrap();
    assert_eq!(sts["status"]["replicas"], 1);
    assert_eq!(sts["status"]["availableReplicas"], 0);
    assert!(
        sts["status"].get("readyReplicas").is_none(),
        "zero readyReplicas is omitted"
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn parallel_policy_creates_every_pod_without_waiting_for_readiness() {
    let h = Harness::start(1.0, Duration::from_secs(3600)).await;
    h.create(STS_PATH, statefulset("par", 3, Some("Parallel")))
        .await;
    let names = h
        .eventually("three pods", || async {
            let names: Vec<String> = h
                .pods()
                .await
                .iter()
                .map(|p| name_of(p).to_string())
                .collect();
            (names.len() == 3).then_some(names)
        })
        .await;
    assert_eq!(names, ["par-0", "par-1", "par-2"]);
    assert!(h.pods().await.iter().all(|p| !is_ready(p)));
    h.sim.shutdown().await;
}

#[tokio::test]
async fn scale_down_removes_the_highest_ordinal_first_and_a_deleted_pod_returns_with_a_new_uid() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    let (status, scale) = h
        .request_as(
            Method::PATCH,
            &format!("{STS_PATH}/web/scale"),
            Some(json!({"spec": {"replicas": 1}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{scale}");
    assert_eq!(scale["spec"]["replicas"], 1);
    h.eventually("web-1 and web-2 to be gone", || async {
        let names: Vec<String> = h
            .pods()
            .await
            .iter()
            .map(|p| name_of(p).to_string())
            .collect();
        (names == ["web-0"]).then_some(())
    })
    .await;
    wait_all_ready(&h, "web", 1).await;
    let events = watch.events();
    let terminating = |name: &'static str| {
        first(&events, move |t, o| {
            t == "MODIFIED" && name_of(o) == name && is_terminating(o)
        })
        .unwrap_or_else(|| panic!("{name} was never marked for deletion"))
    };
    let gone = |name: &'static str| {
        first(&events, move |t, o| t == "DELETED" && name_of(o) == name)
            .unwrap_or_else(|| panic!("{name} was never removed"))
    };
    assert!(
        terminating("web-2") < terminating("web-1"),
        "web-2 must go first"
    );
    assert!(
        gone("web-2") < terminating("web-1"),
        "OrderedReady removes web-1 only once web-2 is gone"
    );
    drop(watch);

    let old = h.pod("web-0").await.unwrap();
    let old_uid = uid_of(&old).to_string();
    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    h.delete(&format!("{PODS_PATH}/web-0"), json!({})).await;
    let new = h
        .eventually("web-0 to come back with a new uid and be ready", || async {
            let pod = h.pod("web-0").await?;
            (uid_of(&pod) != old_uid && is_ready(&pod)).then_some(pod)
        })
        .await;
    assert_ne!(uid_of(&new), old_uid);
    let events = watch.events();
    let old_gone = first(&events, |t, o| t == "DELETED" && uid_of(o) == old_uid)
        .expect("the old web-0 is removed");
    let new_added = first(&events, |t, o| t == "ADDED" && name_of(o) == "web-0")
        .expect("a new web-0 is created");
    assert!(
        old_gone < new_added,
        "the new web-0 appears only once the old one is fully gone"
    );
    drop(watch);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn template_change_rolls_pods_to_the_new_revision_from_the_highest_ordinal() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;
    let before = h.statefulset("web").await.unwrap();
    let old_revision = before["status"]["updateRevision"].clone();

    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    let (status, patched) = h
        .request_as(
            Method::PATCH,
            &format!("{STS_PATH}/web"),
            Some(json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let after = h
        .eventually("the rollout to finish", || async {
            let sts = h.statefulset("web").await?;
            let s = &sts["status"];
            (s["updateRevision"] != old_revision
                && s["currentRevision"] == s["updateRevision"]
                && s["updatedReplicas"] == 3
                && s["readyReplicas"] == 3)
                .then_some(sts)
        })
        .await;
    assert_eq!(
        after["status"]["observedGeneration"],
        after["metadata"]["generation"]
    );
    let new_revision = after["status"]["updateRevision"].clone();
    for pod in h.pods().await {
        assert_eq!(
            pod["metadata"]["labels"]["controller-revision-hash"],
            new_revision
        );
        assert_eq!(pod["metadata"]["annotations"]["rev"], "2");
    }
    let events = watch.events();
    let order: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "DELETED")
        .map(|e| name_of(&e["object"]))
        .collect();
    assert_eq!(order, ["web-2", "web-1", "web-0"]);

    // Both templates are kept as ControllerRevisions owned by the set, the new one newest.
    let revisions = h
        .get("/apis/apps/v1/namespaces/default/controllerrevisions")
        .await
        .expect("revisions are listable");
    let history: Vec<(Value, Value)> = revisions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(
                r["metadata"]["ownerReferences"][0]["uid"],
                after["metadata"]["uid"]
            );
            (r["metadata"]["name"].clone(), r["revision"].clone())
        })
        .collect();
    let mut expected = vec![(old_revision, json!(1)), (new_revision, json!(2))];
    expected.sort_by_key(|(name, _)| name.as_str().map(String::from));
    assert_eq!(history, expected);
    drop(watch);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn binding_a_statefulset_pod_to_the_node_keeps_its_generation_at_one() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("bound", 2, None)).await;
    wait_all_ready(&h, "bound", 2).await;
    for name in ["bound-0", "bound-1"] {
        let pod = h.pod(name).await.expect("the pod exists");
        assert!(is_ready(&pod), "{pod}");
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "the pod is bound: {pod}"
        );
        assert_eq!(pod["metadata"]["generation"], 1, "{pod}");
    }

    // A spec change by a user does raise it.
    let (status, patched) = h
        .request_as(
            Method::PATCH,
            &format!("{PODS_PATH}/bound-0"),
            Some(json!({"spec": {"activeDeadlineSeconds": 600}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["metadata"]["generation"], 2, "{patched}");
    h.sim.shutdown().await;
}
