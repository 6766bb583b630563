//! Scenario 4: adding and removing a job by applying an edited manifest.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::harness::Env;
use crate::harness::observe::{
    Observed, RolloutEvents, assert_invariants, balanced, operator_pod_deletes, rollout_events,
    wait_for, wait_rollout_events,
};
use crate::harness::scenario;
use crate::harness::worker_config::{moved_jobs, touched_workers};

const ADDED_JOB: &str = "stream:e2e-added:new";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_job_refreshes_exactly_one_worker_and_removing_one_moves_at_most_one_other() {
    scenario!("job-edits")
        .run(async |env| {
            let start = env.install_example().await;
            let jobs = env.example.jobs();

            // Add a job: it lands on one worker, nothing else moves, one pod restarts.
            let mut added = jobs.clone();
            added.push(ADDED_JOB.to_string());
            let (after_add, mark, events) =
                apply_jobs(env, &start, &added, "pool-job-added.yaml").await;
            let touched = touched_workers(start.config(), after_add.config());
            assert_eq!(
                touched.len(),
                1,
                "adding a job changes one worker: {touched:?}"
            );
            let pod = touched.first().unwrap();
            let mut expected = start.config().job_sets()[pod].clone();
            expected.insert(ADDED_JOB.to_string());
            assert_eq!(
                after_add.config().job_sets()[pod],
                expected,
                "{pod} gained only the new job"
            );
            assert!(moved_jobs(start.config(), after_add.config()).is_empty());
            assert_eq!(after_add.config().loads(), [14, 14]);
            assert_refreshed_exactly(env, &start, &after_add, &touched, mark).await;
            wait_rollout_events(env, &events, 1, &touched).await;

            // Remove a job: balance may need one other job to move, no more.
            let removed = jobs[0].clone();
            let remaining: Vec<String> = added.iter().filter(|j| **j != removed).cloned().collect();
            let (after_remove, mark, events) =
                apply_jobs(env, &after_add, &remaining, "pool-job-removed.yaml").await;
            let moved = moved_jobs(after_add.config(), after_remove.config());
            assert!(moved.len() <= 1, "removing a job moved {moved:?}");
            let touched = touched_workers(after_add.config(), after_remove.config());
            assert!(
                (1..=2).contains(&touched.len()),
                "removing a job changes its worker and at most one other: {touched:?}"
            );
            assert_refreshed_exactly(env, &after_add, &after_remove, &touched, mark).await;
            wait_rollout_events(env, &events, 1, &touched).await;
            env.assert_operator_running();
        })
        .await;
}

/// Applies the example pool with `jobs` from an edited copy of its manifest and waits for the
/// next version to be Balanced; asserts the invariants and returns the settled state and the
/// request-log position and the rollout events before the edit.
async fn apply_jobs(
    env: &Env,
    before: &Observed,
    jobs: &[String],
    file: &str,
) -> (Observed, usize, RolloutEvents) {
    let mut manifest = env.example.pool().clone();
    manifest["spec"]["jobs"] = Value::from(jobs.to_vec());
    let mark = env.request_mark().await;
    let pods: Vec<String> = before.pods.keys().cloned().collect();
    let events = rollout_events(env, &pods).await;
    env.apply(file, &[manifest]).await;
    let sts = env.example.statefulset_name();
    let v = before.config().version;
    let expected_jobs = jobs.len() as u64;
    let after = wait_for(
        env,
        &format!("{} jobs Balanced at a new version", jobs.len()),
        |o| {
            balanced(o, 2, &sts)?;
            if o.status_u64("jobs") != Some(expected_jobs) {
                return Err(format!("status.jobs {:?}", o.status_u64("jobs")));
            }
            match o.config().version {
                n if n > v => Ok(()),
                n => Err(format!("still version {n}")),
            }
        },
    )
    .await;
    assert_invariants(env, &after).await;
    assert_eq!(after.config().version, v + 1, "one edit, one version");
    (after, mark, events)
}

/// Asserts that exactly the pods of `touched` got a new uid, each deleted once after `mark`.
async fn assert_refreshed_exactly(
    env: &Env,
    before: &Observed,
    after: &Observed,
    touched: &BTreeSet<String>,
    mark: usize,
) {
    for (pod, uid) in before.uids() {
        let refreshed = after.pods[&pod].uid != uid;
        assert_eq!(
            refreshed,
            touched.contains(&pod),
            "{pod}: refreshed = {refreshed}, job set changed = {}",
            touched.contains(&pod)
        );
    }
    match operator_pod_deletes(env, mark).await {
        Some(deletes) => {
            let expected = touched.iter().map(|p| (p.clone(), 1)).collect();
            assert_eq!(deletes, expected, "operator pod deletions");
        }
        None => env.note_skipped("pod deletions in the request log"),
    }
}
