//! `deploy/` installed as a user installs it, through an overlay of their own: two replicas in
//! containers of the real node, under the restricted Pod Security profile its namespace
//! enforces, Ready by their own `/readyz`, one of them leading, logging JSON and serving
//! metrics over HTTPS to a Prometheus whose token has the role, and to no one else; and the
//! leader, in the cluster, balancing the example pool
//! through a scale and back.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;

use super::replicas::{self, name, pod_of};
use super::{assert_no_pod_deleted_twice, overlay};
use crate::harness::observe::{assert_invariants, balanced, wait_balanced, wait_for};
use crate::harness::real_cluster::OPERATOR_NAMESPACE;
use crate::harness::{Env, OPERATOR_IMAGE_ENV, scenario};
use crate::scenarios::scale;
use crate::scenarios::whole_cluster::deploy::{assert_restricted, only};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_runs_two_restricted_replicas_on_a_real_node_whose_leader_balances_the_pool() {
    scenario!("real-node-deploy")
        .image(OPERATOR_IMAGE_ENV)
        .run(async |env| {
            let cluster = env
                .real_cluster_dir()
                .expect("the real node's cluster is one of scripts/real-cluster.sh");
            let applied = Instant::now();
            let install = overlay::install(env, "deploy", env.image(OPERATOR_IMAGE_ENV)).await;
            let namespace = install.namespace.clone();
            assert_eq!(namespace, OPERATOR_NAMESPACE);
            assert_restricted(only(&install.objects, "Deployment"));
            assert_enforces_restricted(env, &namespace).await;
            let pods = wait_two_replicas_ready(env, &namespace, applied).await;
            replicas::assert_containers_run(&cluster, &pods).await;
            let leader = replicas::wait_one_leader(env, &namespace, &pods).await;
            let reader = replicas::assert_metrics_need_the_role(env, &namespace, &pods[0]).await;
            for pod in &pods {
                replicas::wait_readyz(pod).await;
                replicas::json_log(env, &namespace, &name(pod)).await;
                replicas::metrics(pod, &reader).await;
            }
            the_leader_balances_the_pool(env).await;
            only_the_leader_worked(env, &pods, &leader, &reader).await;
            install.remove().await;
        })
        .await;
}

/// Admitted under the restricted profile, started, and Ready by their readiness probes: the
/// two replicas, whose times from `applied` it prints.
async fn wait_two_replicas_ready(env: &Env, namespace: &str, applied: Instant) -> Vec<Pod> {
    let pods = replicas::wait_ready(
        env,
        namespace,
        "both replicas Ready on the real node",
        |_| Ok(()),
    )
    .await;
    let to_ready: Vec<String> = pods
        .iter()
        .map(|pod| match replicas::seconds_to_ready(pod) {
            Some(seconds) => format!("{} {seconds} s", name(pod)),
            None => format!("{} ?", name(pod)),
        })
        .collect();
    eprintln!(
        "real-node-deploy: kubectl apply -k to both replicas Ready on the real node: {:.1} s \
         (pod start to Ready: {})",
        applied.elapsed().as_secs_f64(),
        to_ready.join(", ")
    );
    pods
}

/// The pool, with no operator but the one in the cluster: Balanced, through a scale to 3 and
/// back, no pod deleted twice and no job on two pods.
async fn the_leader_balances_the_pool(env: &Env) {
    env.apply_examples().await;
    let replicas_at_start = env.example.replicas();
    let settled = wait_balanced(env, replicas_at_start).await;
    assert_invariants(env, &settled).await;
    let sts = env.example.statefulset_name();
    for workers in [3, replicas_at_start] {
        let mark = env.request_mark().await;
        scale(env, workers).await;
        let settled = wait_for(env, &format!("Balanced over {workers} workers"), |o| {
            balanced(o, workers, &sts)
        })
        .await;
        assert_invariants(env, &settled).await;
        assert_no_pod_deleted_twice(env, mark).await;
    }
    env.assert_exclusive();
}

/// The leader did that work, and only the leader: its reconciliations, and the pool's events.
async fn only_the_leader_worked(env: &Env, pods: &[Pod], leader: &str, reader: &str) {
    let leader_pod = pod_of(leader).to_owned();
    for pod in pods {
        let samples = replicas::metrics(pod, reader).await;
        let reconciled = samples["swarm_operator_reconciliations_total"];
        if name(pod) == leader_pod {
            assert!(
                reconciled > 0.0,
                "the leader {leader_pod} reconciled nothing"
            );
        } else {
            assert_eq!(reconciled, 0.0, "the standby {} reconciled", name(pod));
        }
    }
    let reporters: Vec<String> = env
        .events()
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("SwarmPool"))
        .filter_map(|e| e.reporting_instance)
        .collect();
    assert!(
        !reporters.is_empty() && reporters.iter().all(|r| *r == leader_pod),
        "events about the pool reported by {reporters:?}, not only by the leader {leader_pod}"
    );
}

/// Asserts that the live namespace enforces the restricted Pod Security profile, as
/// deploy/namespace.yaml labels it.
pub(super) async fn assert_enforces_restricted(env: &Env, namespace: &str) {
    let api: Api<Namespace> = Api::all(env.client.clone());
    let live = api.get(namespace).await.expect("GET the namespace");
    let labels = live.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted"),
        "namespace {namespace} labels: {labels:?}"
    );
}
