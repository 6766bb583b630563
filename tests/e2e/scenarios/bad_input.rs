//! Scenario 6: bad input. Each case reports its documented phase, reason and Warning event,
//! and the operator writes no ConfigMap and deletes no pod.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::kubectl_ns;
use crate::harness::Env;
use crate::harness::manifests::str_at;
use crate::harness::observe::{
    Observed, assert_config_map_metadata, assert_invariants,
    assert_no_config_map_write_or_pod_delete, config_text, status_current, wait_balanced,
    wait_event, wait_for, worker_pods,
};
use crate::harness::poll::eventually;
use crate::harness::scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_matching_no_statefulset_fails_with_statefulset_not_found_and_recovers() {
    scenario!("no-statefulset")
        .run(async |env| {
            let workers = install_workers(env).await;
            let mut pool = env.example.pool().clone();
            pool["spec"]["selector"] = json!({"matchLabels": {"app": "no-such-worker"}});
            let mark = env.request_mark().await;
            let failed = apply_failing(env, "pool-no-match.yaml", &[pool], &workers).await;

            assert_failed(env, &failed, "StatefulSetNotFound", mark).await;
            assert!(
                failed.config_map.is_none(),
                "no ConfigMap is written for a failed pool"
            );

            // Fixing the selector is noticed at once.
            env.apply_examples().await;
            let settled = wait_balanced(env, 2).await;
            assert_invariants(env, &settled).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_matching_two_statefulsets_fails_with_ambiguous_selector_and_recovers() {
    scenario!("two-statefulsets")
        .run(async |env| {
            let workers = install_workers(env).await;
            let twin_name = format!("{}-twin", env.example.statefulset_name());
            let mut twin = env.example.statefulset().clone();
            twin["metadata"]["name"] = Value::from(twin_name.clone());
            let pool = env.example.pool().clone();
            let mark = env.request_mark().await;
            let failed = apply_failing(env, "pool-ambiguous.yaml", &[twin, pool], &workers).await;

            assert_failed(env, &failed, "AmbiguousSelector", mark).await;
            assert!(
                failed.config_map.is_none(),
                "no ConfigMap is written for a failed pool"
            );

            // Removing the second StatefulSet resolves it.
            kubectl_ns(env, &["delete", "statefulset", &twin_name]).await;
            let settled = wait_balanced(env, 2).await;
            assert_invariants(env, &settled).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qos_naming_a_job_outside_the_spec_fails_with_invalid_qos_and_a_zero_weight_is_rejected()
{
    scenario!("invalid-qos")
        .run(async |env| {
            let workers = install_workers(env).await;
            let mut pool = env.example.pool().clone();
            pool["spec"]["qos"] = json!({"dedicated": ["stream:no-such-job"]});
            let mark = env.request_mark().await;
            let failed = apply_failing(env, "pool-invalid-qos.yaml", &[pool], &workers).await;
            assert_failed(env, &failed, "InvalidQoS", mark).await;
            let ready = failed.condition("Ready").expect("a Ready condition");
            assert!(
                str_at(ready, "/message").contains("\"stream:no-such-job\""),
                "the condition names the job: {ready}"
            );
            let warnings = wait_event(env, &env.example.pool_name(), "Warning", "InvalidQoS").await;
            assert!(warnings[0].note.contains("stream:no-such-job"));
            assert!(failed.config_map.is_none(), "nothing is written");

            // The CRD's schema refuses a weight below 1 at apply, naming the field.
            let mut zero = env.example.pool().clone();
            zero["spec"]["qos"] = json!({"weights": {env.example.jobs()[0].clone(): 0}});
            let out = env.apply_output("pool-zero-weight.yaml", &[zero]).await;
            assert!(
                !out.success && out.stderr.contains("spec.qos.weights") && out.stderr.contains("1"),
                "a zero weight is a 422 naming the field: {}",
                out.stderr
            );

            // Fixing the pool is noticed at once.
            env.apply_examples().await;
            let settled = wait_balanced(env, 2).await;
            assert_invariants(env, &settled).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_listed_twice_fails_with_invalid_jobs_and_an_empty_job_is_rejected_at_apply() {
    scenario!("duplicate-jobs")
        .run(async |env| {
            let workers = install_workers(env).await;
            let jobs = env.example.jobs();

            // The CRD refuses an empty job at apply.
            let mut empty = env.example.pool().clone();
            let mut with_empty = jobs.clone();
            with_empty.push(String::new());
            empty["spec"]["jobs"] = Value::from(with_empty);
            let out = env.apply_output("pool-empty-job.yaml", &[empty]).await;
            assert!(
                !out.success && out.stderr.contains("is invalid"),
                "an empty job is a 422: {}",
                out.stderr
            );
            assert!(env.pool().await.is_none(), "a rejected pool is not stored");

            // `spec.jobs` is an atomic list (cheap for the API server at 10,000 jobs), so a job
            // listed twice is the operator's to refuse: Failed, naming the job, nothing written.
            let mut duplicate = env.example.pool().clone();
            let mut twice = jobs.clone();
            twice.push(jobs[3].clone());
            duplicate["spec"]["jobs"] = Value::from(twice);
            let mark = env.request_mark().await;
            let failed = apply_failing(env, "pool-duplicate.yaml", &[duplicate], &workers).await;
            assert_failed(env, &failed, "InvalidJobs", mark).await;
            let ready = failed.condition("Ready").expect("a Ready condition");
            assert!(
                str_at(ready, "/message").contains(&format!("{:?}", jobs[3])),
                "the condition names the job: {ready}"
            );
            assert!(failed.config_map.is_none(), "nothing is written");
            env.assert_operator_running();

            // Fixing the pool is noticed at once.
            env.apply_examples().await;
            let settled = wait_balanced(env, 2).await;
            assert_invariants(env, &settled).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_controlled_by_another_owner_is_never_written_and_fails_with_conflict() {
    scenario!("config-map-conflict")
        .run(async |env| {
            let workers = install_workers(env).await;
            let namespace = env.example.namespace();
            let name = env.example.config_map_name();
            // A ConfigMap of the pool's name, controlled by another (existing) object.
            let owner = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "someone-else", "namespace": namespace},
                "data": {"purpose": "owns the ConfigMap the pool wants"},
            });
            env.apply("owner.yaml", &[owner]).await;
            let owner_uid = kubectl_ns(
                env,
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
            env.apply("foreign-config-map.yaml", &[foreign]).await;
            let before = env.config_map(&name).await.expect("the foreign ConfigMap");

            let mark = env.request_mark().await;
            let pool = env.example.pool().clone();
            let failed = apply_failing(env, "pool.yaml", &[pool], &workers).await;
            assert_failed(env, &failed, "ConfigMapConflict", mark).await;

            let after = env
                .config_map(&name)
                .await
                .expect("the foreign ConfigMap stays");
            assert_eq!(
                after.metadata.resource_version, before.metadata.resource_version,
                "the foreign ConfigMap was modified"
            );
            assert_eq!(config_text(&after), config_text(&before));
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholder_config_map_without_controller_is_adopted() {
    scenario!("config-map-adoption")
        .run(async |env| {
            // The predecessor's install created the ConfigMap by hand, before the controller ran.
            let placeholder = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": env.example.config_map_name(), "namespace": env.example.namespace()},
                "data": {"config.yml": "workloads: {}\n"},
            });
            let mut documents = namespace_documents(env);
            documents.push(placeholder);
            env.apply("placeholder.yaml", &documents).await;

            let settled = env.install_example().await;
            assert_config_map_metadata(&settled, &env.example.pool_name());
            assert_eq!(settled.config().loads(), [14, 13]);
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pool_over_a_managed_statefulset_fails_with_statefulset_in_use_and_touches_nothing()
 {
    scenario!("statefulset-in-use")
        .run(async |env| {
            let settled = env.install_example().await;
            let stray = "swarm-pool-stray";
            let mut pool = env.example.pool().clone();
            pool["metadata"]["name"] = json!(stray);
            pool["spec"]["configMap"] = json!(format!("{stray}-config"));
            let mark = env.request_mark().await;
            env.apply("stray-pool.yaml", &[pool]).await;

            let ready = wait_failed(env, stray).await;
            assert_eq!(ready["reason"], "StatefulSetInUse", "Ready: {ready}");
            let message = str_at(&ready, "/message");
            for name in [env.example.statefulset_name(), env.example.pool_name()] {
                assert!(
                    message.contains(&name),
                    "the condition names {name}: {message}"
                );
            }
            let warnings = wait_event(env, stray, "Warning", "StatefulSetInUse").await;
            assert!(warnings.iter().all(|e| !e.note.is_empty()), "{warnings:#?}");
            let config = env.config_map(&format!("{stray}-config")).await;
            assert!(config.is_none(), "the refused pool wrote no ConfigMap");
            assert_no_config_map_write_or_pod_delete(env, mark).await;

            // The older pool keeps its workers and its config.
            let now = wait_balanced(env, env.example.replicas()).await;
            assert_eq!(now.uids(), settled.uids(), "no worker was restarted");
            assert_eq!(
                now.config_map_resource_version(),
                settled.config_map_resource_version()
            );
        })
        .await;
}

/// Waits until pool `name` reports phase Failed for its current generation; returns its Ready
/// condition.
async fn wait_failed(env: &Env, name: &str) -> Value {
    eventually(&format!("pool {name} Failed"), || async {
        let pool = env.pool_named(name).await.ok_or("no such pool")?;
        let generation = &pool["metadata"]["generation"];
        let status = &pool["status"];
        if status["phase"] != "Failed" || status["observedGeneration"] != *generation {
            return Err(format!("status {status}"));
        }
        let mut conditions = status["conditions"].as_array().into_iter().flatten();
        let ready = conditions.find(|c| c["type"] == "Ready");
        ready
            .cloned()
            .ok_or_else(|| format!("no Ready condition: {status}"))
    })
    .await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_policy_none_with_exclusive_handoff_is_refused_with_what_to_set() {
    scenario!("invalid-rollout")
        .run(async |env| {
            let workers = install_workers(env).await;
            let mut pool = env.example.pool().clone();
            pool["spec"]["rollout"] = json!({"policy": "None"});
            let mark = env.request_mark().await;
            if env.is_sim() {
                // kube-sim does not evaluate the CRD's CEL rule (sim/README.md): the operator's own
                // validation refuses the pool.
                let failed = apply_failing(env, "pool-policy-none.yaml", &[pool], &workers).await;
                assert_failed(env, &failed, "InvalidRollout", mark).await;
                let ready = failed.condition("Ready").expect("Ready condition");
                assert!(
                    str_at(ready, "/message").contains("Overlap"),
                    "the condition says what to set: {ready}"
                );
            } else {
                // A real API server evaluates the CRD's CEL rule: the apply itself is refused.
                let out = env.apply_output("pool-policy-none.yaml", &[pool]).await;
                assert!(
                    !out.success
                        && out.stderr.contains("is invalid")
                        && out
                            .stderr
                            .contains("rollout.policy None needs rollout.handoff Overlap"),
                    "the CRD's validation rule refuses the pool and says what to set: {}",
                    out.stderr
                );
                assert!(env.pool().await.is_none(), "nothing was stored");
                assert_no_config_map_write_or_pod_delete(env, mark).await;
            }
        })
        .await;
}

/// Installs the CRDs, starts the operator, applies the example namespace and worker
/// StatefulSet, and waits for its pods to be Ready; returns their uids by name.
async fn install_workers(env: &mut Env) -> BTreeMap<String, String> {
    env.install_crds().await;
    env.start_operator().await;
    let mut documents = namespace_documents(env);
    documents.push(env.example.statefulset().clone());
    env.apply("workers.yaml", &documents).await;
    let sts = env.example.statefulset_name();
    let replicas = env.example.replicas();
    eventually("the example workers to be Ready", || async {
        let pods = worker_pods(&env.pods().await, &sts);
        if pods.len() == replicas && pods.values().all(|p| p.ready && !p.terminating) {
            Ok(pods
                .into_iter()
                .map(|(name, pod)| (name, pod.uid))
                .collect())
        } else {
            Err(format!("pods {pods:?}"))
        }
    })
    .await
}

/// Applies `documents` (holding a SwarmPool the operator must refuse) and waits for the pool
/// to report phase `Failed` for its current generation; asserts the worker pods (`workers`,
/// uids by name) were left alone.
async fn apply_failing(
    env: &Env,
    file: &str,
    documents: &[Value],
    workers: &BTreeMap<String, String>,
) -> Observed {
    env.apply(file, documents).await;
    let failed = wait_for(env, "phase Failed", |o| {
        if o.phase() != "Failed" {
            return Err("not Failed".into());
        }
        status_current(o)
    })
    .await;
    assert_eq!(
        &failed.uids(),
        workers,
        "no worker pod may be touched by a failed pool"
    );
    failed
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
