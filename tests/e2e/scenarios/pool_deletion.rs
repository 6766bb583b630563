//! Scenario 7: deleting a SwarmPool removes its ConfigMap and leaves the workers alone.

use super::kubectl_ns;
use crate::harness::Env;
use crate::harness::observe::{operator_pod_deletes, worker_pods};
use crate::harness::poll::eventually;
use crate::harness::scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_pool_removes_its_config_map_and_keeps_the_worker_pods() {
    delete_pool_and_check("pool-deletion", "--cascade=background").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_of_the_pool_removes_its_config_map_and_keeps_the_worker_pods() {
    delete_pool_and_check("pool-deletion-foreground", "--cascade=foreground").await;
}

/// Deletes the settled example pool with `kubectl delete --cascade=<policy>` and checks that
/// its ConfigMap goes while the StatefulSet and every worker pod stay untouched.
async fn delete_pool_and_check(name: &str, cascade: &str) {
    scenario!(name)
        .run(async |env| {
            let settled = env.install_example().await;
            let mark = env.request_mark().await;
            let config_map = env.example.config_map_name();

            kubectl_ns(
                env,
                &["delete", "swarmpool", &env.example.pool_name(), cascade],
            )
            .await;
            eventually("the pool's ConfigMap to be garbage collected", || async {
                match env.config_map(&config_map).await {
                    None => Ok(()),
                    Some(cm) => Err(format!("{config_map} still exists: {:?}", cm.metadata)),
                }
            })
            .await;

            assert!(env.pool().await.is_none(), "the pool is gone");
            let pods = worker_pods(&env.pods().await, &env.example.statefulset_name());
            let uids: std::collections::BTreeMap<_, _> = pods
                .iter()
                .map(|(n, p)| (n.clone(), p.uid.clone()))
                .collect();
            assert_eq!(uids, settled.uids(), "worker pods keep running, untouched");
            assert!(
                pods.values().all(|p| !p.terminating),
                "no worker pod is terminating"
            );
            let sts = kubectl_ns(
                env,
                &[
                    "get",
                    "statefulset",
                    &env.example.statefulset_name(),
                    "-o",
                    "jsonpath={.spec.replicas}",
                ],
            )
            .await;
            assert_eq!(
                sts.trim(),
                env.example.replicas().to_string(),
                "the StatefulSet is unchanged"
            );
            if let Some(deletes) = operator_pod_deletes(env, mark).await {
                assert!(deletes.is_empty(), "the operator deleted pods: {deletes:?}");
            }
            env.assert_operator_running();
        })
        .await;
}

/// How long a pool held in deletion is watched for writes: a negative, so it takes a window;
/// an operator that reacts to the ConfigMap's disappearance does so within milliseconds.
const HELD_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_held_in_deletion_by_another_finalizer_is_neither_rewritten_nor_refreshed() {
    scenario!("pool-held-in-deletion")
        .run(async |env| {
            let settled = env.install_example().await;
            let config_map = env.example.config_map_name();
            // Another controller's finalizer (a backup tool, a GitOps agent) holds the pool.
            set_finalizers(env, r#"["e2e.swarm.io/hold"]"#).await;
            let mark = env.request_mark().await;
            delete_in_the_foreground_while_held(env).await;
            tokio::time::sleep(HELD_WINDOW).await;

            assert!(
                env.config_map(&config_map).await.is_none(),
                "the operator re-created the ConfigMap of a pool being deleted"
            );
            let pods = worker_pods(&env.pods().await, &env.example.statefulset_name());
            let uids: std::collections::BTreeMap<_, _> = pods
                .iter()
                .map(|(n, p)| (n.clone(), p.uid.clone()))
                .collect();
            assert_eq!(
                uids,
                settled.uids(),
                "worker pods of a pool being deleted were replaced"
            );
            if let Some(deletes) = operator_pod_deletes(env, mark).await {
                assert!(deletes.is_empty(), "the operator deleted pods: {deletes:?}");
            }

            // Releasing the finalizer completes the deletion.
            set_finalizers(env, "null").await;
            eventually("the pool to be gone", || async {
                match env.pool().await {
                    None => Ok(()),
                    Some(p) => Err(format!("still there: {}", p["metadata"])),
                }
            })
            .await;
            env.assert_operator_running();
        })
        .await;
}

/// Sets the example pool's finalizers to `finalizers` (JSON) with a merge patch.
async fn set_finalizers(env: &Env, finalizers: &str) {
    let patch = format!(r#"{{"metadata":{{"finalizers":{finalizers}}}}}"#);
    kubectl_ns(
        env,
        &[
            "patch",
            "swarmpool",
            &env.example.pool_name(),
            "--type=merge",
            "-p",
            &patch,
        ],
    )
    .await;
}

/// Foreground deletion of the held pool: the garbage collector removes the ConfigMap while the
/// pool, marked for deletion, still exists. Waits until the collector is done, once it has
/// removed its foregroundDeletion finalizer (after deleting the dependents): only the other
/// finalizer holds the pool then.
async fn delete_in_the_foreground_while_held(env: &Env) {
    kubectl_ns(
        env,
        &[
            "delete",
            "swarmpool",
            &env.example.pool_name(),
            "--cascade=foreground",
            "--wait=false",
        ],
    )
    .await;
    eventually("the foreground deletion to reach the held pool", || async {
        let pool = env.pool().await.ok_or("the pool is gone")?;
        let finalizers = &pool["metadata"]["finalizers"];
        let marked = pool["metadata"]["deletionTimestamp"].is_string();
        if marked && *finalizers == serde_json::json!(["e2e.swarm.io/hold"]) {
            Ok(())
        } else {
            Err(format!(
                "deletionTimestamp set: {marked}, finalizers {finalizers}"
            ))
        }
    })
    .await;
}
