//! High availability: two replicas elect a leader through a Lease; the leader is killed with
//! SIGKILL in the middle of a handoff, and the standby takes over and completes it, without a
//! pod deleted twice and without a job ever on two live pods (the duplicate watch).

use std::time::Duration;

use crate::harness::observe::{assert_invariants, balanced, operator_pod_deletes, wait_for};
use crate::harness::poll::eventually_within;
use crate::harness::scenario;
use crate::harness::{Env, SimSpeed};
use crate::scenarios::scale;

/// The Lease's name; it lives in the scenario's namespace, where the operator's identity holds
/// deploy/'s leader-election Role.
const LEASE: &str = "swarm-operator";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_mid_handoff_hands_the_pool_to_the_standby() {
    scenario!("failover")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            start_leader_and_standby(env).await;

            env.apply_examples().await;
            let sts = env.example.statefulset_name();
            let before = wait_for(env, "Balanced over 2 workers", |o| balanced(o, 2, &sts)).await;
            let v1 = before.config().version;
            let mark = env.request_mark().await;

            scale(env, 3).await;
            let mid = wait_for(env, "a handoff in progress: jobs in transit", |o| {
                let version = o.config.as_ref().map_or(0, |c| c.version);
                if version <= v1 {
                    return Err(format!("still version {version}"));
                }
                if o.config().in_transit().is_empty() {
                    return Err("no job in transit".into());
                }
                Ok(())
            })
            .await;
            env.kill_replica("operator-a").await;
            eprintln!(
                "failover: leader killed at version {} with {} jobs in transit",
                mid.config().version,
                mid.config().in_transit().len()
            );

            wait_holder(env, |holder| holder.starts_with("operator-b_")).await;
            let after = wait_for(env, "the handoff completed by the new leader", |o| {
                balanced(o, 3, &sts)
            })
            .await;
            assert_invariants(env, &after).await;
            assert_eq!(
                after.config().version,
                mid.config().version + 1,
                "the grant is the only version after the revoke: the takeover adds none"
            );
            match operator_pod_deletes(env, mark).await {
                Some(deletes) => {
                    for (pod, count) in &deletes {
                        assert_eq!(
                            *count, 1,
                            "{pod} deleted once across both leaders: {deletes:?}"
                        );
                    }
                }
                None => env.note_skipped("pod deletions in the request log"),
            }
            env.assert_exclusive();
            env.assert_replica_running("operator-b");
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_writes_nothing_when_it_thaws() {
    scenario!("frozen-leader")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            start_leader_and_standby(env).await;
            env.apply_examples().await;
            let sts = env.example.statefulset_name();
            wait_for(env, "Balanced over 2 workers", |o| balanced(o, 2, &sts)).await;

            // Frozen (a stopped VM, a long GC pause, SIGSTOP) well past its 4 s lease, while the
            // pool changes: the standby takes over and carries the change out.
            env.signal_replica("operator-a", "STOP");
            wait_holder(env, |holder| holder.starts_with("operator-b_")).await;
            scale(env, 3).await;
            let after = wait_for(env, "the scale-up done by the new leader", |o| {
                balanced(o, 3, &sts)
            })
            .await;
            let logged_before_thaw = env.replica_log("operator-a").len();
            env.signal_replica("operator-a", "CONT");

            // Thawed, the old leader sees that its last renewal is too old: it writes nothing and
            // exits.
            eventually_within("the thawed leader to exit", Duration::from_secs(10), || {
                let running = env.replica_running("operator-a");
                async move {
                    if running {
                        Err("still running".to_owned())
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
            let thawed = env.replica_log("operator-a")[logged_before_thaw..].to_owned();
            for write in [
                "wrote ConfigMap",
                "deleted stale worker pod",
                "status updated",
            ] {
                assert!(
                    !thawed.contains(write),
                    "the thawed leader wrote ({write}):\n{thawed}"
                );
            }
            assert!(
                thawed.contains("exiting at once"),
                "it says why it exits:\n{thawed}"
            );
            let now = wait_for(env, "still Balanced over 3 workers", |o| {
                balanced(o, 3, &sts)
            })
            .await;
            assert_eq!(
                now.config().version,
                after.config().version,
                "nothing written after the thaw"
            );
            assert_invariants(env, &now).await;
            env.assert_exclusive();
            env.assert_replica_running("operator-b");
        })
        .await;
}

/// CRDs, then replica `operator-a` as the leader and `operator-b` standing by, with a 4 s
/// lease.
async fn start_leader_and_standby(env: &mut Env) {
    env.install_crds().await;
    let namespace = env.example.namespace_manifest().clone();
    env.apply("namespace.yaml", &[namespace]).await;
    let lease_namespace = env.example.namespace();
    let args = [
        "--leader-elect",
        "--leader-elect-namespace",
        &lease_namespace,
        "--leader-elect-lease-duration",
        "4",
    ];
    env.start_replica("operator-a", &args).await;
    wait_holder(env, |holder| holder.starts_with("operator-a_")).await;
    env.start_replica("operator-b", &args).await;
}

/// Waits until the Lease's holder satisfies `is_expected`, as `kubectl get lease` shows it.
async fn wait_holder(env: &Env, is_expected: impl Fn(&str) -> bool) {
    eventually_within(
        "the expected lease holder",
        Duration::from_secs(60),
        || async {
            let out = env
                .kubectl
                .run(&[
                    "-n",
                    &env.example.namespace(),
                    "get",
                    "lease",
                    LEASE,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])
                .await;
            let holder = out.stdout.trim().to_owned();
            if out.success && is_expected(&holder) {
                Ok(())
            } else {
                Err(format!("holder {holder:?} ({})", out.stderr.trim()))
            }
        },
    )
    .await;
}
