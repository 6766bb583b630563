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
//!   when the route returns.
//!
//! Each fault touches one container or one pod's network namespace only, so these scenarios
//! share the real node with the others; stopping the node's kubelet, which every pod on it
//! would feel, is `whole_cluster::real_workers::kubelet`'s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use swarm_operator::planner::membership::START_WINDOW;

use super::pod_log::PodLog;
use super::{acknowledging_workers, reports_dir, settle_acknowledged, worker_rbac};
use crate::harness::observe::wait_for;
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::{self, ctr};
use crate::harness::worker_fleet::Reports;
use crate::harness::{
    Env, GO_WORKER_IMAGE_ENV, PYTHON_WORKER_IMAGE_ENV, WORKER_IMAGE_ENV, scenario,
};
use crate::scenarios::acknowledge::{assert_failover_within, failover_bound, jobs_moved_off};
use crate::scenarios::scale;

/// How long to wait for a worker back after a fault.
pub(crate) const BACK_WITHIN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_worker_containers_killed_frozen_or_cut_off_never_run_a_job_twice() {
    faults("real-workers-faults", WORKER_IMAGE_ENV).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_worker_containers_killed_frozen_or_cut_off_never_run_a_job_twice() {
    faults("real-python-faults", PYTHON_WORKER_IMAGE_ENV).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_worker_containers_killed_frozen_or_cut_off_never_run_a_job_twice() {
    faults("real-go-faults", GO_WORKER_IMAGE_ENV).await;
}

/// The faults on a pool of three workers of the image `image_env` names.
async fn faults(name: &str, image_env: &'static str) {
    scenario!(name)
        .image(image_env)
        .run(async |env| {
            let cluster = real_cluster_dir(env);
            let AcknowledgingPool { reports, pods } =
                install_acknowledging_pool(env, image_env).await;
            let victim = format!("{}-1", env.example.statefulset_name());

            killed_process(env, &cluster, &reports, &victim).await;
            frozen(env, &cluster, &reports, &victim).await;
            cut_off(env, &cluster, &reports, &victim).await;

            assert_no_job_twice_and_the_killed_restarted(env, &pods);
        })
        .await;
}

/// The workers of an [`install_acknowledging_pool`], as the scenario watches them.
pub(crate) struct AcknowledgingPool {
    pub reports: Reports,
    pub pods: PodLog,
}

/// What every fault scenario ends with: no job ran on two containers at once, and the container
/// it killed restarted.
pub(crate) fn assert_no_job_twice_and_the_killed_restarted(env: &Env, pods: &PodLog) {
    let stats = env.handoff_stats();
    assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
    env.assert_exclusive();
    let restarts: i32 = pods.instances().iter().map(|i| i.restarts).sum();
    assert!(restarts >= 1, "the killed container restarted: {restarts}");
}

/// The CRDs, the scenario's operator, and the example's pool under `Acknowledge` with three
/// workers of the image `image_env` names in containers on the real node, settled.
pub(crate) async fn install_acknowledging_pool(
    env: &mut Env,
    image_env: &'static str,
) -> AcknowledgingPool {
    env.install_crds().await;
    env.start_operator().await;
    let image = env.image(image_env).to_owned();
    acknowledging_pool(env, &image).await
}

/// The example's pool under `Acknowledge` with three workers of `image` in containers on the
/// real node, settled by the operator that runs (the CRDs installed).
pub(crate) async fn acknowledging_pool(env: &mut Env, image: &str) -> AcknowledgingPool {
    let reports = reports_dir(env);
    let pods = PodLog::start(env, "app=swarm-worker");
    env.watch_reports(&env.example.pool_name(), reports.clone());
    let namespace = env.example.namespace();
    let mut documents = vec![env.example.namespace_manifest().clone()];
    documents.extend(worker_rbac(env, &namespace).await);
    documents.extend(acknowledging_workers(env, image, &reports));
    env.apply("real-ack-workers.yaml", &documents).await;
    scale(env, 3).await;
    settle_acknowledged(env, &reports, 3, BACK_WITHIN).await;
    AcknowledgingPool { reports, pods }
}

/// The directory of `scripts/real-cluster.sh`'s cluster, whose node runs the containers.
pub(crate) fn real_cluster_dir(env: &Env) -> PathBuf {
    env.real_cluster_dir()
        .expect("the real node's cluster is one of scripts/real-cluster.sh")
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

/// Waits until `victim` holds no job and nothing is in transit; fails if that took longer than
/// the failover bound after `since`. Returns how long it took.
pub(crate) async fn jobs_move_off(env: &Env, victim: &str, since: Instant) -> Duration {
    wait_for(env, &format!("{victim}'s jobs on the others"), |o| {
        jobs_moved_off(o, &[victim])
    })
    .await;
    let moved = since.elapsed();
    assert_failover_within(victim, moved);
    moved
}

pub(crate) async fn worker_pod(env: &Env, name: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.example.namespace());
    api.get(name)
        .await
        .unwrap_or_else(|e| panic!("GET pod {name}: {e}"))
}

pub(crate) fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// The containerd id of the pod's (one) container.
pub(crate) fn container_id(pod: &Pod) -> String {
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
