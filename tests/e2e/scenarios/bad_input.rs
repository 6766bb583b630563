//! Scenario 6: bad input. Each case reports its documented phase, reason and Warning event,
//! and the operator writes no ConfigMap and deletes no pod.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::kubectl_ns;
use crate::harness::Env;
use crate::harness::manifests::{str_at, write_manifest};
use crate::harness::observe::{
    Observed, assert_config_map_metadata, assert_invariants,
    assert_no_config_map_write_or_pod_delete, config_text, status_current, wait_balanced,
    wait_event, wait_for, worker_pods,
};
use crate::harness::poll::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_matching_no_statefulset_fails_with_statefulset_not_found_and_recovers() {
    let mut env = Env::start("no-statefulset").await;
    let mut pool = env.example.pool().clone();
    pool["spec"]["selector"] = json!({"matchLabels": {"app": "no-such-worker"}});
    let (failed, mark) = install_workers_then(&mut env, &[pool], "pool-no-match.yaml").await;

    assert_failed(&env, &failed, "StatefulSetNotFound", mark).await;
    assert!(
        failed.config_map.is_none(),
        "no ConfigMap is written for a failed pool"
    );

    // Fixing the selector is noticed at once.
    env.apply_examples().await;
    let settled = wait_balanced(&env, 2).await;
    assert_invariants(&env, &settled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_matching_two_statefulsets_fails_with_ambiguous_selector_and_recovers() {
    let mut env = Env::start("two-statefulsets").await;
    let sts = env.example.statefulset_name();
    let twin_name = format!("{sts}-twin");
    let mut twin = env.example.statefulset().clone();
    twin["metadata"]["name"] = Value::from(twin_name.clone());
    let pool = env.example.pool().clone();
    let (failed, mark) = install_workers_then(&mut env, &[twin, pool], "pool-ambiguous.yaml").await;

    assert_failed(&env, &failed, "AmbiguousSelector", mark).await;
    assert!(
        failed.config_map.is_none(),
        "no ConfigMap is written for a failed pool"
    );

    // Removing the second StatefulSet resolves it.
    kubectl_ns(&env, &["delete", "statefulset", &twin_name]).await;
    let settled = wait_balanced(&env, 2).await;
    assert_invariants(&env, &settled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_or_empty_jobs_are_rejected_by_the_api_server_at_apply() {
    let mut env = Env::start("duplicate-jobs").await;
    let (_, mark) = install_workers_then(&mut env, &[], "nothing.yaml").await;
    let jobs = env.example.jobs();

    let mut duplicate = env.example.pool().clone();
    let mut twice = jobs.clone();
    twice.push(jobs[3].clone());
    duplicate["spec"]["jobs"] = Value::from(twice);
    let path = write_manifest(&env.scratch("pool-duplicate.yaml"), &[duplicate]);
    let stderr = env
        .kubectl
        .fails(&["apply", "-f", path.to_str().unwrap()])
        .await;
    assert!(
        stderr.contains("is invalid")
            && stderr.contains("Duplicate value")
            && stderr.contains(&jobs[3]),
        "a duplicate job is a 422 naming it: {stderr}"
    );

    let mut empty = env.example.pool().clone();
    let mut with_empty = jobs.clone();
    with_empty.push(String::new());
    empty["spec"]["jobs"] = Value::from(with_empty);
    let path = write_manifest(&env.scratch("pool-empty-job.yaml"), &[empty]);
    let stderr = env
        .kubectl
        .fails(&["apply", "-f", path.to_str().unwrap()])
        .await;
    assert!(
        stderr.contains("is invalid"),
        "an empty job is a 422: {stderr}"
    );

    assert!(env.pool().await.is_none(), "a rejected pool is not stored");
    let config_map = env.example.config_map_name();
    assert!(env.config_map(&config_map).await.is_none());
    assert_no_config_map_write_or_pod_delete(&env, mark).await;
    env.assert_operator_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_controlled_by_another_owner_is_never_written_and_fails_with_conflict() {
    let mut env = Env::start("config-map-conflict").await;
    let namespace = env.example.namespace();
    let name = env.example.config_map_name();
    // A ConfigMap of the pool's name, controlled by another (existing) object.
    let owner = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "someone-else", "namespace": namespace},
        "data": {"purpose": "owns the ConfigMap the pool wants"},
    });
    let mut documents = namespace_documents(&env);
    documents.push(owner);
    let path = write_manifest(&env.scratch("owner.yaml"), &documents);
    env.kubectl
        .ok(&["apply", "-f", path.to_str().unwrap()])
        .await;
    let owner_uid = kubectl_ns(
        &env,
        &[
            "get",
            "configmap",
            "someone-else",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    )
    .await;
    let foreign = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "someone-else",
                "uid": owner_uid.trim(), "controller": true,
            }],
        },
        "data": {"config.yml": "version: 7\nworkloads: {}\n"},
    });
    let path = write_manifest(&env.scratch("foreign-config-map.yaml"), &[foreign]);
    env.kubectl
        .ok(&["apply", "-f", path.to_str().unwrap()])
        .await;
    let before = env.config_map(&name).await.expect("the foreign ConfigMap");

    let pool = env.example.pool().clone();
    let (failed, mark) = install_workers_then(&mut env, &[pool], "pool.yaml").await;
    assert_failed(&env, &failed, "ConfigMapConflict", mark).await;

    let after = env
        .config_map(&name)
        .await
        .expect("the foreign ConfigMap stays");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the foreign ConfigMap was modified"
    );
    assert_eq!(config_text(&after), config_text(&before));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholder_config_map_without_controller_is_adopted() {
    let mut env = Env::start("config-map-adoption").await;
    // The predecessor's install created the ConfigMap by hand, before the controller ran.
    let placeholder = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": env.example.config_map_name(), "namespace": env.example.namespace()},
        "data": {"config.yml": "workloads: {}\n"},
    });
    let mut documents = namespace_documents(&env);
    documents.push(placeholder);
    let path = write_manifest(&env.scratch("placeholder.yaml"), &documents);
    env.kubectl
        .ok(&["apply", "-f", path.to_str().unwrap()])
        .await;

    let settled = env.install_example().await;
    assert_config_map_metadata(&settled, &env.example.pool_name());
    assert_eq!(settled.config().loads(), [14, 13]);
}

/// The example's Namespace documents.
fn namespace_documents(env: &Env) -> Vec<Value> {
    env.example
        .documents
        .iter()
        .filter(|d| d["kind"] == "Namespace")
        .cloned()
        .collect()
}

/// Installs the CRDs, starts the operator, applies the example namespace and worker
/// StatefulSet and waits for its pods; then applies `extra` (from `file`) and, when it holds
/// a SwarmPool, waits for the pool to report `Failed`. Returns that observation (or an empty
/// one) and the request-log position taken before `extra` was applied.
async fn install_workers_then(env: &mut Env, extra: &[Value], file: &str) -> (Observed, usize) {
    env.install_crds().await;
    env.start_operator().await;
    let mut documents = namespace_documents(env);
    documents.push(env.example.statefulset().clone());
    let path = write_manifest(&env.scratch("workers.yaml"), &documents);
    env.kubectl
        .ok(&["apply", "-f", path.to_str().unwrap()])
        .await;
    let sts = env.example.statefulset_name();
    let replicas = env.example.replicas();
    let uids = eventually("the example workers to be Ready", || async {
        let pods = worker_pods(&env.pods().await, &sts);
        if pods.len() == replicas && pods.values().all(|p| p.ready && !p.terminating) {
            Ok(pods)
        } else {
            Err(format!("pods {pods:?}"))
        }
    })
    .await;

    let mark = env.request_mark().await;
    if extra.is_empty() {
        let nothing = Observed {
            pool: Value::Null,
            config_map: None,
            config: None,
            pods: uids,
        };
        return (nothing, mark);
    }
    let path = write_manifest(&env.scratch(file), extra);
    env.kubectl
        .ok(&["apply", "-f", path.to_str().unwrap()])
        .await;
    let failed = wait_for(env, "phase Failed", |o| {
        if o.phase() != "Failed" {
            return Err("not Failed".into());
        }
        status_current(o)
    })
    .await;
    let before: BTreeMap<String, String> = uids
        .iter()
        .map(|(name, pod)| (name.clone(), pod.uid.clone()))
        .collect();
    assert_eq!(
        failed.uids(),
        before,
        "no worker pod may be touched by a failed pool"
    );
    (failed, mark)
}

/// Asserts a Failed pool's condition, Warning event and the absence of writes since `mark`.
async fn assert_failed(env: &Env, failed: &Observed, reason: &str, mark: usize) {
    let ready = failed
        .condition("Ready")
        .unwrap_or_else(|| panic!("no Ready condition: {}", failed.pool["status"]));
    assert_eq!(ready["status"], "False", "Ready: {ready}");
    assert_eq!(ready["reason"], reason, "Ready: {ready}");
    assert!(
        !str_at(ready, "/message").is_empty(),
        "the condition says what to fix"
    );
    let warnings = wait_event(env, &env.example.pool_name(), "Warning", reason).await;
    assert!(
        warnings.iter().all(|e| !e.note.is_empty()),
        "Warning events explain the failure: {warnings:#?}"
    );
    assert_no_config_map_write_or_pod_delete(env, mark).await;
}
