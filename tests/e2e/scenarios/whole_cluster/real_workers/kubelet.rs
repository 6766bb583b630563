//! The node's kubelet stopped (SIGSTOP) under a pool of three acknowledging Rust workers in
//! real containers, and one container killed meanwhile: the node's Lease goes silent and, within
//! the failover bound, every job of its workers is revoked (each `NodeLeaseSilent`); the kubelet
//! continued, the container runs again in its pod and the pool settles, with no job run twice.
//! Every pod on the node feels a stopped kubelet, so this scenario takes the cluster alone; the
//! faults of one container are `scenarios::real_workers::faults`'.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::harness::kubectl::repo_root;
use crate::harness::observe::{observe, wait_for};
use crate::harness::real_cluster::{self, ctr};
use crate::harness::worker_fleet::Reports;
use crate::harness::{Env, WORKER_IMAGE_ENV, scenario};
use crate::scenarios::acknowledge::{assert_failover_within, failover_bound, jobs_moved_off};
use crate::scenarios::real_workers::faults::{
    AcknowledgingPool, BACK_WITHIN, assert_no_job_twice_and_the_killed_restarted, container_id,
    install_acknowledging_pool, real_cluster_dir, worker_pod,
};
use crate::scenarios::real_workers::settle_acknowledged;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_kubelet_revokes_every_job_of_its_nodes_workers_and_they_run_none_twice() {
    scenario!("real-workers-kubelet-stopped")
        .image(WORKER_IMAGE_ENV)
        .run(async |env| {
            let cluster = real_cluster_dir(env);
            let AcknowledgingPool { reports, pods } =
                install_acknowledging_pool(env, WORKER_IMAGE_ENV).await;
            let victim = format!("{}-2", env.example.statefulset_name());

            kubelet_stopped(env, &cluster, &reports, &victim).await;

            assert_no_job_twice_and_the_killed_restarted(env, &pods);
        })
        .await;
}

/// The kubelet stopped: the node's Lease goes silent, and within the failover bound the operator
/// has revoked every job of the node's workers (they run on, read and acknowledge the revokes;
/// the pool has no member on another node, so the jobs wait unassigned); one container killed
/// meanwhile, which no kubelet restarts; the kubelet back: the node renews its Lease, the
/// container restarts in its pod and the pool settles.
async fn kubelet_stopped(env: &Env, cluster: &Path, reports: &Reports, victim: &str) {
    let before = observe(env).await.expect("observe the pool");
    let workers: Vec<String> = before
        .config()
        .workloads
        .iter()
        .map(|(pod, _)| pod.clone())
        .collect();
    let workers: Vec<&str> = workers.iter().map(String::as_str).collect();
    let stopped = Instant::now();
    real_cluster::script(&["signal", cluster_str(cluster), "kubelet", "STOP"]).await;
    let continued = ContinueKubelet(cluster.to_path_buf());
    let id = container_id(&worker_pod(env, victim).await);
    ctr(cluster, &["tasks", "kill", "-s", "SIGKILL", &id]).await;
    wait_for(env, "every job off the node's workers", |o| {
        jobs_moved_off(o, &workers)
    })
    .await;
    let moved = stopped.elapsed();
    assert_failover_within(victim, moved);
    let during = observe(env).await.expect("observe the pool");
    let unavailable = &during.pool["status"]["unavailableWorkers"];
    assert_eq!(
        unavailable.as_array().map(Vec::len),
        Some(workers.len()),
        "every worker of the silent node is out: {unavailable}"
    );
    assert!(
        unavailable
            .as_array()
            .into_iter()
            .flatten()
            .all(|w| w["reason"] == "NodeLeaseSilent"),
        "{unavailable}"
    );
    drop(continued);
    let back = Instant::now();
    settle_acknowledged(env, reports, 3, BACK_WITHIN).await;
    eprintln!(
        "{}: kubelet stopped and {victim}'s container killed: every job off the node's workers {:.1} s later (bound {:?}); kubelet continued: settled {:.1} s later",
        env.name(),
        moved.as_secs_f64(),
        failover_bound(),
        back.elapsed().as_secs_f64()
    );
}

/// SIGCONT to the kubelet when dropped, so a failing scenario leaves the node running.
struct ContinueKubelet(PathBuf);

impl Drop for ContinueKubelet {
    fn drop(&mut self) {
        let script = repo_root().join("scripts/real-cluster.sh");
        let _ = std::process::Command::new(script)
            .args(["signal", cluster_str(&self.0), "kubelet", "CONT"])
            .status();
    }
}

fn cluster_str(cluster: &Path) -> &str {
    cluster.to_str().expect("UTF-8 cluster path")
}
