//! Scenario 7: deleting a SwarmPool removes its ConfigMap and leaves the workers alone.

use super::kubectl_ns;
use crate::harness::Env;
use crate::harness::observe::{operator_pod_deletes, worker_pods};
use crate::harness::poll::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_pool_removes_its_config_map_and_keeps_the_worker_pods() {
    let mut env = Env::start("pool-deletion").await;
    let settled = env.install_example().await;
    let mark = env.request_mark().await;
    let config_map = env.example.config_map_name();

    kubectl_ns(&env, &["delete", "swarmpool", &env.example.pool_name()]).await;
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
        &env,
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
    if let Some(deletes) = operator_pod_deletes(&env, mark).await {
        assert!(deletes.is_empty(), "the operator deleted pods: {deletes:?}");
    }
    env.assert_operator_running();
}
