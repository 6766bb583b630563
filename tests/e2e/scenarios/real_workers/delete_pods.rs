//! `rollout.policy: DeletePods` with the example StatefulSet in real containers: the workers
//! read the `config.yml` the kubelet mounted, and a worker whose entry changes is deleted by
//! the operator, stops its jobs on SIGTERM and comes back on the new config. Through a scale
//! 2 -> 3 -> 1 and a job edit no job runs on two live containers, no container restarts on its
//! own, every deleted worker stops within its grace period, and the pool settles each time.

use std::time::Instant;

use serde_json::json;

use super::{
    FileWorkers, REPORTS_WITHIN, Rollout, assert_workers_run_their_entries, install_file_workers,
    median_and_worst,
};
use crate::harness::observe::{Observed, assert_invariants, wait_balanced};
use crate::harness::worker_fleet::Reports;
use crate::harness::{Env, WORKER_IMAGE_ENV, scenario};
use crate::scenarios::scale;

/// The job the edit adds.
const ADDED_JOB: &str = "stream:real-workers:new";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_worker_pods_restart_on_their_new_entry_without_running_a_job_twice() {
    scenario!("real-workers-delete-pods")
        .image(WORKER_IMAGE_ENV)
        .run(async |env| {
            let FileWorkers {
                reports,
                pods,
                documents,
            } = install_file_workers(env, Rollout::DeletePods).await;
            let started = Instant::now();
            settle(env, &reports, env.example.replicas()).await;
            eprintln!(
                "real-workers-delete-pods: apply to Balanced over {} real workers: {:.1} s",
                env.example.replicas(),
                started.elapsed().as_secs_f64()
            );

            for workers in [3, 1] {
                env.restart_longest_unheld();
                let step = Instant::now();
                scale(env, workers).await;
                settle(env, &reports, workers).await;
                report_step(env, &format!("scale to {workers}"), step);
            }
            env.restart_longest_unheld();
            let step = Instant::now();
            let mut pool = documents
                .iter()
                .find(|doc| doc["kind"] == "SwarmPool")
                .expect("the example's pool")
                .clone();
            let mut jobs = env.example.jobs();
            jobs.remove(0);
            jobs.push(ADDED_JOB.to_owned());
            pool["spec"]["jobs"] = json!(jobs);
            env.apply("real-workers-edit.yaml", &[pool]).await;
            // The invariants check that the ConfigMap holds exactly the edited jobs.
            settle(env, &reports, 1).await;
            report_step(env, "job edit", step);

            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            pods.assert_no_restart();
            let stops = pods.assert_stopped_within_grace(&reports);
            assert!(!stops.is_empty(), "the scale down deleted no worker pod");
            let (median, worst) = median_and_worst(&stops);
            let (ready_median, ready_worst) = median_and_worst(&pods.seconds_to_ready());
            eprintln!(
                "real-workers-delete-pods: {} deleted workers stopped their jobs {median:.1} s \
                 (median), {worst:.1} s (worst) after their deletion (grace 10 s; deletion \
                 times to the second); pod seen to Ready {ready_median:.1} s (median), \
                 {ready_worst:.1} s (worst)",
                stops.len()
            );
        })
        .await;
}

/// Waits until the pool is Balanced over `workers`, checks its invariants, and that the
/// containers run exactly their entries.
async fn settle(env: &Env, reports: &Reports, workers: usize) -> Observed {
    let settled = wait_balanced(env, workers).await;
    assert_invariants(env, &settled).await;
    assert_workers_run_their_entries(reports, &settled, REPORTS_WITHIN).await;
    settled
}

/// Prints how long step `what` took to settle and the longest a job ran nowhere in it.
fn report_step(env: &Env, what: &str, started: Instant) {
    let stats = env.handoff_stats();
    eprintln!(
        "real-workers-delete-pods: {what}: settled in {:.1} s; longest a job ran nowhere {:.1} s \
            ({})",
        started.elapsed().as_secs_f64(),
        stats.longest_unheld_seconds,
        stats.longest_unheld_job
    );
}
