//! `deploy/worker-lease-policy` on a real API server: a worker's pod-bound token writes the
//! Lease named like its pod and no other one (not even by removing the `swarm.io/pool` label
//! in the same update), while the operator's ServiceAccount, the garbage collector and the
//! namespace controller still may. The policy is cluster-wide, and while it is bound every other
//! writer of a labelled Lease is refused, the worker processes of other scenarios among them
//! (they write with the admin kubeconfig): so the scenario takes the cluster to itself and
//! removes the policy when it ends. kube-sim evaluates no admission policies.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::Env;
use crate::harness::kubectl::{Kubectl, Output};
use crate::harness::manifests::{parse_yaml_stream, str_at, write_manifest};
use crate::harness::poll::eventually;
use crate::harness::real_cluster::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE};
use crate::harness::scenario;
use crate::scenarios::scale;

pub(super) const POLICY_DIR: &str = "deploy/worker-lease-policy";
const POLICY: &str = "swarm-worker-lease";
/// deploy/worker-rbac's ServiceAccount.
pub(crate) const WORKER_ACCOUNT: &str = "swarm-worker";

/// Unbinds the policy when the scenario ends, passed or failed, before the cluster is shared
/// again (held by the scenario's body, so dropped before its environment lets the cluster go).
pub(super) struct RemovePolicy(pub(super) Kubectl);

impl Drop for RemovePolicy {
    fn drop(&mut self) {
        let out = self
            .0
            .run_blocking(&["delete", "-k", POLICY_DIR, "--ignore-not-found"]);
        if !out.success {
            eprintln!("note: could not remove {POLICY_DIR}: {}", out.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cannot_forge_another_pods_lease_under_the_worker_lease_policy() {
    scenario!("worker-lease-policy")
        .real_cluster_only("kube-sim evaluates no admission policies")
        .run(async |env| {
            let namespace = env.example.namespace();
            let ns = namespace.as_str();
            let (a, b) = two_worker_pods(env).await;
            let _remove = RemovePolicy(env.kubectl.clone());
            env.kubectl.ok(&["apply", "-k", POLICY_DIR]).await;
            assert_type_checked(env).await;
            let writers = Writers::of(env, &a).await;
            wait_enforced(env, &writers.worker, &lease(ns, &b.0, &b.1, 1)).await;
            a_pod_writes_its_own_lease_only(env, &writers, &a, &b).await;

            // The garbage collector deletes B's Lease once pod B is gone.
            scale(env, 1).await;
            eventually("the garbage collector to delete B's Lease", || async {
                let out = env
                    .kubectl
                    .run(&[
                        "-n",
                        ns,
                        "get",
                        "lease",
                        &b.0,
                        "--ignore-not-found",
                        "-o",
                        "name",
                    ])
                    .await;
                if out.success && out.stdout.trim().is_empty() {
                    Ok(())
                } else {
                    Err(format!("{out:?}"))
                }
            })
            .await;

            // The namespace controller deletes A's Lease with the namespace.
            env.kubectl
                .ok(&["delete", "namespace", ns, "--wait=true", "--timeout=90s"])
                .await;
        })
        .await;
}

/// Two worker pods, A and B (name, uid), running as deploy/worker-rbac's ServiceAccount (a
/// token is bound only to a pod of its own account); the operator's ServiceAccount may write
/// Leases there too (deploy/ lets it only read them), so that its writes get as far as the
/// policy.
pub(super) async fn two_worker_pods(env: &Env) -> ((String, String), (String, String)) {
    let namespace = env.example.namespace();
    let ns = namespace.as_str();
    let mut documents = vec![env.example.namespace_manifest().clone()];
    let rendered = env.kubectl.ok(&["kustomize", "deploy/worker-rbac"]).await;
    for mut doc in parse_yaml_stream(&rendered, "kubectl kustomize deploy/worker-rbac") {
        doc["metadata"]["namespace"] = json!(ns);
        for subject in doc["subjects"].as_array_mut().into_iter().flatten() {
            subject["namespace"] = json!(ns);
        }
        documents.push(doc);
    }
    documents.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "swarm-operator-writes-leases", "namespace": ns},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": WORKER_ACCOUNT,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": OPERATOR_ACCOUNT,
            "namespace": OPERATOR_NAMESPACE,
        }],
    }));
    let mut sts = env.example.statefulset().clone();
    sts["spec"]["replicas"] = json!(2);
    sts["spec"]["template"]["spec"]["serviceAccountName"] = json!(WORKER_ACCOUNT);
    documents.push(sts);
    env.apply("workers.yaml", &documents).await;
    let sts_name = env.example.statefulset_name();
    let (a, b) = (format!("{sts_name}-0"), format!("{sts_name}-1"));
    let uid_a = pod_uid(env, ns, &a).await;
    let uid_b = pod_uid(env, ns, &b).await;
    ((a, uid_a), (b, uid_b))
}

/// kubectl as pod A's worker (a token bound to the pod) and as the operator's ServiceAccount.
struct Writers {
    worker: Kubectl,
    operator: Kubectl,
}

impl Writers {
    async fn of(env: &Env, (a, uid_a): &(String, String)) -> Writers {
        let ns = env.example.namespace();
        let worker = Kubectl::new(
            &env.pod_bound_kubeconfig(&ns, WORKER_ACCOUNT, a, uid_a)
                .await
                .expect("a real cluster"),
            &env.scratch("worker-kube-cache"),
        );
        let operator = Kubectl::new(
            &env.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
                .await,
            &env.scratch("operator-kube-cache"),
        );
        Writers { worker, operator }
    }
}

/// The API server enforces a new policy once its informer has it: until a forged write of
/// `forged` by `worker`, dry run, is refused.
pub(super) async fn wait_enforced(env: &Env, worker: &Kubectl, forged: &Value) {
    let dry_run = env.scratch("dry-run-lease.yaml");
    write_manifest(&dry_run, std::slice::from_ref(forged));
    eventually("the policy to refuse a forged Lease", || async {
        let out = worker
            .run(&["create", "--dry-run=server", "-f", path(&dry_run)])
            .await;
        if refused_by_policy(&out) {
            Ok(())
        } else {
            Err(format!("{out:?}"))
        }
    })
    .await;
}

/// Pod A writes its own Lease, and no other: not B's (which the operator may write), not by
/// removing its label, not claiming another pod instance; nor does a credential bound to no
/// pod, a cluster admin's included. Unlabelled Leases are not the policy's business.
async fn a_pod_writes_its_own_lease_only(
    env: &Env,
    writers: &Writers,
    (a, uid_a): &(String, String),
    (b, uid_b): &(String, String),
) {
    let namespace = env.example.namespace();
    let ns = namespace.as_str();
    let (worker, operator) = (&writers.worker, &writers.operator);
    let lease_b = lease(ns, b, uid_b, 1);

    // A writes its own Lease: create, then update (the worker's read-modify-write).
    assert_allowed(
        &write(env, worker, "create", &lease(ns, a, uid_a, 1)).await,
        "A creates its Lease",
    );
    assert_allowed(
        &write(env, worker, "replace", &lease(ns, a, uid_a, 2)).await,
        "A updates its Lease",
    );

    // A cannot write B's Lease, and says what to fix.
    let forged = write(env, worker, "create", &lease_b).await;
    assert_refused(
        &forged,
        &[
            &format!("only the pod named {b} may write it"),
            &format!("this token is bound to pod {a}"),
        ],
    );

    // The operator's ServiceAccount may.
    assert_allowed(
        &write(env, operator, "create", &lease_b).await,
        "the operator creates B's Lease",
    );

    // A cannot update B's Lease, nor remove its label to escape the policy.
    let forged = write(env, worker, "replace", &lease(ns, b, uid_b, 2)).await;
    assert_refused(&forged, &[&format!("only the pod named {b} may write it")]);
    let mut unlabelled = lease(ns, b, uid_b, 2);
    unlabelled["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("labels");
    let escape = write(env, worker, "replace", &unlabelled).await;
    assert_refused(&escape, &[&format!("only the pod named {b} may write it")]);

    // Nor does a credential bound to no pod write it, a cluster admin's included.
    let admin = write(env, &env.kubectl, "replace", &lease(ns, b, uid_b, 2)).await;
    assert_refused(&admin, &["presented no pod-bound token"]);

    // On its own Lease, A claims no other pod instance.
    let impostor = write(env, worker, "replace", &lease(ns, a, uid_b, 3)).await;
    assert_refused(
        &impostor,
        &[&format!(
            "spec.holderIdentity must be the uid of the pod the token is bound to, {uid_a}"
        )],
    );

    // Leases without the label are not the policy's business.
    let mut other = lease(ns, "not-a-worker", uid_a, 1);
    other["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("labels");
    assert_allowed(
        &write(env, worker, "create", &other).await,
        "an unlabelled Lease",
    );
}

/// The uid of pod `name`, once the StatefulSet controller has created it.
async fn pod_uid(env: &Env, ns: &str, name: &str) -> String {
    eventually(&format!("pod {name}"), || async {
        let out = env
            .kubectl
            .run(&[
                "-n",
                ns,
                "get",
                "pod",
                name,
                "--ignore-not-found",
                "-o",
                "jsonpath={.metadata.uid}",
            ])
            .await;
        let uid = out.stdout.trim().to_owned();
        if out.success && !uid.is_empty() {
            Ok(uid)
        } else {
            Err(format!("{out:?}"))
        }
    })
    .await
}

/// The API server has compiled the policy and found every expression well typed.
pub(super) async fn assert_type_checked(env: &Env) {
    let policy: Value = eventually("the policy's type check", || async {
        let out = env
            .kubectl
            .ok(&["get", "validatingadmissionpolicy", POLICY, "-o", "json"])
            .await;
        let policy: Value = serde_json::from_str(&out).expect("kubectl get -o json");
        if policy["status"]["observedGeneration"] == policy["metadata"]["generation"] {
            Ok(policy)
        } else {
            Err(format!("status {}", policy["status"]))
        }
    })
    .await;
    assert!(
        policy["status"]["typeChecking"]["expressionWarnings"].is_null(),
        "the policy's expressions type-check: {}",
        policy["status"]
    );
}

/// A worker's Lease as the protocol writes it: named like pod `name` (of uid `holder`),
/// labelled with the pool, acknowledging `version`, owned by the pod.
pub(super) fn lease(ns: &str, name: &str, holder: &str, version: u32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"swarm.io/pool": "swarm-pool"},
            "annotations": {"swarm.io/acked-version": version.to_string()},
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "uid": holder,
            }],
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10},
    })
}

/// `kubectl <verb> -f` of `lease` as `kubectl`'s identity (`replace` is a PUT, the update verb
/// the worker's Role grants).
pub(super) async fn write(env: &Env, kubectl: &Kubectl, verb: &str, lease: &Value) -> Output {
    let file = env.scratch(&format!("lease-{}.yaml", str_at(lease, "/metadata/name")));
    write_manifest(&file, std::slice::from_ref(lease));
    kubectl.run(&[verb, "-f", path(&file)]).await
}

fn path(file: &Path) -> &str {
    file.to_str().expect("UTF-8 scratch path")
}

pub(super) fn refused_by_policy(out: &Output) -> bool {
    !out.success
        && out
            .stderr
            .contains(&format!("ValidatingAdmissionPolicy '{POLICY}'"))
}

pub(super) fn assert_allowed(out: &Output, what: &str) {
    assert!(out.success, "{what} is allowed: {out:?}");
}

pub(super) fn assert_refused(out: &Output, says: &[&str]) {
    assert!(refused_by_policy(out), "refused by {POLICY}: {out:?}");
    assert!(out.stderr.contains("(Forbidden)"), "{out:?}");
    for text in says {
        assert!(
            out.stderr.contains(text),
            "the refusal says {text:?}: {out:?}"
        );
    }
}
