//! The acknowledged handoff (`rollout.policy: Acknowledge`) with real worker processes: the
//! Rust example on the `swarm-worker` library and the Python worker, one process per pod (see
//! `harness::worker_fleet`). The duplicate watch reads what those processes report they run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::{Value, json};

use super::{kubectl_ns, scale};
use crate::harness::manifests::documents_at;
use crate::harness::observe::{
    Observed, assert_invariants, balanced, operator_pod_deletes, pool_events, status_of_config,
    wait_for,
};
use crate::harness::poll::eventually;
use crate::harness::scenario;
use crate::harness::worker_fleet::{Program, Workers, with_readiness_probe};
use crate::harness::{Env, SimSpeed};

/// The documented failover bound on the workers' default permit and the pool's default grace
/// (`kubectl swarm status` shows it: about 58 s), and 3 s for the operator's reconcile and
/// writes and the new worker's read.
pub(crate) fn failover_bound() -> Duration {
    let grace = u64::try_from(swarm_operator::api::crd::DEFAULT_LEASE_GRACE_SECONDS).unwrap();
    let bound = swarm_operator::plugin::status::failover_bound(
        swarm_protocol::fence::DEFAULT_PERMIT,
        Duration::from_secs(grace),
    );
    bound + Duration::from_secs(3)
}

/// Asserts that the jobs of `worker` moved within [`failover_bound`] of the fault.
pub(crate) fn assert_failover_within(worker: &str, moved: Duration) {
    let bound = failover_bound();
    assert!(
        moved <= bound,
        "{worker}'s jobs moved {:.1} s after the fault, over the bound of {bound:?}",
        moved.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_workers_take_a_scale_up_and_down_without_a_restart() {
    scenario!("acknowledge-scale")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let first = install_acknowledging(env, Workers::Rust, None).await;
            let mark = env.request_mark().await;

            scale(env, 4).await;
            let up = settle(env, 4).await;
            scale(env, 2).await;
            let down = settle(env, 2).await;

            for pod in first.pods.values() {
                assert_eq!(
                    down.pods[&pod.name].uid, pod.uid,
                    "{} kept its pod instance: a worker reloads, it is not restarted",
                    pod.name
                );
            }
            assert_no_pod_deleted(env, mark).await;
            assert!(up.config().version > first.config().version);
            let reasons: Vec<String> = pool_events(env, &env.example.pool_name())
                .await
                .into_iter()
                .map(|e| e.reason)
                .collect();
            assert!(
                reasons.iter().any(|r| r == "WorkerAcknowledged"),
                "events: {reasons:?}"
            );
            let metrics = env.operator_metrics().await;
            assert!(
                metrics.lines().any(|l| l
                    .starts_with("swarm_operator_worker_acknowledgements_total{")
                    && !l.ends_with(" 0")),
                "acknowledgements counted:\n{metrics}"
            );
            env.fleet().assert_no_crash();
            env.assert_exclusive();
        })
        .await;
}

/// The longest a moved job may run nowhere in a calm step (no fault): its old worker's stop and
/// acknowledgement, the operator's grant and its new worker's start.
pub(crate) const MAX_UNHELD_SECONDS: f64 = 2.0;

/// The three implementations of the protocol share one pool: the Rust example on
/// `swarm-worker`, the Python worker (written from docs/worker-protocol.md alone) and the Go
/// example on `worker-go`, in turn as the pods start. Through job edits and a scale up and
/// down, no pod is deleted, no moved job runs nowhere for more than [`MAX_UNHELD_SECONDS`], and
/// none runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_python_and_go_workers_share_one_acknowledging_pool() {
    scenario!("acknowledge-mixed")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let jobs = env.example.jobs();
            install_acknowledging(env, Workers::Mixed, None).await;
            let mark = env.request_mark().await;

            calm_step(env, "scale to 3", 3, || scale(env, 3)).await;
            let mut edited = jobs.clone();
            edited.drain(..4);
            edited.extend((0..6).map(|i| format!("stream:mixed-{i}")));
            let after_edit = calm_step(env, "job edit", 3, || apply_pool(env, &edited, None)).await;
            assert_eq!(after_edit.spec_jobs().len(), edited.len());
            calm_step(env, "scale to 5", 5, || scale(env, 5)).await;
            let after = calm_step(env, "scale to 2", 2, || scale(env, 2)).await;

            let started = env.fleet().started();
            for program in ["rust", "python", "go"] {
                assert!(
                    started.get(program).is_some_and(|n| *n >= 1),
                    "a {program} worker ran: {started:?}"
                );
            }
            assert_eq!(after.pods.len(), 2);
            assert_no_pod_deleted(env, mark).await;
            env.fleet().assert_no_crash();
            env.assert_exclusive();
        })
        .await;
}

/// Faults in a pool of the three implementations, on the default permit: the Go worker frozen
/// with SIGSTOP past the failover bound (its pod turns NotReady, its jobs move; continued, it
/// runs none of them again and is a member again), then the Python worker SIGKILLed while its
/// pod stays Running (its pod turns NotReady, its jobs move). Each within the failover bound,
/// without a pod deleted and without a job running twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_pool_survives_a_paused_go_worker_and_a_killed_python_worker() {
    scenario!("acknowledge-mixed-faults")
        .run(async |env| {
            install_acknowledging(env, Workers::Mixed, None).await;
            scale(env, 3).await;
            let before = settle(env, 3).await;
            let mark = env.request_mark().await;
            let one_of = |program| {
                let pods = env.fleet().pods_running(program);
                pods.into_iter().next().unwrap_or_else(|| {
                    panic!("no {program:?} worker runs: {:?}", env.fleet().started())
                })
            };
            let (go, python) = (one_of(Program::Go), one_of(Program::Python));

            let paused = pause_past_failover(env, &before, &go).await;
            eprintln!(
                "acknowledge-mixed-faults: the Go worker {go}'s jobs moved {:.1} s after SIGSTOP",
                paused.as_secs_f64()
            );
            let stats_before = env.handoff_stats();
            let killed = Instant::now();
            env.fleet().signal(&python, "KILL");
            wait_for(env, &format!("{python}'s jobs on the others"), |o| {
                jobs_moved_off(o, &[&python])
            })
            .await;
            let moved = killed.elapsed();
            assert_failover_within(&python, moved);
            tokio::time::sleep(Duration::from_millis(600)).await;
            let stats = env.handoff_stats();
            eprintln!(
                "acknowledge-mixed-faults: the Python worker {python}'s jobs moved {:.1} s after \
                    SIGKILL; {:.2} duplicate job-seconds in all",
                moved.as_secs_f64(),
                stats.duplicate_job_seconds
            );
            assert_eq!(
                stats.duplicate_job_seconds - stats_before.duplicate_job_seconds,
                0.0,
                "{python}'s jobs ran twice"
            );
            assert_no_pod_deleted(env, mark).await;
            env.assert_exclusive();
        })
        .await;
}

/// Applies `change`, waits for the pool to settle over `workers`, and fails if a moved job ran
/// nowhere for longer than [`MAX_UNHELD_SECONDS`] meanwhile.
async fn calm_step<F, Fut>(env: &Env, what: &str, workers: usize, change: F) -> Observed
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    env.restart_longest_unheld();
    let started = Instant::now();
    change().await;
    let settled = settle(env, workers).await;
    assert_no_long_gap(env, what, started);
    settled
}

/// Prints how long the step begun at `started` took to settle and the longest a job ran
/// nowhere since [`Env::restart_longest_unheld`]; fails if that is over
/// [`MAX_UNHELD_SECONDS`].
pub(crate) fn assert_no_long_gap(env: &Env, what: &str, started: Instant) {
    let stats = env.handoff_stats();
    eprintln!(
        "{}: {what}: settled in {:.1} s; the longest a job ran nowhere {:.2} s ({})",
        env.name(),
        started.elapsed().as_secs_f64(),
        stats.longest_unheld_seconds,
        stats.longest_unheld_job
    );
    assert!(
        stats.longest_unheld_seconds <= MAX_UNHELD_SECONDS,
        "{what}: {} ran nowhere for {:.2} s",
        stats.longest_unheld_job,
        stats.longest_unheld_seconds
    );
}

/// A worker that stops answering (its process frozen with SIGSTOP) does not hold a change up
/// for ever: after `ackTimeoutSeconds` the operator deletes its pod, as under `DeletePods`, and
/// its jobs move only once that pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_never_acknowledges_has_its_pod_deleted_after_the_timeout() {
    scenario!("acknowledge-timeout")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let first = install_acknowledging(env, Workers::Rust, Some(3)).await;
            let sts = env.example.statefulset_name();
            let frozen = format!("{sts}-1");
            env.fleet().signal(&frozen, "STOP");
            let mark = env.request_mark().await;

            scale(env, 3).await;
            let after = settle(env, 3).await;
            assert_ne!(
                after.pods[&frozen].uid, first.pods[&frozen].uid,
                "the frozen worker's pod was replaced"
            );
            let deletes = operator_pod_deletes(env, mark).await;
            if let Some(deletes) = &deletes {
                assert_eq!(
                    deletes.keys().collect::<Vec<_>>(),
                    [&frozen],
                    "only the frozen worker's pod is deleted: {deletes:?}"
                );
            }
            let events = pool_events(env, &env.example.pool_name()).await;
            assert!(
                events.iter().any(|e| e.reason == "AckTimedOut"
                    && e.type_ == "Warning"
                    && e.note.contains(&frozen)),
                "an AckTimedOut warning names {frozen}: {events:?}"
            );
            let metrics = env.operator_metrics().await;
            assert!(
                metrics.lines().any(
                    |l| l.starts_with("swarm_operator_worker_ack_timeouts_total{")
                        && !l.ends_with(" 0")
                ),
                "ack timeouts counted:\n{metrics}"
            );
            env.assert_exclusive();
        })
        .await;
}

/// A worker process SIGKILLed while its pod stays Running (as if it hung, or the kubelet had not
/// restarted it yet), on the workers' default timing: its readiness probe fails, its pod turns
/// NotReady, the operator takes it out of the pool and, once the revoke wait has passed, its
/// jobs run on the other workers, within the documented bound, without a pod deleted and
/// without running twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_worker_loses_its_jobs_to_the_others_once_its_pod_is_not_ready() {
    scenario!("acknowledge-crash")
        .run(async |env| {
            install_acknowledging(env, Workers::Rust, None).await;
            scale(env, 3).await;
            let before = settle(env, 3).await;
            let sts = env.example.statefulset_name();
            let crashed = format!("{sts}-1");
            let mark = env.request_mark().await;
            env.restart_longest_unheld();
            let stats_before = env.handoff_stats();
            let killed = Instant::now();
            env.fleet().signal(&crashed, "KILL");

            let after = wait_for(env, &format!("{crashed}'s jobs on the others"), |o| {
                let unavailable = &o.pool["status"]["unavailableWorkers"];
                if unavailable[0]["pod"] != json!(crashed) || unavailable[0]["reason"] != "NotReady"
                {
                    return Err(format!("unavailableWorkers {unavailable}"));
                }
                jobs_moved_off(o, &[&crashed])
            })
            .await;
            let moved_after = killed.elapsed();
            tokio::time::sleep(Duration::from_millis(600)).await;
            let stats = env.handoff_stats();
            eprintln!(
                "acknowledge-crash: {crashed}'s jobs moved {:.1} s after the kill (bound {:?}); \
                    the longest a job ran nowhere: {:.1} s ({}); {:.1} unheld job-seconds, {:.2} \
                    duplicate",
                moved_after.as_secs_f64(),
                failover_bound(),
                stats.longest_unheld_seconds,
                stats.longest_unheld_job,
                stats.unheld_job_seconds - stats_before.unheld_job_seconds,
                stats.duplicate_job_seconds - stats_before.duplicate_job_seconds,
            );
            assert_failover_within(&crashed, moved_after);
            assert_eq!(
                stats.duplicate_job_seconds - stats_before.duplicate_job_seconds,
                0.0,
                "{crashed}'s jobs ran twice"
            );
            assert_eq!(
                after.pods[&crashed].uid, before.pods[&crashed].uid,
                "its pod still runs"
            );
            assert_no_pod_deleted(env, mark).await;
            let events = pool_events(env, &env.example.pool_name()).await;
            assert!(
                events.iter().any(|e| e.reason == "WorkerUnavailable"
                    && e.type_ == "Warning"
                    && e.note.contains(&crashed)),
                "a WorkerUnavailable warning names {crashed}: {events:?}"
            );
            let metrics = env.operator_metrics().await;
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with("swarm_operator_worker_failovers_total{")
                        && l.ends_with(" 1")),
                "one failover counted:\n{metrics}"
            );
            env.assert_exclusive();
        })
        .await;
}

/// A worker frozen with SIGSTOP (a long pause, or a process that hangs), on the default permit:
/// its probe fails and its jobs move within the failover bound; once continued it works on none
/// of them again (their permit lapsed: its jobs check it), reads its entry afresh, answers ready
/// and is a member again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_fences_itself_on_resume_and_becomes_a_member_again() {
    scenario!("acknowledge-partition")
        .run(async |env| {
            install_acknowledging(env, Workers::Rust, None).await;
            scale(env, 3).await;
            let before = settle(env, 3).await;
            let paused = format!("{}-1", env.example.statefulset_name());
            let mark = env.request_mark().await;
            let moved_after = pause_past_failover(env, &before, &paused).await;
            eprintln!(
                "acknowledge-partition: {paused}'s jobs moved {:.1} s after SIGSTOP",
                moved_after.as_secs_f64(),
            );
            assert_no_pod_deleted(env, mark).await;
        })
        .await;
}

/// Freezes the worker of `paused` (SIGSTOP) until its jobs moved and 5 s more, and continues
/// it; asserts that its jobs moved within the failover bound, that once continued it ran none
/// of them again and that the pool settles with it a member again, with no job run twice.
/// Returns how long after SIGSTOP its jobs moved.
async fn pause_past_failover(env: &Env, before: &Observed, paused: &str) -> Duration {
    let held: BTreeSet<String> = before
        .config()
        .workload(paused)
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    env.fleet().signal(paused, "STOP");
    let stopped = Instant::now();
    wait_for(env, &format!("{paused}'s jobs on the others"), |o| {
        jobs_moved_off(o, &[paused])
    })
    .await;
    let moved_after = stopped.elapsed();
    assert_failover_within(paused, moved_after);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let resumed_at = k8s_openapi::jiff::Timestamp::now();
    env.fleet().signal(paused, "CONT");

    let after = settle(env, before.pods.len()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let uid = &before.pods[paused].uid;
    let rerun: Vec<String> = env
        .fleet()
        .reports()
        .written_by_worker_since(uid, resumed_at)
        .into_iter()
        .flatten()
        .filter(|job| {
            held.contains(job) && !after.config().workload(paused).unwrap().jobs.contains(job)
        })
        .collect();
    assert!(
        rerun.is_empty(),
        "after resuming, {paused} ran jobs that had moved: {rerun:?}"
    );
    let stats = env.handoff_stats();
    eprintln!(
        "{}: after SIGCONT {paused} holds {} jobs again; {:.3} duplicate job-seconds",
        env.name(),
        after.config().workload(paused).unwrap().jobs.len(),
        stats.duplicate_job_seconds,
    );
    // Continued after its permit lapsed, its job tasks may run before its timer stops them,
    // but each checks its permit before any work: the duplicate watch, which counts a job only
    // while its worker's reported permit holds, must see none run twice.
    assert_eq!(
        stats.duplicate_job_seconds, 0.0,
        "{paused} overlapped after resuming"
    );
    moved_after
}

/// A Deployment pool of Python workers under `kubectl rollout restart`: each new pod's worker
/// reads its entry through the API at once, each old one stops its jobs on SIGTERM, and the jobs
/// move without a pod deleted by the operator and without running twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_pool_of_python_workers_takes_a_rollout_restart_without_running_a_job_twice() {
    rollout_restart("acknowledge-deployment-python", Workers::Python).await;
}

/// The same with the Rust example's workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_pool_of_rust_workers_takes_a_rollout_restart_without_running_a_job_twice() {
    rollout_restart("acknowledge-deployment-rust", Workers::Rust).await;
}

/// The same with the Go example's workers (`worker-go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_pool_of_go_workers_takes_a_rollout_restart_without_running_a_job_twice() {
    rollout_restart("acknowledge-deployment-go", Workers::Go).await;
}

/// `kubectl rollout restart` of `examples/deployment/` under `Acknowledge`, with `workers`;
/// prints what it cost.
async fn rollout_restart(name: &str, workers: Workers) {
    const POOL: &str = "stream-pool";
    const DEPLOYMENT: &str = "stream-worker";
    scenario!(name)
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            env.install_crds().await;
            env.start_operator().await;
            env.run_workers_of(POOL, "stream-worker-config", "app=stream-worker", workers);
            let documents: Vec<Value> = env
                .example
                .localize(documents_at(&[
                    "examples/namespace.yaml",
                    "examples/deployment/",
                ]))
                .into_iter()
                .map(|doc| acknowledging(doc, None, None))
                .collect();
            env.apply("acknowledging-deployment.yaml", &documents).await;
            let before = settle_deployment(env, POOL, &BTreeSet::new()).await;
            let mark = env.request_mark().await;
            env.restart_longest_unheld();
            let stats_before = env.handoff_stats();

            kubectl_ns(env, &["rollout", "restart", "deployment", DEPLOYMENT]).await;
            let after = settle_deployment(env, POOL, &before).await;
            tokio::time::sleep(Duration::from_millis(600)).await;
            let stats = env.handoff_stats();
            eprintln!(
                "{name}: rollout restart over {} pods: {:.2} unheld job-seconds, the longest \
                    {:.2} s ({}), {:.2} duplicate job-seconds",
                after.len(),
                stats.unheld_job_seconds - stats_before.unheld_job_seconds,
                stats.longest_unheld_seconds,
                stats.longest_unheld_job,
                stats.duplicate_job_seconds - stats_before.duplicate_job_seconds,
            );
            assert_no_pod_deleted(env, mark).await;
            let started: usize = env.fleet().started().values().sum();
            assert!(
                started >= 4,
                "a worker for each old and each new pod: {started}"
            );
            env.fleet().assert_no_crash();
            env.assert_exclusive();
        })
        .await;
}

/// Waits until pool `pool` (over a Deployment) is Balanced with nothing in transit, every
/// worker acknowledged, on pods none of which is in `old`; returns its pods.
async fn settle_deployment(env: &Env, pool: &str, old: &BTreeSet<String>) -> BTreeSet<String> {
    eventually(&format!("{pool} Balanced on new pods"), || async {
        let object = env.pool_named(pool).await.ok_or("no pool yet")?;
        let status = &object["status"];
        if status["phase"] != "Balanced" || status["jobsInTransit"] != 0 {
            return Err(format!("status {status}"));
        }
        if status["observedGeneration"] != object["metadata"]["generation"] {
            return Err("status not current".into());
        }
        let pods: BTreeSet<String> = env
            .pods()
            .await
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.metadata.labels.as_ref().and_then(|l| l.get("app"))
                        == Some(&"stream-worker".to_owned())
            })
            .filter_map(|p| p.metadata.name)
            .collect();
        if pods.len() != 2 || pods.iter().any(|p| old.contains(p)) {
            return Err(format!("pods {pods:?}"));
        }
        Ok(pods)
    })
    .await
}

/// Whether the config lists no job on `pods` and nothing is in transit: their jobs run on the
/// other workers.
pub(crate) fn jobs_moved_off(o: &Observed, pods: &[&str]) -> Result<(), String> {
    status_of_config(o)?;
    let left: usize = pods
        .iter()
        .map(|pod| o.config().workload(pod).map_or(0, |w| w.jobs.len()))
        .sum();
    match (left, o.status_u64("jobsInTransit")) {
        (0, Some(0)) => Ok(()),
        (_, in_transit) => Err(format!(
            "{left} jobs left on {pods:?}, in transit {in_transit:?}"
        )),
    }
}

/// Installs the CRDs, the operator, the example under `rollout.policy: Acknowledge` (with
/// `ackTimeoutSeconds` when given) and its worker processes; returns the settled pool, every
/// worker having acknowledged its jobs.
pub(crate) async fn install_acknowledging(
    env: &mut Env,
    workers: Workers,
    ack_timeout: Option<u64>,
) -> Observed {
    env.install_crds().await;
    env.start_operator().await;
    env.run_workers(workers);
    let documents: Vec<Value> = env
        .example
        .documents
        .iter()
        .cloned()
        .map(|doc| acknowledging(doc, None, ack_timeout))
        .collect();
    env.apply("acknowledging-example.yaml", &documents).await;
    settle(env, env.example.replicas()).await
}

/// The example's pool with `jobs`, re-applied under `Acknowledge`.
async fn apply_pool(env: &Env, jobs: &[String], ack_timeout: Option<u64>) {
    let pool = acknowledging(env.example.pool().clone(), Some(jobs), ack_timeout);
    env.apply("acknowledging-pool.yaml", &[pool]).await;
}

/// `doc` (an example manifest) for acknowledging workers: the pool's rollout policy, and its
/// jobs when given; the workers' readiness probe.
fn acknowledging(mut doc: Value, jobs: Option<&[String]>, ack_timeout: Option<u64>) -> Value {
    if doc["kind"] == "StatefulSet" || doc["kind"] == "Deployment" {
        return with_readiness_probe(doc);
    }
    if doc["kind"] == "SwarmPool" {
        doc["spec"]["rollout"] = json!({ "policy": "Acknowledge" });
        if let Some(seconds) = ack_timeout {
            doc["spec"]["rollout"]["ackTimeoutSeconds"] = json!(seconds);
        }
        if let Some(jobs) = jobs {
            doc["spec"]["jobs"] = json!(jobs);
        }
    }
    doc
}

/// Waits until the pool is Balanced over `replicas` workers with nothing in transit, every
/// worker acknowledged, then checks the invariants and each worker's Lease.
pub(crate) async fn settle(env: &Env, replicas: usize) -> Observed {
    let sts = env.example.statefulset_name();
    let settled = wait_for(
        env,
        &format!("Balanced over {replicas} acknowledging workers"),
        |o| {
            balanced(o, replicas, &sts)?;
            match o.status_u64("jobsInTransit") {
                Some(0) => Ok(()),
                n => Err(format!("jobsInTransit {n:?}")),
            }
        },
    )
    .await;
    assert_invariants(env, &settled).await;
    assert_leases_acknowledge(env, &settled).await;
    assert_workers_run_their_entries(env, &settled).await;
    settled
}

/// What the worker processes report they run is exactly the pool's assignment: every job on
/// the one pod instance whose entry lists it.
async fn assert_workers_run_their_entries(env: &Env, o: &Observed) {
    // The reports are read as of a moment ago (worker_fleet::REPORT_LAG); every worker wrote
    // its line before it acknowledged.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = env.fleet().reports().held().expect("the reports directory");
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (pod, workload) in &o.config().workloads {
        let uid = &o.pods[pod].uid;
        for job in &workload.jobs {
            expected.insert(job.clone(), vec![format!("{pod} ({uid})")]);
        }
    }
    assert_eq!(held, expected, "what the workers run vs. the ConfigMap");
}

/// Each worker's Lease follows the protocol: named like its pod, held by the pod's uid,
/// labelled with the pool, owned by the pod, and acknowledging the pod's current entry.
async fn assert_leases_acknowledge(env: &Env, o: &Observed) {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.example.namespace());
    let config = o.config();
    for pod in o.pods.values() {
        let lease = leases
            .get(&pod.name)
            .await
            .unwrap_or_else(|e| panic!("the Lease of {}: {e}", pod.name));
        let spec = lease.spec.clone().unwrap_or_default();
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some(pod.uid.as_str()),
            "{lease:?}"
        );
        let labels = lease.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("swarm.io/pool"), Some(&env.example.pool_name()));
        assert!(
            lease
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.kind == "Pod" && r.uid == pod.uid),
            "{} is owned by its pod: {lease:?}",
            pod.name
        );
        let acked: u64 = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("swarm.io/acked-version"))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} acknowledged a version: {lease:?}", pod.name));
        let entry = config
            .workload(&pod.name)
            .expect("every worker has an entry");
        assert!(
            acked >= entry.version,
            "{} acknowledged version {acked}, its entry is at {}",
            pod.name,
            entry.version
        );
    }
}

/// The operator deleted no pod since `mark`: under Acknowledge a change reaches the workers
/// without a restart.
pub(crate) async fn assert_no_pod_deleted(env: &Env, mark: usize) {
    match operator_pod_deletes(env, mark).await {
        Some(deletes) => assert!(deletes.is_empty(), "pods deleted: {deletes:?}"),
        None => env.note_skipped("pod deletions in the request log"),
    }
}
