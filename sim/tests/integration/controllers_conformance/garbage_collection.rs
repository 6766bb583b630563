//! The garbage collector and deletion propagation: Foreground, Background and Orphan deletes
//! of a StatefulSet, and dependents of deleted owners.

use std::cell::Cell;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Harness, STS_PATH, is_terminating, name_of, statefulset, uid_of, wait_all_ready};

#[tokio::test]
async fn foreground_delete_of_a_statefulset_removes_its_pods_before_the_set() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let deleted = h
        .delete(
            &format!("{STS_PATH}/web"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}),
        )
        .await;
    assert!(is_terminating(&deleted));
    assert!(
        deleted["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("foregroundDeletion")))
    );
    // The pods need their 0.3 s grace: the set must still be there, waiting for them.
    let waiting = h
        .statefulset("web")
        .await
        .expect("the set waits for its pods");
    assert!(is_terminating(&waiting));

    let pods_seen_while_set_existed = Cell::new(0);
    h.eventually("the set to be gone", || async {
        let pods = h.pods().await.len();
        match h.statefulset("web").await {
            Some(_) => {
                pods_seen_while_set_existed.set(pods_seen_while_set_existed.get().max(pods));
                None
            }
            None => Some(()),
        }
    })
    .await;
    assert!(
        pods_seen_while_set_existed.get() > 0,
        "pods existed while the set was being deleted"
    );
    assert!(h.pods().await.is_empty(), "every pod went before the set");
    h.sim.shutdown().await;
}

#[tokio::test]
async fn background_delete_of_a_statefulset_removes_the_set_at_once_and_its_pods_after() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 2, None)).await;
    wait_all_ready(&h, "web", 2).await;
    h.delete(
        &format!("{STS_PATH}/web"),
        json!({"propagationPolicy": "Background"}),
    )
    .await;
    assert!(h.statefulset("web").await.is_none(), "the set goes at once");
    h.eventually("its pods to be collected", || async {
        h.pods().await.is_empty().then_some(())
    })
    .await;
    h.sim.shutdown().await;
}

#[tokio::test]
async fn orphan_delete_of_a_statefulset_keeps_its_pods_without_owner_references() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 2, None)).await;
    wait_all_ready(&h, "web", 2).await;
    let uids: Vec<String> = h
        .pods()
        .await
        .iter()
        .map(|p| uid_of(p).to_string())
        .collect();
    h.delete(
        &format!("{STS_PATH}/web"),
        json!({"propagationPolicy": "Orphan"}),
    )
    .await;
    h.eventually("the set to be gone", || async {
        h.statefulset("web").await.is_none().then_some(())
    })
    .await;
    // Give the collector time to act wrongly before checking that it did not.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pods = h.pods().await;
    let kept: Vec<String> = pods.iter().map(|p| uid_of(p).to_string()).collect();
    assert_eq!(kept, uids, "the same pod instances remain");
    for pod in &pods {
        let refs = &pod["metadata"]["ownerReferences"];
        // Like the API server, no empty list: clients index it as absent.
        assert!(
            refs.is_null(),
            "{} still has owner references: {refs}",
            name_of(pod)
        );
        assert!(!is_terminating(pod));
    }
    h.sim.shutdown().await;
}

#[tokio::test]
async fn dependent_of_a_deleted_config_map_is_collected_but_one_with_a_live_owner_stays() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let owner = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "owner", "namespace": "default"}}),
        )
        .await;
    let other = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "other", "namespace": "default"}}),
        )
        .await;
    let reference = |o: &Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name_of(o), "uid": uid_of(o)});
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "only-child", "namespace": "default",
                     "ownerReferences": [reference(&owner)]}}),
    )
    .await;
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared-child", "namespace": "default",
                     "ownerReferences": [reference(&owner), reference(&other)]}}),
    )
    .await;
    h.delete(&format!("{cm_path}/owner"), json!({})).await;
    h.eventually("only-child to be collected", || async {
        h.get(&format!("{cm_path}/only-child"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let shared = h
        .eventually("shared-child to drop the dangling reference", || async {
            let obj = h.get(&format!("{cm_path}/shared-child")).await?;
            (obj["metadata"]["ownerReferences"].as_array()?.len() == 1).then_some(obj)
        })
        .await;
    assert_eq!(
        shared["metadata"]["ownerReferences"][0]["uid"],
        json!(uid_of(&other))
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn foreground_delete_waits_for_blocking_dependents_and_deletes_the_others_too() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let parent = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "parent", "namespace": "default"}}),
        )
        .await;
    let reference = |block: bool| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
                "uid": uid_of(&parent), "blockOwnerDeletion": block}])
    };
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "held", "namespace": "default",
                            "finalizers": ["example.com/hold"],
                            "ownerReferences": reference(true)}}),
    )
    .await;
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "loose", "namespace": "default",
                            "ownerReferences": reference(false)}}),
    )
    .await;

    h.delete(
        &format!("{cm_path}/parent"),
        json!({"propagationPolicy": "Foreground"}),
    )
    .await;
    h.eventually("the non-blocking dependent to be deleted", || async {
        h.get(&format!("{cm_path}/loose"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    h.eventually(
        "the blocking dependent to be marked for deletion",
        || async { is_terminating(&h.get(&format!("{cm_path}/held")).await?).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = h
        .get(&format!("{cm_path}/parent"))
        .await
        .expect("the owner waits for its blocking dependent");
    assert!(is_terminating(&waiting));

    let (status, body) = h
        .request_as(
            Method::PATCH,
            &format!("{cm_path}/held"),
            Some(json!({"metadata": {"finalizers": null}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    h.eventually("the owner to go once its dependents are gone", || async {
        h.get(&format!("{cm_path}/parent"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    h.sim.shutdown().await;
}
