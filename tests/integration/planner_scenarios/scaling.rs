//! Scaling the StatefulSet up, down and to zero: under `Exclusive` the jobs that move wait in
//! transit until the pods that ran them are gone; under `Overlap` they move at once.

use std::collections::BTreeSet;

use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{Handoff, Phase};

use super::world::{balanced, example_jobs, loads, names, transit_jobs};

#[test]
fn scale_up_revokes_first_and_grants_to_the_new_worker_once_the_givers_are_gone() {
    let mut world = balanced(example_jobs(), 2);
    let before = world.config();
    world.scale(3);
    let plan = world.reconcile();

    // The revoke: 9 jobs leave workers 0 and 1 and go to no one.
    let revoked = world.config();
    assert_eq!(revoked.version, before.version + 1);
    assert!(revoked.workload("swarm-worker-2").unwrap().jobs.is_empty());
    let in_transit = transit_jobs(&revoked);
    assert_eq!(in_transit.len(), 9, "exactly floor(27/3) jobs move");
    for old in ["swarm-worker-0", "swarm-worker-1"] {
        let (b, a) = (
            &before.workload(old).unwrap().jobs,
            &revoked.workload(old).unwrap().jobs,
        );
        assert!(a.iter().all(|job| b.contains(job)), "{old} only loses jobs");
        let lost: BTreeSet<String> = b.iter().filter(|j| !a.contains(j)).cloned().collect();
        let from: BTreeSet<String> = revoked
            .transit()
            .filter(|(pod, _)| pod == &old)
            .flat_map(|(_, jobs)| jobs.iter().cloned())
            .collect();
        assert_eq!(lost, from, "{old}'s lost jobs are in transit from it");
    }
    assert_eq!(plan.status.jobs_in_transit, 9);
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(world.ready_condition().reason, reason::HANDING_OFF);
    assert!(world.event_reasons().contains(&reason::JOBS_REVOKED));
    let holders = world.holders();
    assert_eq!(
        holders.keys().collect::<Vec<_>>(),
        ["swarm-worker-0", "swarm-worker-1"]
    );
    assert_eq!(holders["swarm-worker-0"].uid, world.uid_of(0));
    // worker 2 has no pod yet and counts as unavailable: it spends the budget.
    assert!(world.deleted.is_empty());

    world.settle_pods();
    world.reconcile();
    assert_eq!(
        names(&world.deleted),
        ["swarm-worker-0"],
        "a giver goes first"
    );
    world.run_to_balanced(20);

    let after = world.config();
    assert_eq!(transit_jobs(&after).len(), 0);
    let gained: BTreeSet<String> = after
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    assert_eq!(
        gained, in_transit,
        "the revoked jobs, and only they, reach the new worker"
    );
    assert_eq!(loads(&after), [9, 9, 9]);
    assert_eq!(
        after.version,
        before.version + 2,
        "one version revokes, one grants"
    );
    assert!(world.holders().is_empty());
    // Each worker restarts once: the givers to drop their jobs, the receiver after all grants.
    let mut deleted = names(&world.deleted);
    deleted.sort();
    assert_eq!(
        deleted,
        ["swarm-worker-0", "swarm-worker-1", "swarm-worker-2"]
    );
    assert!(world.all_reasons.contains(&reason::JOBS_GRANTED));
}

#[test]
fn scale_up_under_overlap_grants_at_once_and_waits_for_the_new_worker_before_restarting_others() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let before = world.config();
    world.scale(3);
    let plan = world.reconcile();

    let after = world.config();
    assert_eq!(after.version, before.version + 1);
    let new_worker = after.workload("swarm-worker-2").unwrap();
    assert_eq!(
        new_worker.jobs.len(),
        9,
        "exactly floor(27/3) jobs move, all to the new worker"
    );
    assert_eq!(transit_jobs(&after).len(), 0);
    for old in ["swarm-worker-0", "swarm-worker-1"] {
        let (b, a) = (
            &before.workload(old).unwrap().jobs,
            &after.workload(old).unwrap().jobs,
        );
        assert!(a.iter().all(|job| b.contains(job)), "{old} only loses jobs");
    }
    // worker 2 has no pod yet: nothing to refresh there, and it counts as unavailable.
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(
        world.deleted.is_empty(),
        "the missing worker spends the budget"
    );
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(plan.status.workers, 3);

    world.settle_pods();
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0"]);
    world.run_to_balanced(10);
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
}

#[test]
fn scale_down_keeps_the_removed_workers_jobs_in_transit_until_its_pod_is_gone() {
    let mut world = balanced(example_jobs(), 3);
    let removed_uid = world.uid_of(2);
    let removed_jobs: BTreeSet<String> = world
        .config()
        .workload("swarm-worker-2")
        .unwrap()
        .jobs
        .iter()
        .cloned()
        .collect();
    world.scale(2);
    // The StatefulSet controller starts terminating the surplus pod; it runs its jobs until gone.
    world.terminate(2);
    world.reconcile();
    let config = world.config();
    assert_eq!(config.len(), 2);
    assert_eq!(transit_jobs(&config), removed_jobs);
    assert_eq!(world.holders()["swarm-worker-2"].uid, removed_uid);
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));

    // Reconciling again while it terminates grants nothing.
    world.reconcile();
    assert_eq!(transit_jobs(&world.config()), removed_jobs);

    world.run_to_balanced(10);
    let config = world.config();
    assert_eq!(loads(&config), [14, 13]);
    assert!(transit_jobs(&config).is_empty());
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));
    assert_eq!(world.deleted.len(), 2, "each receiver restarts once");
}

#[test]
fn scale_down_under_overlap_gives_the_removed_workers_jobs_to_the_others_at_once() {
    let mut world = balanced(example_jobs(), 3);
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let removed_uid = world.uid_of(2);
    world.scale(2);
    world.reconcile();
    let config = world.config();
    assert_eq!(config.len(), 2);
    assert_eq!(loads(&config), [14, 13]);
    assert!(world.pending().keys().all(|p| p != "swarm-worker-2"));
    assert!(!world.deleted.iter().any(|(_, uid)| *uid == removed_uid));
}

#[test]
fn zero_replicas_leave_every_job_unassigned_and_delete_nothing() {
    let mut world = balanced(example_jobs(), 2);
    world.scale(0);
    world.terminate(0);
    world.terminate(1);
    let plan = world.reconcile();
    let config = world.config();
    assert!(config.is_empty(), "empty workloads");
    assert_eq!(config.version, 2);
    assert!(world.deleted.is_empty());
    assert!(world.pending().is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Degraded));
    assert_eq!(
        plan.status.jobs_in_transit, 27,
        "the terminating pods still run them"
    );
    assert_eq!(plan.status.workers, 0);
    assert_eq!(world.ready_condition().reason, reason::NO_REPLICAS);

    world.settle_pods();
    let plan = world.reconcile();
    assert!(transit_jobs(&world.config()).is_empty());
    assert_eq!(plan.status.unassigned_jobs, 27);
    assert_eq!(plan.status.jobs_in_transit, 0);
    assert!(world.deleted.is_empty());
}
