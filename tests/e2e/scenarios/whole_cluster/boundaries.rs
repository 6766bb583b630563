//! What neither a pool's author nor a worker can make happen, on a real API server where RBAC
//! and admission are real (docs/security.md names each claim beside its test).
//!
//! A pool of the cluster-wide operator deletes and writes only its own workers and ConfigMap:
//! not a pod carrying its workers' labels that its StatefulSet does not control, nor anything
//! of another namespace holding a StatefulSet, pods and a ConfigMap of the same names. A
//! worker's pod-bound token under `deploy/worker-rbac` reads no ConfigMap of another namespace,
//! may not list its own namespace's (it may watch them), rewrites no config, reads no Secret,
//! and writes no Lease but its own: none of another namespace (RBAC), none of another pool's
//! worker (`deploy/worker-lease-policy`). Both take the cluster alone: the operator watches
//! every namespace, and the policy binds cluster-wide.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::worker_lease_policy::{
    POLICY_DIR, RemovePolicy, WORKER_ACCOUNT, assert_refused, assert_type_checked, lease,
    two_worker_pods, wait_enforced, write,
};
use crate::harness::Env;
use crate::harness::kubectl::{Kubectl, Output};
use crate::harness::observe::{assert_invariants, balanced, wait_for};
use crate::harness::poll::eventually;
use crate::harness::scenario;
use crate::scenarios::scale;

/// A namespace beside the pool's, holding objects named like the pool's own.
const ELSEWHERE: &str = "swarm-elsewhere";

/// Deletes [`ELSEWHERE`] when the scenario ends, passed or failed.
struct RemoveElsewhere(Kubectl);

impl Drop for RemoveElsewhere {
    fn drop(&mut self) {
        let args = ["delete", "namespace", ELSEWHERE, "--ignore-not-found"];
        let out = self.0.run_blocking(&args);
        if !out.success {
            eprintln!(
                "note: could not delete namespace {ELSEWHERE}: {}",
                out.stderr
            );
        }
    }
}

/// A fresh [`ELSEWHERE`] holding a ConfigMap named like the pool's, controlled by nothing (in
/// the pool's own namespace the pool would adopt it), and `more`, moved there.
async fn plant_elsewhere(env: &Env, more: Vec<Value>) -> RemoveElsewhere {
    let remove = RemoveElsewhere(env.kubectl.clone());
    env.kubectl
        .ok(&["delete", "namespace", ELSEWHERE, "--ignore-not-found"])
        .await;
    let mut documents = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ELSEWHERE}}),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": env.example.config_map_name()},
            "data": {"config.yml": "version: 7\nworkloads: {}\n"},
        }),
    ];
    documents.extend(more);
    for doc in &mut documents[1..] {
        doc["metadata"]["namespace"] = json!(ELSEWHERE);
    }
    env.apply("elsewhere.yaml", &documents).await;
    remove
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_deletes_and_writes_only_its_own_workers_never_lookalikes_or_another_namespaces() {
    scenario!("pool-boundaries")
        .real_cluster_only(
            "the lookalikes rely on the real StatefulSet controller's adoption rules",
        )
        .run(async |env| {
            let _remove = plant_elsewhere(env, vec![env.example.statefulset().clone()]).await;
            let mut documents = vec![env.example.namespace_manifest().clone()];
            documents.push(lookalike_pod(env));
            env.apply("lookalike.yaml", &documents).await;
            let before = eventually("the planted pods", || snapshot(&*env)).await;

            let mark = env.request_mark().await;
            env.install_example().await;
            // A scale-up under DeletePods deletes workers that lose jobs: the path under test.
            scale(env, 3).await;
            let sts = env.example.statefulset_name();
            let settled = wait_for(env, "Balanced over 3 workers", |o| balanced(o, 3, &sts)).await;
            assert_invariants(env, &settled).await;

            let after = snapshot(env)
                .await
                .expect("the planted objects are still there");
            assert_eq!(after, before, "the planted objects were touched");
            assert_writes_stay_in_the_pools_namespace(env, mark).await;
        })
        .await;
}

/// A bare pod with the workers' labels and pod spec in the pool's namespace, named so that the
/// StatefulSet controller does not adopt it (no ordinal).
fn lookalike_pod(env: &Env) -> Value {
    let template = &env.example.statefulset()["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": template["metadata"].clone(),
        "spec": template["spec"].clone(),
    });
    let name = format!("{}-lookalike", env.example.statefulset_name());
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["namespace"] = json!(env.example.namespace());
    pod
}

/// What the planted objects are: each pod by namespace and name with its uid (and whether it
/// has an owner or is terminating), and the other namespace's ConfigMap's resourceVersion and
/// owners. `Err` until the other namespace's two workers and the lookalike exist.
async fn snapshot(env: &Env) -> Result<BTreeMap<String, String>, String> {
    let lookalike = format!("{}-lookalike", env.example.statefulset_name());
    let pools = env.example.namespace();
    let mut seen = BTreeMap::new();
    for (namespace, only) in [(ELSEWHERE, None), (pools.as_str(), Some(&lookalike))] {
        let out = env
            .kubectl
            .ok(&["-n", namespace, "get", "pods", "-o", "json"])
            .await;
        let list: Value = serde_json::from_str(&out).expect("kubectl get -o json");
        for pod in list["items"].as_array().into_iter().flatten() {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            if only.is_none_or(|only| only == name) {
                seen.insert(format!("pod {namespace}/{name}"), identity(pod));
            }
        }
    }
    if seen.len() != 3 {
        return Err(format!("pods {seen:?}"));
    }
    let config_map = env.example.config_map_name();
    let out = env
        .kubectl
        .ok(&[
            "-n",
            ELSEWHERE,
            "get",
            "configmap",
            &config_map,
            "-o",
            "json",
        ])
        .await;
    let cm: Value = serde_json::from_str(&out).expect("kubectl get -o json");
    let version = &cm["metadata"]["resourceVersion"];
    let owners = &cm["metadata"]["ownerReferences"];
    let key = format!("configmap {ELSEWHERE}/{config_map}");
    seen.insert(key, format!("resourceVersion {version}, owners {owners}"));
    Ok(seen)
}

/// A pod's uid, controller and deletion: any change means it was deleted or adopted.
fn identity(pod: &Value) -> String {
    let meta = &pod["metadata"];
    let controller = meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == true)
        .map(|o| format!("{}/{}", o["kind"], o["name"]));
    format!(
        "uid {}, controller {controller:?}, deleting {}",
        meta["uid"], meta["deletionTimestamp"]
    )
}

/// Since `mark`, the operator deleted some of the pool's workers and no other pod, wrote nothing
/// in [`ELSEWHERE`], and no Lease. (It may write in namespaces with pools of their own, such as
/// one an earlier scenario left terminating.)
async fn assert_writes_stay_in_the_pools_namespace(env: &Env, mark: usize) {
    let Some(requests) = env.operator_requests_since(mark).await else {
        env.note_skipped("the operator's requests (no audit log)");
        return;
    };
    let namespace = env.example.namespace();
    let sts = env.example.statefulset_name();
    let workers: Vec<String> = (0..3).map(|i| format!("{sts}-{i}")).collect();
    let (mut deleted, mut stray) = (Vec::new(), Vec::new());
    for r in requests.iter().filter(|r| r.is_write()) {
        let Some(t) = r.target() else { continue };
        let in_pools = t.namespace.as_deref() == Some(namespace.as_str());
        if t.resource == "pods" && r.method == "DELETE" {
            let worker = t.name.as_ref().is_some_and(|name| workers.contains(name));
            if in_pools && worker {
                deleted.push(r.describe());
                continue;
            }
        }
        let elsewhere = t.namespace.as_deref() == Some(ELSEWHERE);
        if elsewhere || t.resource == "leases" || (in_pools && t.resource == "pods") {
            stray.push(r.describe());
        }
    }
    assert!(stray.is_empty(), "writes beyond the pool's own: {stray:#?}");
    assert!(!deleted.is_empty(), "the scale-up deleted some workers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_token_reads_no_other_namespaces_config_and_writes_no_lease_but_its_own() {
    scenario!("worker-boundaries")
        .real_cluster_only("kube-sim has no authentication, RBAC or admission policies")
        .run(async |env| {
            let _remove = plant_elsewhere(env, Vec::new()).await;
            let ((a, uid_a), _) = two_worker_pods(env).await;
            let namespace = env.example.namespace();
            let own = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": env.example.config_map_name(), "namespace": namespace},
                "data": {"config.yml": "version: 7\nworkloads: {}\n"},
            });
            env.apply("own-config.yaml", &[own]).await;
            let kubeconfig = env
                .pod_bound_kubeconfig(&namespace, WORKER_ACCOUNT, &a, &uid_a)
                .await
                .expect("a real cluster");
            let worker = Kubectl::new(&kubeconfig, &env.scratch("worker-kube-cache"));
            reads_only_its_namespaces_config_maps_by_name(env, &worker).await;
            writes_no_config_and_no_lease_elsewhere(env, &worker, &a, &uid_a).await;

            let _unbind = RemovePolicy(env.kubectl.clone());
            env.kubectl.ok(&["apply", "-k", POLICY_DIR]).await;
            assert_type_checked(env).await;
            let theirs = another_pools_lease(env, &uid_a);
            wait_enforced(env, &worker, &theirs).await;
            let forged = write(env, &worker, "create", &theirs).await;
            assert_refused(
                &forged,
                &[
                    "only the pod named other-worker-0 may write it",
                    &format!("this token is bound to pod {a}"),
                ],
            );
        })
        .await;
}

/// The worker GETs and WATCHes its pool's ConfigMap by name, and nothing more: it lists none
/// of its namespace's, reads no Secret, and reads or watches no ConfigMap of another namespace.
async fn reads_only_its_namespaces_config_maps_by_name(env: &Env, worker: &Kubectl) {
    let namespace = env.example.namespace();
    let name = env.example.config_map_name();
    let watch = |ns: &str| {
        format!(
            "/api/v1/namespaces/{ns}/configmaps?watch=true&fieldSelector=metadata.name%3D{name}&timeoutSeconds=1"
        )
    };
    let own = worker
        .run(&["-n", &namespace, "get", "configmap", &name])
        .await;
    assert!(own.success, "it reads its pool's ConfigMap: {own:?}");
    let own_watch = worker.run(&["get", "--raw", &watch(&namespace)]).await;
    assert!(
        own_watch.success,
        "it watches its pool's ConfigMap: {own_watch:?}"
    );

    let listed = worker.run(&["-n", &namespace, "get", "configmaps"]).await;
    assert_forbidden(&listed, "cannot list resource \"configmaps\"");
    let secret = worker
        .run(&["-n", &namespace, "get", "secret", "any"])
        .await;
    assert_forbidden(&secret, "cannot get resource \"secrets\"");
    let theirs = worker
        .run(&["-n", ELSEWHERE, "get", "configmap", &name])
        .await;
    assert_forbidden(&theirs, "cannot get resource \"configmaps\"");
    assert!(theirs.stderr.contains(ELSEWHERE), "{theirs:?}");
    let their_watch = worker.run(&["get", "--raw", &watch(ELSEWHERE)]).await;
    assert_forbidden(&their_watch, "cannot watch resource \"configmaps\"");
}

/// The worker rewrites no config, deletes no Lease, and writes no Lease of another namespace,
/// even one named like its own pod.
async fn writes_no_config_and_no_lease_elsewhere(env: &Env, worker: &Kubectl, a: &str, uid: &str) {
    let namespace = env.example.namespace();
    let name = env.example.config_map_name();
    let forged = r#"{"data":{"config.yml":"version: 8\nworkloads: {}\n"}}"#;
    let patched = worker
        .run(&[
            "-n",
            &namespace,
            "patch",
            "configmap",
            &name,
            "--type=merge",
            "-p",
            forged,
        ])
        .await;
    assert_forbidden(&patched, "cannot patch resource \"configmaps\"");
    let deleted = worker.run(&["-n", &namespace, "delete", "lease", a]).await;
    assert_forbidden(&deleted, "cannot delete resource \"leases\"");
    let elsewhere = write(env, worker, "create", &lease(ELSEWHERE, a, uid, 1)).await;
    assert_forbidden(&elsewhere, "cannot create resource \"leases\"");
    assert!(elsewhere.stderr.contains(ELSEWHERE), "{elsewhere:?}");
}

/// The Lease of another pool's worker, `other-worker-0`, in the worker's namespace.
fn another_pools_lease(env: &Env, holder: &str) -> Value {
    let mut theirs = lease(&env.example.namespace(), "other-worker-0", holder, 1);
    theirs["metadata"]["labels"] = json!({"swarm.io/pool": "other-pool"});
    theirs
}

/// Refused by RBAC (not admission), saying `says`.
fn assert_forbidden(out: &Output, says: &str) {
    assert!(
        !out.success && out.stderr.contains("(Forbidden)") && out.stderr.contains(says),
        "refused by RBAC, saying {says:?}: {out:?}"
    );
    assert!(
        !out.stderr.contains("ValidatingAdmissionPolicy"),
        "RBAC refuses it before admission: {out:?}"
    );
}
