//! Scenario 2: scaling 2 -> 3 moves only the jobs balance needs and refreshes each changed
//! worker exactly once: the givers when their jobs are revoked, the new worker after the grant.

use std::collections::BTreeSet;

use super::scale;
use crate::harness::observe::{
    assert_invariants, balanced, operator_pod_deletes, rollout_events, wait_for,
    wait_rollout_events,
};
use crate::harness::scenario;
use crate::harness::worker_config::{moved_jobs, touched_workers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_to_three_gives_9_9_9_and_refreshes_each_changed_worker_once() {
    scenario!("scale-up")
        .run(async |env| {
            let before = env.install_example().await;
            let sts = env.example.statefulset_name();
            let mark = env.request_mark().await;
            let pods: Vec<String> = before.pods.keys().cloned().collect();
            let events = rollout_events(env, &pods).await;

            scale(env, 3).await;
            let v1 = before.config().version;
            let after = wait_for(env, "a new version over 3 workers, Balanced", |o| {
                balanced(o, 3, &sts)?;
                match o.config().version {
                    v if v > v1 => Ok(()),
                    v => Err(format!("still version {v}")),
                }
            })
            .await;
            assert_invariants(env, &after).await;

            let (old, new) = (before.config(), after.config());
            assert_eq!(new.version, v1 + 2, "one version revokes, one grants");
            assert_eq!(new.loads(), [9, 9, 9]);
            // Sticky moves exactly floor(27/3) = 9 jobs, all to the new worker.
            let new_pod = format!("{sts}-2");
            let moved = moved_jobs(old, new);
            let gained: BTreeSet<String> = new.job_sets()[&new_pod].clone();
            assert_eq!(moved, gained, "the only moves are to the new worker");
            assert_eq!(moved.len(), 9, "the lower bound floor(27/3)");
            assert_eq!(new.workload(&new_pod).unwrap().version, new.version);

            // Refreshed: exactly the surviving workers whose job set changed, each once.
            let touched = touched_workers(old, new);
            let (uids_before, uids_after) = (before.uids(), after.uids());
            let mut refreshed = BTreeSet::new();
            for (pod, uid) in &uids_before {
                let changed = touched.contains(pod);
                assert_eq!(
                    &uids_after[pod] != uid,
                    changed,
                    "{pod}: job set changed = {changed}, but uid {uid} -> {}",
                    uids_after[pod]
                );
                if changed {
                    refreshed.insert(pod.clone());
                }
            }
            assert_eq!(refreshed.len(), 2, "both workers gave jobs to the new one");
            match operator_pod_deletes(env, mark).await {
                Some(deletes) => {
                    for pod in &refreshed {
                        assert_eq!(
                            deletes.get(pod),
                            Some(&1),
                            "{pod} deleted once: {deletes:?}"
                        );
                    }
                    // The new pod is deleted only if it started before the new version was written.
                    assert!(
                        deletes.get(&new_pod).copied().unwrap_or(0) <= 1,
                        "{deletes:?}"
                    );
                    assert_eq!(deletes.keys().filter(|p| !touched.contains(*p)).count(), 0);
                }
                None => env.note_skipped("pod deletions in the request log"),
            }

            wait_rollout_events(env, &events, 2, &refreshed).await;
            env.assert_operator_running();
        })
        .await;
}
