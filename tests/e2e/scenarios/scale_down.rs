//! Scenario 3: scaling down to one worker, to none (Degraded, nothing deleted), and back.

use std::collections::BTreeSet;

use super::scale;
use crate::harness::Env;
use crate::harness::observe::{
    Observed, assert_condition, assert_config_map_metadata, assert_invariants, balanced,
    operator_pod_deletes, rollout_events, status_current, wait_for, wait_rollout_events,
};
use crate::harness::scenario;
use crate::harness::worker_config::moved_jobs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_to_one_then_zero_degrades_without_deleting_then_two_rebalances() {
    scenario!("scale-down")
        .run(async |env| {
            let two = env.install_example().await;
            let one = scale_to_one(env, &two).await;
            let zero = scale_to_zero(env, &one).await;
            scale_back_to_two(env, &zero).await;
            env.assert_operator_running();
        })
        .await;
}

/// 2 -> 1: worker 0 takes worker 1's jobs, once worker 1's pod is gone, and keeps its own.
async fn scale_to_one(env: &Env, two: &Observed) -> Observed {
    let sts = env.example.statefulset_name();
    let (w0, w1) = (format!("{sts}-0"), format!("{sts}-1"));
    let mark = env.request_mark().await;
    let events = rollout_events(env, &[w0.clone(), w1.clone()]).await;
    scale(env, 1).await;
    let v = two.config().version;
    let one = wait_for(env, "a new version over 1 worker, Balanced", |o| {
        balanced(o, 1, &sts)?;
        newer(o.config().version, v)
    })
    .await;
    assert_invariants(env, &one).await;
    assert_eq!(
        one.config().version,
        v + 2,
        "one version drops worker 1, one grants its jobs"
    );
    assert_eq!(one.config().loads(), [27]);
    let moved = moved_jobs(two.config(), one.config());
    let expected: BTreeSet<String> = two.config().job_sets()[&w1].iter().cloned().collect();
    assert_eq!(moved, expected, "only the removed worker's jobs move");
    assert_ne!(one.pods[&w0].uid, two.pods[&w0].uid, "{w0} was refreshed");
    if let Some(deletes) = operator_pod_deletes(env, mark).await {
        assert_eq!(deletes.get(&w0), Some(&1), "{w0} deleted once: {deletes:?}");
        assert_eq!(
            deletes.get(&w1),
            None,
            "{w1} is removed by its StatefulSet: {deletes:?}"
        );
    }
    wait_rollout_events(env, &events, 2, &BTreeSet::from([w0.clone()])).await;
    one
}

/// 1 -> 0: every job unassigned, phase Degraded, nothing deleted by the operator.
async fn scale_to_zero(env: &Env, one: &Observed) -> Observed {
    let w0 = format!("{}-0", env.example.statefulset_name());
    let jobs = env.example.jobs();
    let mark = env.request_mark().await;
    let events = rollout_events(env, std::slice::from_ref(&w0)).await;
    scale(env, 0).await;
    let v = one.config().version;
    let zero = wait_for(env, "Degraded with 0 workers and no pods", |o| {
        degraded_without_workers(o, v)
    })
    .await;
    let config = zero.config();
    assert_eq!(config.version, v + 1, "losing the last worker is a change");
    assert!(
        config.workloads.is_empty(),
        "no workloads at 0 replicas: {config:?}"
    );
    assert_eq!(zero.status_u64("unassignedJobs"), Some(jobs.len() as u64));
    assert_eq!(zero.status_u64("jobs"), Some(jobs.len() as u64));
    assert_eq!(zero.status_str("ready"), Some("0/0"));
    assert_eq!(zero.status_u64("version"), Some(config.version));
    assert_condition(&zero, "Degraded", "True");
    assert_condition(&zero, "Ready", "False");
    assert_config_map_metadata(&zero, &env.example.pool_name());
    // The operator writes the emptied ConfigMap but deletes no pod.
    match operator_pod_deletes(env, mark).await {
        Some(deletes) => assert!(
            deletes.is_empty(),
            "pods deleted at 0 replicas: {deletes:?}"
        ),
        None => env.note_skipped("pod deletions in the request log"),
    }
    wait_rollout_events(env, &events, 1, &BTreeSet::new()).await;
    zero
}

/// Whether `o` is Degraded with no worker and no pod, at a version after `v`, every job
/// unassigned and none in transit.
fn degraded_without_workers(o: &Observed, v: u64) -> Result<(), String> {
    if o.phase() != "Degraded" {
        return Err("not Degraded".into());
    }
    status_current(o)?;
    if o.status_u64("workers") != Some(0) {
        return Err(format!("status.workers {:?}", o.status_u64("workers")));
    }
    let config = o.config.as_ref().ok_or("no ConfigMap")?;
    newer(config.version, v)?;
    if !o.pods.is_empty() {
        return Err(format!("pods left: {:?}", o.pods.keys()));
    }
    // The last pod's jobs stay in transit until it is gone, then are simply unassigned.
    if !config.in_transit().is_empty() || o.status_u64("jobsInTransit") != Some(0) {
        return Err("jobs still in transit".into());
    }
    Ok(())
}

/// 0 -> 2: a fresh balanced assignment, and every new pod runs it. (A new pod that started
/// before the new version was written is refreshed, so refreshes are not counted here.)
async fn scale_back_to_two(env: &Env, zero: &Observed) {
    let sts = env.example.statefulset_name();
    let events = rollout_events(env, &[]).await;
    scale(env, 2).await;
    let v = zero.config().version;
    let back = wait_for(env, "a new version over 2 workers, Balanced", |o| {
        balanced(o, 2, &sts)?;
        newer(o.config().version, v)
    })
    .await;
    assert_invariants(env, &back).await;
    assert_eq!(back.config().version, v + 1);
    assert_eq!(back.config().loads(), [14, 13]);
    wait_rollout_events(env, &events, 1, &BTreeSet::new()).await;
}

fn newer(version: u64, than: u64) -> Result<(), String> {
    if version > than {
        Ok(())
    } else {
        Err(format!("still version {version}"))
    }
}
