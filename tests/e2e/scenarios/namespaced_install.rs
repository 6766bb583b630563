//! The namespaced overlay of `deploy/` installs a Role instead of a ClusterRole and an
//! operator that watches one namespace, and that Role covers every request the operator makes
//! over a pool's life (checked against the audit log on a real cluster, enforced by RBAC there).
//! The overlay names the examples' namespace, so the scenario runs there, beside the others.

use serde_json::Value;

use crate::harness::manifests::str_at;
use crate::harness::observe::{balanced, wait_balanced, wait_for};
use crate::harness::real_cluster::{CLUSTER_SCOPED_APPLY, OPERATOR_ACCOUNT};
use crate::harness::scenario;
use crate::scenarios::scale;
use crate::scenarios::whole_cluster::deploy::{
    apply_kustomization, assert_restricted, assert_rules_allow, container, only,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_namespaced_overlay_installs_a_role_and_a_namespaced_operator() {
    scenario!("deploy-namespaced")
        .in_examples_namespace()
        .run(async |env| {
            let overlay = "deploy/overlays/namespaced";
            // It installs the CRD too, which scenarios beside this one apply as well.
            let objects = {
                let _one_at_a_time = CLUSTER_SCOPED_APPLY.lock().await;
                apply_kustomization(env, overlay).await
            };
            let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
            assert!(
                kinds.contains(&"Role") && kinds.contains(&"RoleBinding"),
                "{kinds:?}"
            );
            // Cluster-wide, only the reviews of /metrics scrapers' tokens (cluster-scoped APIs)
            // and the role a scraper is bound to.
            let cluster_wide = |kind: &str| -> Vec<&str> {
                objects
                    .iter()
                    .filter(|o| o["kind"] == kind)
                    .filter_map(|o| o["metadata"]["name"].as_str())
                    .collect()
            };
            assert_eq!(
                cluster_wide("ClusterRole"),
                [
                    "swarm-operator-metrics-auth",
                    "swarm-operator-metrics-reader"
                ],
                "a single-namespace install grants nothing else cluster-wide: {kinds:?}"
            );
            let bindings: Vec<&str> = objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRoleBinding")
                .filter_map(|o| o["roleRef"]["name"].as_str())
                .collect();
            assert_eq!(bindings, ["swarm-operator-metrics-auth"], "{kinds:?}");
            let role = only(&objects, "Role");
            let watched = str_at(role, "/metadata/namespace");
            let deployment = only(&objects, "Deployment");
            let args: Vec<String> = container(deployment)
                .get("args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let namespace_arg = args
                .iter()
                .position(|a| a == "--namespace")
                .and_then(|i| args.get(i + 1).cloned())
                .or_else(|| {
                    args.iter()
                        .find_map(|a| a.strip_prefix("--namespace=").map(str::to_string))
                });
            assert_eq!(
                namespace_arg.as_deref(),
                Some(watched.as_str()),
                "the operator watches the namespace its Role covers: args {args:?}"
            );
            assert_restricted(deployment);

            // Run the operator as that install does, as the overlay's ServiceAccount and on its
            // namespace only (out of cluster: the Deployment's pod would run no process here), and
            // check that the Role covers a pool's life.
            env.kubectl
                .ok(&["-n", &watched, "delete", "deployment", "swarm-operator"])
                .await;
            let kubeconfig = env
                .service_account_kubeconfig(&watched, OPERATOR_ACCOUNT)
                .await;
            let mark = env.request_mark().await;
            env.start_operator_as(&kubeconfig, &[&format!("--namespace={watched}")])
                .await;
            env.apply_examples().await;
            wait_balanced(env, env.example.replicas()).await;
            scale(env, 3).await;
            let sts = env.example.statefulset_name();
            wait_for(env, "Balanced over 3 workers", |o| balanced(o, 3, &sts)).await;
            match env.operator_requests_since(mark).await {
                Some(requests) => assert_rules_allow(&requests, role["rules"].as_array(), "Role"),
                None => env.note_skipped("the operator's requests against the Role"),
            }
        })
        .await;
}
