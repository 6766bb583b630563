//! Scenario 5: the operator dies in the middle of a rollout, jobs in transit; its successor
//! finishes it from what the cluster records, without an extra version and without deleting
//! any pod twice.

use super::scale;
use crate::harness::observe::{
    Observed, RolloutEvents, assert_invariants, balanced, observe, operator_pod_deletes,
    rollout_events, wait_for,
};
use crate::harness::poll::eventually;
use crate::harness::scenario;
use crate::harness::worker_config::touched_workers;
use crate::harness::{Env, SimSpeed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_mid_rollout_resumes_it_without_new_version_or_second_delete() {
    scenario!("restart")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let before = env.install_example().await;
            let mark = env.request_mark().await;
            let pods: Vec<String> = before.pods.keys().cloned().collect();
            let events = rollout_events(env, &pods).await;

            scale(env, 3).await;
            let version = kill_the_operator_mid_handoff(env, &before).await;
            env.start_operator().await;
            assert_the_successor_finishes_it(env, &before, version).await;
            assert_each_pod_deleted_once(env, &before, mark).await;
            wait_one_rebalanced_per_version(env, &pods, &events).await;
            env.assert_operator_running();
        })
        .await;
}

/// Waits for the scale's handoff to be under way (jobs in transit, stale workers, on the
/// simulation a refreshed pod terminating), kills the operator and checks that it left the
/// rollout unfinished after the revoke; returns the revoke's version.
async fn kill_the_operator_mid_handoff(env: &mut Env, before: &Observed) -> u64 {
    let v1 = before.config().version;
    let sim = env.is_sim();
    let mid = wait_for(
        env,
        "a handoff in progress: jobs in transit, stale workers and a pod terminating",
        |o| {
            let version = o.config.as_ref().map_or(0, |c| c.version);
            if version <= v1 {
                return Err(format!("still version {version}"));
            }
            if o.config().in_transit().is_empty() {
                return Err("no job in transit".into());
            }
            if o.stale_workers().is_empty() {
                return Err("no stale worker reported".into());
            }
            // A real cluster's pods stop fast; there, a reported stale worker is enough.
            if sim && !o.pods.values().any(|p| p.terminating) {
                return Err("no refreshed pod terminating yet".into());
            }
            Ok(())
        },
    )
    .await;
    env.kill_operator().await;
    // Nobody updates the status now: it shows what the dead operator left unfinished.
    let dead = observe(env).await.expect("observe the pool");
    assert!(
        !dead.stale_workers().is_empty(),
        "the operator was killed after the rollout finished; nothing to resume"
    );
    eprintln!(
        "restart: operator killed with stale workers {:?}",
        dead.stale_workers()
    );
    let version = mid.config().version;
    assert_eq!(version, v1 + 1, "killed after the revoke, before the grant");
    version
}

/// The new operator completes the rollout with the grant as the only version after the
/// revoke at `version`, and every worker of `before` was refreshed.
async fn assert_the_successor_finishes_it(env: &Env, before: &Observed, version: u64) {
    let sts = env.example.statefulset_name();
    let after = wait_for(env, "the rollout completed by the new operator", |o| {
        balanced(o, 3, &sts)
    })
    .await;
    assert_invariants(env, &after).await;
    assert_eq!(
        after.config().version,
        version + 1,
        "the grant is the only version after the revoke: a restart adds none"
    );

    let touched = touched_workers(before.config(), after.config());
    for (pod, uid) in before.uids() {
        assert_ne!(
            after.pods[&pod].uid, uid,
            "{pod} lost jobs, so it was refreshed"
        );
        assert!(touched.contains(&pod));
    }
}

/// Across both operator runs since `mark`, each worker of `before` was deleted exactly once and
/// the new one at most once.
async fn assert_each_pod_deleted_once(env: &Env, before: &Observed, mark: usize) {
    let Some(deletes) = operator_pod_deletes(env, mark).await else {
        env.note_skipped("pod deletions in the request log");
        return;
    };
    for pod in before.uids().keys() {
        assert_eq!(
            deletes.get(pod),
            Some(&1),
            "{pod} deleted exactly once across both operator runs: {deletes:?}"
        );
    }
    let new_pod = format!("{}-2", env.example.statefulset_name());
    assert!(
        deletes.get(&new_pod).copied().unwrap_or(0) <= 1,
        "{deletes:?}"
    );
}

/// One Rebalanced for each of the two versions, none for the restart; at most one refresh event
/// each. Events are published after the deletes they report, so the killed operator may have
/// deleted a pod and died before its event: the deletes are checked on their own.
async fn wait_one_rebalanced_per_version(env: &Env, pods: &[String], before: &RolloutEvents) {
    eventually(
        "the Rebalanced events of both versions, at most one RefreshingWorker per pod",
        move || async move {
            let now = rollout_events(env, pods).await;
            let refreshed_once = before.refreshed.iter().all(|(pod, n)| {
                let seen = now.refreshed.get(pod).copied().unwrap_or(0);
                (*n..=n + 1).contains(&seen)
            });
            if now.rebalanced == before.rebalanced + 2 && refreshed_once {
                Ok(())
            } else {
                Err(format!("events {now:?}, before {before:?}"))
            }
        },
    )
    .await;
}
