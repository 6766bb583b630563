//! `rollout.policy: Acknowledge`: jobs move once their givers acknowledge the version that
//! revoked them, without restarting anyone, and a silent worker is restarted after the timeout.

use std::collections::BTreeSet;

use k8s_openapi::jiff::SignedDuration;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{Phase, RolloutPolicy};
use swarm_operator::state::lease::Ack;
use swarm_protocol::config::WorkerConfig;

use super::world::{World, balanced, example_jobs, loads, names, ordinal, pod, transit_jobs};

/// A Balanced pool of `replicas` workers under `rollout.policy: Acknowledge`, every worker
/// having acknowledged the version written.
pub(super) fn acknowledging(replicas: usize) -> World {
    let mut world = balanced(example_jobs(), replicas);
    world.pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    world.ack_all();
    world.reconcile();
    world.ack_all();
    world.reconcile();
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Balanced)
    );
    world.writes = 0;
    world
}

/// An `acknowledging(replicas)` pool scaled up by one, the new worker having acknowledged its
/// empty entry: the world and the config that revokes its share from the others.
fn revoking_for_a_new_worker(replicas: usize) -> (World, WorkerConfig) {
    let mut world = acknowledging(replicas);
    world.scale(i32::try_from(replicas + 1).expect("a small pool"));
    world.settle_pods();
    world.reconcile();
    world.ack(replicas, world.config().version);
    world.reconcile();
    let revoked = world.config();
    (world, revoked)
}

/// Jobs in transit from `pod`.
pub(super) fn in_transit_from(config: &WorkerConfig, pod: &str) -> BTreeSet<String> {
    config
        .transit()
        .filter(|(from, _)| *from == pod)
        .flat_map(|(_, jobs)| jobs.iter().cloned())
        .collect()
}

#[test]
fn under_acknowledge_a_moved_job_is_granted_once_its_giver_acknowledges_and_nobody_restarts() {
    let mut world = acknowledging(2);
    let before = world.config();
    world.scale(3);
    world.settle_pods();
    world.reconcile();
    let entry = world.config();
    assert_eq!(entry.version, before.version + 1);
    assert!(
        transit_jobs(&entry).is_empty(),
        "nothing moves before the new worker runs: {entry:?}"
    );
    // The new worker starts and acknowledges its empty entry: now the jobs move.
    world.ack(2, entry.version);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(revoked.version, before.version + 2);
    assert_eq!(transit_jobs(&revoked).len(), 9, "floor(27/3) jobs move");
    let holders = world.holders();
    assert_eq!(holders["swarm-worker-0"].version, Some(revoked.version));
    assert_eq!(holders["swarm-worker-0"].uid, world.uid_of(0));
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::RollingOut));
    assert_eq!(
        status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"],
        "the givers owe an acknowledgement (the receiver's entry is unchanged until the grant)"
    );

    // Nothing is granted while the givers have not acknowledged, and a Lease left by another
    // instance of a giver's pod says nothing about this one.
    world.acks.insert(
        "swarm-worker-1",
        Ack {
            holder: "an-earlier-instance".into(),
            version: revoked.version,
        },
    );
    world.ack(0, before.version);
    world.reconcile();
    assert_eq!(world.config(), revoked, "an older version frees nothing");

    // Worker 0 acknowledges the revoke: its jobs go to worker 2 at once, worker 1's wait.
    let from_0 = in_transit_from(&revoked, "swarm-worker-0");
    let from_1 = in_transit_from(&revoked, "swarm-worker-1");
    world.ack(0, revoked.version);
    world.reconcile();
    let partly = world.config();
    assert_eq!(transit_jobs(&partly), from_1);
    let new_jobs: BTreeSet<String> = partly
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(new_jobs, from_0);
    assert!(world.event_reasons().contains(&reason::WORKER_ACKNOWLEDGED));

    world.ack(1, revoked.version);
    world.reconcile();
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [9, 9, 9]);
    assert!(world.holders().is_empty());

    world.ack_all();
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Balanced));
    assert!(status.stale_workers.is_empty());
    assert!(
        world.deleted.is_empty(),
        "nobody restarts: {:?}",
        world.deleted
    );
}

#[test]
fn under_acknowledge_a_scale_down_hands_over_once_the_terminating_worker_acknowledges() {
    let mut world = acknowledging(3);
    let removed: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    world.scale(2);
    world.terminate(2);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(transit_jobs(&revoked), removed);

    // The terminating worker stopped everything and acknowledges the version that revoked its
    // jobs: they are granted while its pod still terminates.
    world.ack(2, revoked.version);
    world.reconcile();
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [14, 13]);
    assert!(
        world.pods.iter().any(|p| ordinal(p) == 2),
        "still terminating"
    );
    assert!(world.deleted.is_empty());
}

#[test]
fn under_acknowledge_a_terminating_member_is_given_nothing_until_its_replacement_runs() {
    let mut world = acknowledging(3);
    let held: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-1")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    // A rollout of the StatefulSet: worker 1's pod terminates and comes back under its name.
    world.terminate(1);
    world.reconcile();
    let revoked = world.config();
    assert!(revoked.workload("swarm-worker-1").unwrap().jobs.is_empty());
    assert_eq!(in_transit_from(&revoked, "swarm-worker-1"), held);
    world.ack(1, revoked.version);
    world.reconcile();
    assert_eq!(
        transit_jobs(&world.config()),
        held,
        "freed, but its worker's pod still terminates"
    );
    world.settle_pods();
    world.reconcile();
    let after = world.config();
    let back: BTreeSet<String> = after
        .workload("swarm-worker-1")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(back, held, "the replacement gets the jobs back");
    assert!(world.deleted.is_empty());
}

#[test]
fn under_acknowledge_a_silent_worker_is_restarted_after_the_timeout_and_the_pool_settles() {
    let (mut world, revoked) = revoking_for_a_new_worker(2);
    world.ack(0, revoked.version);
    world.ack(2, revoked.version);
    world.reconcile();
    // Worker 0's revoked jobs go to worker 2, which acknowledges them; worker 1 stays silent.
    world.ack(2, world.config().version);
    world.reconcile();
    world.now += SignedDuration::from_secs(30);
    world.reconcile();
    assert!(world.deleted.is_empty(), "within ackTimeoutSeconds");
    world.now += SignedDuration::from_secs(31);
    world.reconcile();
    assert!(world.all_reasons.contains(&reason::ACK_TIMED_OUT));
    for _ in 0..4 {
        world.reconcile();
    }
    assert_eq!(
        names(&world.deleted),
        ["swarm-worker-1"],
        "the silent worker only"
    );
    // Its replacement reads the current config at start; its old instance is gone, so its
    // jobs in transit are granted.
    world.settle_pods();
    for _ in 0..3 {
        world.ack_all();
        world.reconcile();
    }
    let after = world.config();
    assert!(transit_jobs(&after).is_empty());
    assert_eq!(loads(&after), [9, 9, 9]);
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Balanced)
    );
    assert_eq!(names(&world.deleted), ["swarm-worker-1"]);
}

#[test]
fn under_acknowledge_the_timeout_runs_from_the_pools_last_acknowledgement_like_a_progress_deadline()
{
    let (mut world, revoked) = revoking_for_a_new_worker(4);
    assert_eq!(in_transit_from(&revoked, "swarm-worker-3").len(), 1);
    // A loaded API server takes one acknowledgement every 40 s: 120 s in all, twice the
    // 60 s timeout, and nobody is restarted while they keep coming.
    for ordinal in 0..3 {
        world.now += SignedDuration::from_secs(40);
        world.ack(ordinal, revoked.version);
        world.reconcile();
        assert!(world.deleted.is_empty(), "acknowledgements keep coming");
    }
    // The last worker stays silent: 60 s after the pool's last acknowledgement it is stuck.
    world.now += SignedDuration::from_secs(50);
    world.reconcile();
    assert!(
        world.deleted.is_empty(),
        "50 s after the last acknowledgement"
    );
    world.now += SignedDuration::from_secs(11);
    for _ in 0..3 {
        world.reconcile();
    }
    assert!(world.all_reasons.contains(&reason::ACK_TIMED_OUT));
    assert_eq!(
        names(&world.deleted),
        ["swarm-worker-3"],
        "the silent worker only"
    );
}

#[test]
fn under_acknowledge_a_reconcile_that_writes_for_minutes_sees_the_acknowledgements_that_came_meanwhile()
 {
    let mut world = acknowledging(4);
    // Five jobs more: every worker gains one or two. The API server takes 35 s a write (the
    // index, then the batch of workers' ConfigMaps), and three workers acknowledge their new
    // entries while the reconcile goes on.
    let more = (0..5).map(|i| format!("extra-{i}"));
    world.pool.spec.jobs.extend(more);
    world.write_takes = SignedDuration::from_secs(35);
    world.acking = vec![0, 1, 2];
    let started = world.now;
    world.all_reasons.clear();
    world.reconcile();
    assert!(world.now.duration_since(started) > SignedDuration::from_secs(60));
    assert!(
        world.deleted.is_empty() && !world.all_reasons.contains(&reason::ACK_TIMED_OUT),
        "acknowledgements came during the writes: {:?}",
        world.all_reasons
    );
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.stale_workers, ["swarm-worker-3"]);
    // The deadline still holds for the worker that stays silent.
    world.write_takes = SignedDuration::ZERO;
    world.now += SignedDuration::from_secs(61);
    for _ in 0..3 {
        world.reconcile();
    }
    assert_eq!(names(&world.deleted), ["swarm-worker-3"]);
}

#[test]
fn under_acknowledge_a_started_worker_is_stale_until_it_acknowledges_what_it_runs() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(
        status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"],
        "no worker has acknowledged the first version yet"
    );
    assert_ne!(status.phase, Some(Phase::Balanced));

    world.ack(0, world.config().version);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.stale_workers, ["swarm-worker-1"]);

    world.ack(1, world.config().version);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert!(status.stale_workers.is_empty());
    assert_eq!(status.phase, Some(Phase::Balanced));
    assert!(world.deleted.is_empty(), "nobody restarted");
}

#[test]
fn under_acknowledge_a_moving_job_stays_with_its_holder_until_its_destination_is_ready() {
    let mut world = acknowledging(3);
    let before = world.config();
    world.scale(5);
    world.reconcile();
    let waiting = world.config();
    assert!(
        transit_jobs(&waiting).is_empty(),
        "nothing is revoked before a new pod runs"
    );
    assert_eq!(loads(&waiting)[..3], loads(&before)[..]);

    // Ordinal 3 starts, ordinal 4 not yet: jobs are revoked for 3 only, and once their
    // holders acknowledge, granted; nothing goes to 4, which runs nothing yet.
    let uid = world.uid();
    let now = world.now;
    world.pods.push(pod(3, &uid, true, now));
    world.reconcile();
    assert!(
        transit_jobs(&world.config()).is_empty(),
        "a Ready pod whose worker has not acknowledged anything gets nothing yet"
    );
    world.ack(3, world.config().version);
    world.reconcile();
    let revoked = world.config();
    assert!(!transit_jobs(&revoked).is_empty(), "{revoked:?}");
    world.ack_all();
    world.reconcile();
    let granted = world.config();
    assert!(transit_jobs(&granted).is_empty(), "{granted:?}");
    assert!(granted.workload("swarm-worker-3").unwrap().jobs.len() >= 27 / 5);
    assert!(granted.workload("swarm-worker-4").unwrap().jobs.is_empty());
    assert!(world.deleted.is_empty());
}
