//! `deploy/overlays/namespaced` installed the same way, through a user's overlay of it: two
//! replicas on the real node holding only a Role in their namespace (the examples' own), one
//! of them leading through a Lease there, and balancing a pool of that namespace through a
//! scale.

use std::time::Instant;

use serde_json::Value;

use super::install::assert_enforces_restricted;
use super::replicas::{self, name, pod_of};
use super::{examples_without_namespace, overlay};
use crate::harness::observe::{assert_invariants, balanced, wait_balanced, wait_for};
use crate::harness::{OPERATOR_IMAGE_ENV, scenario};
use crate::scenarios::scale;
use crate::scenarios::whole_cluster::deploy::{assert_restricted, container, only};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespaced_overlay_runs_on_a_real_node_and_balances_a_pool_of_its_namespace() {
    scenario!("real-node-namespaced")
        .image(OPERATOR_IMAGE_ENV)
        .run(async |env| {
            let applied = Instant::now();
            let install = overlay::install(
                env,
                "deploy/overlays/namespaced",
                env.image(OPERATOR_IMAGE_ENV),
            )
            .await;
            let namespace = install.namespace.clone();
            assert_eq!(namespace, env.example.namespace());
            let kinds: Vec<&str> = install
                .objects
                .iter()
                .filter_map(|o| o["kind"].as_str())
                .collect();
            // Cluster-wide, only the reviews of /metrics scrapers' tokens (cluster-scoped APIs).
            let cluster_bindings: Vec<&str> = install
                .objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRoleBinding")
                .filter_map(|o| o["roleRef"]["name"].as_str())
                .collect();
            assert!(
                kinds.contains(&"Role") && cluster_bindings == ["swarm-operator-metrics-auth"],
                "{kinds:?}, cluster-wide: {cluster_bindings:?}"
            );
            let deployment = only(&install.objects, "Deployment");
            assert_restricted(deployment);
            let watches = format!("--namespace={namespace}");
            assert!(
                container(deployment)["args"]
                    .as_array()
                    .is_some_and(|args| args.iter().any(|a| a == &Value::from(watches.as_str()))),
                "the operator watches its own namespace: {deployment}"
            );
            assert_enforces_restricted(env, &namespace).await;

            let pods = replicas::wait_ready(
                env,
                &namespace,
                "both replicas Ready on the real node",
                |_| Ok(()),
            )
            .await;
            eprintln!(
                "real-node-namespaced: kubectl apply -k to both replicas Ready on the real node: \
                    {:.1} s",
                applied.elapsed().as_secs_f64()
            );
            let leader = replicas::wait_one_leader(env, &namespace, &pods).await;
            for pod in &pods {
                replicas::wait_readyz(pod).await;
            }

            // The namespace is the install's: applying examples/namespace.yaml over it would take
            // its Pod Security label away.
            env.apply("examples.yaml", &examples_without_namespace(env))
                .await;
            let settled = wait_balanced(env, env.example.replicas()).await;
            assert_invariants(env, &settled).await;
            scale(env, 3).await;
            let sts = env.example.statefulset_name();
            let settled = wait_for(env, "Balanced over 3 workers", |o| balanced(o, 3, &sts)).await;
            assert_invariants(env, &settled).await;
            env.assert_exclusive();
            let leader_pod = pods
                .iter()
                .find(|p| name(p) == pod_of(&leader))
                .expect("the leader's pod");
            // The namespaced install reviews its scrapers' tokens too.
            let reader = replicas::assert_metrics_need_the_role(env, &namespace, leader_pod).await;
            let samples = replicas::metrics(leader_pod, &reader).await;
            assert!(
                samples["swarm_operator_reconciliations_total"] > 0.0,
                "the leader {leader} reconciled nothing"
            );
            assert_enforces_restricted(env, &namespace).await;
            install.remove().await;
        })
        .await;
}
