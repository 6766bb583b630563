//! The ReplicaSet and Deployment controllers.
//!
//! What kube-controller-manager does, as these cases check it: a Deployment owns one ReplicaSet
//! per pod template, named `<deployment>-<pod-template-hash>` (`getNewReplicaSet`); its pods are
//! named by `generateName` (`<replicaset>-` and 5 characters of `bcdfghjklmnpqrstvwxz2456789`,
//! apiserver's `SimpleNameGenerator`); a ReplicaSet replaces a deleted pod while it terminates
//! (`FilterActivePods`) and deletes not-Ready pods first (`ActivePodsWithRanks`); a rolling
//! update stays within `replicas + maxSurge` pods and `replicas - maxUnavailable` available ones
//! (`reconcileNewReplicaSet`, `reconcileOldReplicaSets`); `Recreate` starts new pods only once
//! the old ones are gone (`rolloutRecreate`); ReplicaSets beyond `revisionHistoryLimit` go
//! (`cleanupDeployment`).

use std::cell::Cell;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Harness, PODS_PATH, is_ready, is_terminating, name_of, uid_of};

const DEPLOYMENTS_PATH: &str = "/apis/apps/v1/namespaces/default/deployments";
const REPLICASETS_PATH: &str = "/apis/apps/v1/namespaces/default/replicasets";
const NAME_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

fn deployment(name: &str, replicas: u32, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}]}
            }
        }
    })
}

impl Harness {
    async fn replica_sets(&self) -> Vec<Value> {
        let list = self.get(REPLICASETS_PATH).await.expect("listable");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    async fn deployment(&self, name: &str) -> Value {
        self.get(&format!("{DEPLOYMENTS_PATH}/{name}"))
            .await
            .expect("the Deployment exists")
    }

    async fn merge_patch(&self, path: &str, patch: Value) {
        let (status, body) = self
            .request_as(
                Method::PATCH,
                path,
                Some(patch),
                "application/merge-patch+json",
            )
            .await;
        assert_eq!(status, StatusCode::OK, "PATCH {path}: {body}");
    }

    /// Waits until the Deployment's rollout is complete, as `kubectl rollout status` decides
    /// it: status current, every replica updated, available, and no old pod left.
    async fn wait_rolled_out(&self, name: &str, replicas: u64) -> Value {
        self.eventually(&format!("{name} rolled out to {replicas}"), || async {
            let d = self.deployment(name).await;
            let s = &d["status"];
            let current = s["observedGeneration"] == d["metadata"]["generation"];
            let n = |f: &str| s[f].as_u64().unwrap_or(0);
            (current
                && n("updatedReplicas") == replicas
                && n("replicas") == replicas
                && n("availableReplicas") == replicas)
                .then_some(d)
        })
        .await
    }
}

fn owner_of(obj: &Value) -> (String, String, String) {
    let owner = obj["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .cloned()
        .unwrap_or_default();
    let s = |f: &str| owner[f].as_str().unwrap_or_default().to_string();
    (s("kind"), s("name"), s("uid"))
}

#[tokio::test]
async fn a_deployment_owns_one_replicaset_per_template_whose_pods_have_generated_names() {
    let h = Harness::fast().await;
    let created = h
        .create(
            DEPLOYMENTS_PATH,
            deployment("web", 3, json!({"type": "RollingUpdate"})),
        )
        .await;
    let d = h.wait_rolled_out("web", 3).await;
    let sets = h.replica_sets().await;
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("a pod-template-hash label");
    assert_eq!(name_of(rs), format!("web-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(
        owner_of(rs),
        ("Deployment".into(), "web".into(), uid_of(&created).into())
    );
    let pods = h.pods().await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let suffix = name_of(pod)
            .strip_prefix(&format!("{}-", name_of(rs)))
            .expect("named after the ReplicaSet");
        assert_eq!(suffix.len(), 5, "{}", name_of(pod));
        assert!(
            suffix.chars().all(|c| NAME_ALPHABET.contains(c)),
            "{suffix}"
        );
        assert_eq!(pod["metadata"]["generateName"], format!("{}-", name_of(rs)));
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            owner_of(pod),
            ("ReplicaSet".into(), name_of(rs).into(), uid_of(rs).into())
        );
        assert!(is_ready(pod));
    }
    let conditions = d["status"]["conditions"].as_array().unwrap();
    let reason = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    assert_eq!(
        reason("Available"),
        Some((json!("True"), json!("MinimumReplicasAvailable")))
    );
    assert_eq!(
        reason("Progressing"),
        Some((json!("True"), json!("NewReplicaSetAvailable")))
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn a_replicaset_replaces_a_terminating_pod_at_once_and_scales_down_unready_pods_first() {
    // A 30 s grace takes 0.3 s; a pod is Ready 1 s after it is created.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 3, json!({"type": "RollingUpdate"})),
    )
    .await;
    h.wait_rolled_out("web", 3).await;

    let victim = h.pods().await.remove(0);
    h.delete(&format!("{PODS_PATH}/{}", name_of(&victim)), json!({}))
        .await;
    let pods = h
        .eventually("a replacement beside the terminating pod", || async {
            let pods = h.pods().await;
            (pods.len() == 4).then_some(pods)
        })
        .await;
    let terminating: Vec<&str> = pods
        .iter()
        .filter(|p| is_terminating(p))
        .map(uid_of)
        .collect();
    assert_eq!(
        terminating,
        [uid_of(&victim)],
        "the old pod still terminates"
    );
    h.wait_rolled_out("web", 3).await;
    h.eventually("the deleted pod gone", || async {
        (h.pods().await.len() == 3).then_some(())
    })
    .await;

    // 3 -> 5, and straight to 2 before the new pods are Ready: those go first.
    let scale = |n: u32| json!({"spec": {"replicas": n}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), scale(5))
        .await;
    let fresh: Vec<String> = h
        .eventually("two new pods", || async {
            let pods = h.pods().await;
            let fresh: Vec<String> = pods
                .iter()
                .filter(|p| !is_ready(p))
                .map(|p| uid_of(p).to_string())
                .collect();
            (pods.len() == 5 && fresh.len() == 2).then_some(fresh)
        })
        .await;
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), scale(2))
        .await;
    h.wait_rolled_out("web", 2).await;
    let left: Vec<String> = h
        .eventually("two pods left", || async {
            let pods = h.pods().await;
            let live: Vec<String> = pods
                .iter()
                .filter(|p| !is_terminating(p))
                .map(|p| uid_of(p).to_string())
                .collect();
            (live.len() == 2).then_some(live)
        })
        .await;
    assert!(
        fresh.iter().all(|uid| !left.contains(uid)),
        "the unready pods were deleted first: {fresh:?} vs {left:?}"
    );
    h.sim.shutdown().await;
}

/// `ClaimReplicaSets`: a Deployment adopts an orphan ReplicaSet its selector matches (an old
/// revision, so scaled to 0), and releases one of its sets whose labels stop matching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_adopts_a_matching_orphan_replicaset_and_releases_one_that_stops_matching() {
    let h = Harness::fast().await;
    let orphan = h
        .create(
            REPLICASETS_PATH,
            json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "legacy", "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web", "era": "legacy"}},
                    "template": {
                        "metadata": {"labels": {"app": "web", "era": "legacy"}},
                        "spec": {"containers": [{"name": "worker", "image": "busybox:1.35"}]}
                    }
                }
            }),
        )
        .await;
    let d = h
        .create(
            DEPLOYMENTS_PATH,
            deployment("web", 2, json!({"type": "RollingUpdate"})),
        )
        .await;
    h.wait_rolled_out("web", 2).await;
    let legacy = h
        .eventually("the orphan adopted and scaled down", || async {
            let rs = h.get(&format!("{REPLICASETS_PATH}/legacy")).await?;
            (rs["spec"]["replicas"] == 0).then_some(rs)
        })
        .await;
    assert_eq!(uid_of(&legacy), uid_of(&orphan));
    assert_eq!(
        owner_of(&legacy),
        ("Deployment".into(), "web".into(), uid_of(&d).to_string())
    );

    h.merge_patch(
        &format!("{REPLICASETS_PATH}/legacy"),
        json!({"metadata": {"labels": {"app": "retired"}}}),
    )
    .await;
    h.eventually("the set released", || async {
        let rs = h.get(&format!("{REPLICASETS_PATH}/legacy")).await?;
        (owner_of(&rs).2.is_empty()).then_some(())
    })
    .await;
    h.sim.shutdown().await;
}

/// An eviction as the kubelet's eviction manager writes it (`status.phase: Failed`, reason
/// `Evicted`): the pod stays in the API, its containers are stopped for good (no mounts, never
/// started again), and its ReplicaSet no longer counts it (`FilterActivePods` skips Failed and
/// Succeeded pods), so it creates a replacement at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_stays_failed_without_mounts_and_its_replicaset_replaces_it() {
    let h = Harness::fast().await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 2, json!({"type": "RollingUpdate"})),
    )
    .await;
    h.wait_rolled_out("web", 2).await;
    h.eventually("both pods mounted", || async {
        (h.mounts().await.len() == 2).then_some(())
    })
    .await;

    let victim = h.pods().await.remove(0);
    h.merge_patch(
        &format!("{PODS_PATH}/{}/status", name_of(&victim)),
        json!({"status": {"phase": "Failed", "reason": "Evicted",
                          "message": "The node was low on resource: memory."}}),
    )
    .await;
    let pods = h
        .eventually("a replacement beside the evicted pod", || async {
            let pods = h.pods().await;
            (pods.len() == 3 && pods.iter().filter(|p| is_ready(p)).count() == 2).then_some(pods)
        })
        .await;
    let evicted = pods
        .iter()
        .find(|p| uid_of(p) == uid_of(&victim))
        .expect("the evicted pod stays in the API");
    assert_eq!(evicted["status"]["phase"], "Failed");
    assert!(!is_terminating(evicted), "nobody deleted it");
    h.wait_rolled_out("web", 2).await;
    let mounts = h
        .eventually("the replacement mounted", || async {
            let mounts = h.mounts().await;
            (mounts.len() == 2).then_some(mounts)
        })
        .await;
    assert!(
        mounts.iter().all(|m| m["uid"] != json!(uid_of(&victim))),
        "an evicted pod runs nothing: {mounts:#?}"
    );
    let again = h.pod(name_of(&victim)).await.expect("still there");
    assert_eq!(again["status"]["phase"], "Failed", "never started again");
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_restart_rolls_within_max_surge_and_max_unavailable_to_a_new_replicaset() {
    let h = Harness::start(0.01, Duration::from_secs(20)).await;
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 4, strategy))
        .await;
    h.wait_rolled_out("web", 4).await;
    let old = h.replica_sets().await.remove(0);

    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 4).await;
    assert!(
        most_asked <= 5,
        "at most replicas + maxSurge pods asked for: {most_asked}"
    );
    assert!(
        fewest_ready >= 4,
        "never below replicas - maxUnavailable: {fewest_ready}"
    );

    let sets = h.replica_sets().await;
    assert_eq!(sets.len(), 2);
    let new = sets.iter().find(|rs| uid_of(rs) != uid_of(&old)).unwrap();
    assert_eq!(
        new["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let old_now = sets.iter().find(|rs| uid_of(rs) == uid_of(&old)).unwrap();
    assert_eq!(old_now["spec"]["replicas"], 0);
    let pods = h
        .eventually("only the new ReplicaSet's pods", || async {
            let pods = h.pods().await;
            (pods.len() == 4).then_some(pods)
        })
        .await;
    assert!(pods.iter().all(|p| owner_of(p).2 == uid_of(new)));
    h.sim.shutdown().await;
}

/// Restarts the rollout of Deployment `name` as `kubectl rollout restart` does and waits until
/// it is done. Returns the most replicas its ReplicaSets were asked for at once and the fewest
/// Ready pods seen meanwhile.
///
/// maxSurge bounds the replicas the Deployment asks of its ReplicaSets (upstream's
/// `NewRSNewReplicas` counts `spec.replicas`): pods an old set was just told to drop may still be
/// running for a moment, there as upstream.
async fn rollout_restart_bounds(h: &Harness, name: &str, replicas: u64) -> (usize, usize) {
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-11-24T00:00:00Z"
    }}}}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/{name}"), restart)
        .await;
    let (most_asked, fewest_ready) = (Cell::new(0), Cell::new(usize::MAX));
    h.eventually("the rollout to finish", || async {
        let asked: u64 = h
            .replica_sets()
            .await
            .iter()
            .filter_map(|rs| rs["spec"]["replicas"].as_u64())
            .sum();
        most_asked.set(most_asked.get().max(asked as usize));
        let pods = h.pods().await;
        let live: Vec<&Value> = pods.iter().filter(|p| !is_terminating(p)).collect();
        fewest_ready.set(
            fewest_ready
                .get()
                .min(live.iter().filter(|p| is_ready(p)).count()),
        );
        let d = h.deployment(name).await;
        let done = d["status"]["updatedReplicas"] == replicas
            && d["status"]["replicas"] == replicas
            && d["status"]["availableReplicas"] == replicas
            && d["status"]["observedGeneration"] == d["metadata"]["generation"];
        done.then_some(())
    })
    .await;
    (most_asked.get(), fewest_ready.get())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percentages_of_a_rolling_update_round_surge_up_and_unavailability_down() {
    // Upstream's `ResolveFenceposts`: maxSurge rounds up, maxUnavailable down. Of 3 replicas,
    // 25% and 25% are a surge of 1 and no pod unavailable; rounded the other way the rollout
    // could not move (0 and 0) or would drop a Ready pod.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    let strategy = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 3, strategy))
        .await;
    h.wait_rolled_out("web", 3).await;
    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 3).await;
    assert_eq!(most_asked, 4, "replicas + a surge of ceil(0.75)");
    assert!(
        fewest_ready >= 3,
        "floor(0.75) = 0 unavailable: {fewest_ready}"
    );
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_without_surge_replaces_up_to_max_unavailable_pods_at_once() {
    // maxSurge 0: old pods must go first (`reconcileOldReplicaSets` scales the old set down to
    // `replicas - maxUnavailable` at once), new ones come up in their place.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    let strategy = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "50%"}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 4, strategy))
        .await;
    h.wait_rolled_out("web", 4).await;
    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 4).await;
    assert_eq!(most_asked, 4, "no surge");
    assert_eq!(
        fewest_ready, 2,
        "down to replicas - maxUnavailable while the new pods start, no further"
    );
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_starts_new_pods_only_once_the_old_ones_are_gone() {
    let h = Harness::start(0.01, Duration::from_secs(20)).await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 2, json!({"type": "Recreate"})),
    )
    .await;
    h.wait_rolled_out("web", 2).await;
    let old = h.replica_sets().await.remove(0);
    let change = json!({"spec": {"template": {"metadata": {"labels": {"app": "web", "v": "2"}}}}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), change)
        .await;
    let overlapped = Cell::new(false);
    h.eventually("the recreate to finish", || async {
        let pods = h.pods().await;
        let old_pods = pods.iter().any(|p| owner_of(p).2 == uid_of(&old));
        let new_pods = pods.iter().any(|p| owner_of(p).2 != uid_of(&old));
        overlapped.set(overlapped.get() || (old_pods && new_pods));
        let d = h.deployment("web").await;
        (d["status"]["updatedReplicas"] == 2 && d["status"]["availableReplicas"] == 2 && !old_pods)
            .then_some(())
    })
    .await;
    assert!(!overlapped.get(), "old and new pods never exist together");
    h.sim.shutdown().await;
}

#[tokio::test]
async fn old_replicasets_beyond_the_history_limit_go_and_a_deleted_deployment_takes_its_pods() {
    let h = Harness::fast().await;
    let mut d = deployment("web", 1, json!({"type": "RollingUpdate"}));
    d["spec"]["revisionHistoryLimit"] = json!(1);
    h.create(DEPLOYMENTS_PATH, d).await;
    h.wait_rolled_out("web", 1).await;
    for version in ["2", "3", "4"] {
        let change = json!({"spec": {"template": {"metadata": {"annotations": {"v": version}}}}});
        h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), change)
            .await;
        h.wait_rolled_out("web", 1).await;
    }
    let sets = h
        .eventually("one old ReplicaSet kept", || async {
            let sets = h.replica_sets().await;
            (sets.len() == 2).then_some(sets)
        })
        .await;
    let mut revisions: Vec<&str> = sets
        .iter()
        .map(|rs| {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap()
        })
        .collect();
    revisions.sort();
    assert_eq!(revisions, ["3", "4"]);

    h.delete(&format!("{DEPLOYMENTS_PATH}/web"), json!({}))
        .await;
    h.eventually("the ReplicaSets and pods collected", || async {
        (h.replica_sets().await.is_empty() && h.pods().await.is_empty()).then_some(())
    })
    .await;
    h.sim.shutdown().await;
}
