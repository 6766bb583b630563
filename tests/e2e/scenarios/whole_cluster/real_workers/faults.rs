//! Faults of acknowledging workers in real containers, one after the other on one pool of three
//! (`rollout.policy: Acknowledge`) on the workers' default permit, each with no job run twice and
//! each within the failover bound of docs/worker-protocol.md, for the workers of each language
//! (the Rust example, the Python worker and the Go module's example):
//!
//! - a worker's process SIGKILLed through containerd: the kubelet starts the container again in
//!   the same pod (same uid), and the new process starts fenced (its first report line runs
//!   nothing) and takes its jobs back with its first read;
//! - a worker frozen through its cgroup (`ctr tasks pause`, the freezer): its probe times out,
//!   its pod turns NotReady and its jobs move; thawed, its permit has lapsed, it runs none of
//!   them again and becomes a member again;
//! - a worker's network cut from the API server (its pod's default route removed inside its
//!   network namespace): its reads fail, it answers not ready, its jobs move, and it rejoins
//!   when the route returns;
//! - the node's kubelet stopped (SIGSTOP) and a container killed meanwhile: the node's Lease
//!   goes silent and every job of its workers is revoked; the kubelet continued, the container
//!   runs again and the pool settles. This one is the node's, not the worker's: the Rust
//!   workers' scenario alone takes it.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use swarm_operator::planner::membership::START_WINDOW;

use super::pod_log::PodLog;
use super::{acknowledging_workers, reports_dir, settle_acknowledged, worker_rbac};
use crate::harness::kubectl::repo_root;
use crate::harness::observe::{observe, wait_for};
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::{self, ctr};
use crate::harness::worker_fleet::Reports;
use crate::harness::{
    Env, GO_WORKER_IMAGE_ENV, PYTHON_WORKER_IMAGE_ENV, WORKER_IMAGE_ENV, scenario,
};
use crate::scenarios::acknowledge::{assert_failover_within, failover_bound, jobs_moved_off};
use crate::scenarios::scale;

/// How long to wait for a worker back after a fault.
const BACK_WITHIN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_worker_containers_killed_frozen_cut_off_or_orphaned_never_run_a_job_twice() {
    faults("real-workers-faults", WORKER_IMAGE_ENV, Kubelet::Stopped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_worker_containers_killed_frozen_or_cut_off_never_run_a_job_twice() {
    faults("real-python-faults", PYTHON_WORKER_IMAGE_ENV, Kubelet::Left).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_worker_containers_killed_frozen_or_cut_off_never_run_a_job_twice() {
    faults("real-go-faults", GO_WORKER_IMAGE_ENV, Kubelet::Left).await;
}

/// Whether a scenario also stops the node's kubelet.
#[derive(PartialEq)]
enum Kubelet {
    Stopped,
    Left,
}

/// The faults on a pool of three workers of the image `image_env` names.
async fn faults(name: &str, image_env: &'static str, kubelet: Kubelet) {
    scenario!(name)
        .image(image_env)
        .run(async |env| {
            let cluster = env
                .real_cluster_dir()
                .expect("the real node's cluster is one of scripts/real-cluster.sh");
            let reports = reports_dir(env);
            let pods = PodLog::start(env, "app=swarm-worker");
            env.install_crds().await;
            env.start_operator().await;
            env.watch_reports(&env.example.pool_name(), reports.clone());
            let namespace = env.example.namespace();
            let mut documents = vec![env.example.namespace_manifest().clone()];
            documents.extend(worker_rbac(env, &namespace).await);
            documents.extend(acknowledging_workers(env, env.image(image_env), &reports));
            env.apply("real-ack-workers.yaml", &documents).await;
            scale(env, 3).await;
            settle_acknowledged(env, &reports, 3, BACK_WITHIN).await;
            let sts = env.example.statefulset_name();
            let victim = format!("{sts}-1");

            killed_process(env, &cluster, &reports, &victim).await;
            frozen(env, &cluster, &reports, &victim).await;
            cut_off(env, &cluster, &reports, &victim).await;
            if kubelet == Kubelet::Stopped {
                kubelet_stopped(env, &cluster, &reports, &format!("{sts}-2")).await;
            }

            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            let restarts: i32 = pods.instances().iter().map(|i| i.restarts).sum();
            let killed = if kubelet == Kubelet::Stopped { 2 } else { 1 };
            assert!(
                restarts >= killed,
                "the killed containers restarted: {restarts}"
            );
        })
        .await;
}

/// SIGKILL of the worker's process: the container restarts in the same pod and starts fenced.
async fn killed_process(env: &Env, cluster: &Path, reports: &Reports, victim: &str) {
    let before = worker_pod(env, victim).await;
    let uid = before.metadata.uid.clone().unwrap_or_default();
    let killed = Timestamp::now();
    let started = Instant::now();
    ctr(
        cluster,
        &["tasks", "kill", "-s", "SIGKILL", &container_id(&before)],
    )
    .await;
    let (uid_ref, before_ref) = (&uid, &before);
    eventually_within(
        &format!("{victim}'s container restarted"),
        BACK_WITHIN,
        || async move {
            let now = worker_pod(env, victim).await;
            assert_eq!(
                now.metadata.uid.as_deref(),
                Some(uid_ref.as_str()),
                "{victim} is the same pod instance: the container restarts in it"
            );
            if restarts(&now) > restarts(before_ref) {
                Ok(())
            } else {
                Err(format!("restartCount {}", restarts(&now)))
            }
        },
    )
    .await;
    let settled = settle_acknowledged(env, reports, 3, BACK_WITHIN).await;
    let back = started.elapsed();
    // The new process's first line runs nothing: it starts fenced, whatever its entry says.
    let lines: Vec<_> = reports
        .worker_lines(&uid)
        .into_iter()
        .filter(|line| line.at > killed)
        .collect();
    let first = lines.first().expect("the restarted worker reported");
    assert!(
        first.running.is_empty() && first.version.is_none(),
        "started fenced: {first:?}"
    );
    let entry = settled
        .config()
        .workload(victim)
        .map_or(0, |w| w.jobs.len());
    eprintln!(
        "{}: SIGKILL of {victim}'s process: running its {entry} jobs again in the same pod {:.1} s later",
        env.name(),
        back.as_secs_f64()
    );
    // Past the operator's start window its pod would count as failed and its jobs would move.
    assert!(
        back < START_WINDOW.unsigned_abs(),
        "{victim} took {back:?} to run its jobs again"
    );
}

/// The worker's container frozen (cgroup freezer) past its Lease, then thawed.
async fn frozen(env: &Env, cluster: &Path, reports: &Reports, victim: &str) {
    let id = container_id(&worker_pod(env, victim).await);
    let started = Instant::now();
    ctr(cluster, &["tasks", "pause", &id]).await;
    let moved = jobs_move_off(env, victim, started).await;
    let thawed = Timestamp::now();
    ctr(cluster, &["tasks", "resume", &id]).await;
    settle_acknowledged(env, reports, 3, BACK_WITHIN).await;
    let uid = worker_pod(env, victim)
        .await
        .metadata
        .uid
        .unwrap_or_default();
    let after: Vec<_> = reports
        .worker_lines(&uid)
        .into_iter()
        .filter(|line| line.at >= thawed)
        .collect();
    let first = after.first().expect("the thawed worker reported");
    assert!(
        first.running.is_empty(),
        "thawed, it fenced itself first: {first:?}"
    );
    eprintln!(
        "{}: {victim} frozen: its jobs moved {:.1} s after the freeze (bound {:?}); thawed, it fenced itself and rejoined in {:.1} s",
        env.name(),
        moved.as_secs_f64(),
        failover_bound(),
        started.elapsed().as_secs_f64() - moved.as_secs_f64()
    );
}

/// The worker's pod network cut from the API server (no default route), then restored.
async fn cut_off(env: &Env, cluster: &Path, reports: &Reports, victim: &str) {
    let id = container_id(&worker_pod(env, victim).await);
    let pid = task_pid(cluster, &id).await;
    let route = netns(&pid, &["ip", "route", "show", "default"]).await;
    let route = route.trim().to_owned();
    assert!(!route.is_empty(), "{victim}'s pod has a default route");
    let started = Instant::now();
    netns(&pid, &["ip", "route", "del", "default"]).await;
    let moved = jobs_move_off(env, victim, started).await;
    let mut add = vec!["ip", "route", "add"];
    add.extend(route.split_whitespace());
    netns(&pid, &add).await;
    let restored = Instant::now();
    settle_acknowledged(env, reports, 3, BACK_WITHIN).await;
    eprintln!(
        "{}: {victim}'s network cut: its jobs moved {:.1} s later (bound {:?}); it rejoined {:.1} s after the route came back",
        env.name(),
        moved.as_secs_f64(),
        failover_bound(),
        restored.elapsed().as_secs_f64()
    );
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
struct ContinueKubelet(std::path::PathBuf);

impl Drop for ContinueKubelet {
    fn drop(&mut self) {
        let script = repo_root().join("scripts/real-cluster.sh");
        let _ = std::process::Command::new(script)
            .args(["signal", cluster_str(&self.0), "kubelet", "CONT"])
            .status();
    }
}

/// Waits until `victim` holds no job and nothing is in transit; fails if that took longer than
/// the failover bound after `since`. Returns how long it took.
async fn jobs_move_off(env: &Env, victim: &str, since: Instant) -> Duration {
    wait_for(env, &format!("{victim}'s jobs on the others"), |o| {
        jobs_moved_off(o, &[victim])
    })
    .await;
    let moved = since.elapsed();
    assert_failover_within(victim, moved);
    moved
}

async fn worker_pod(env: &Env, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.example.namespace());
    api.get(name)
        .await
        .unwrap_or_else(|e| panic!("GET pod {name}: {e}"))
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// The containerd id of the pod's (one) container.
fn container_id(pod: &Pod) -> String {
    let id = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.container_id.clone())
        .expect("the pod reports its container");
    id.strip_prefix("containerd://")
        .expect("a containerd container")
        .to_owned()
}

/// The host pid of container `id`'s task.
async fn task_pid(cluster: &Path, id: &str) -> String {
    let tasks = ctr(cluster, &["tasks", "ls"]).await;
    tasks
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next() == Some(id)).then(|| fields.next().map(str::to_owned))?
        })
        .unwrap_or_else(|| panic!("no task {id}:\n{tasks}"))
}

/// Runs `args` in the network namespace of process `pid`; must succeed; its stdout.
async fn netns(pid: &str, args: &[&str]) -> String {
    let mut full = vec!["-t", pid, "-n"];
    full.extend_from_slice(args);
    real_cluster::run_ok(Path::new("nsenter"), &full).await
}

fn cluster_str(cluster: &Path) -> &str {
    cluster.to_str().expect("UTF-8 cluster path")
}
