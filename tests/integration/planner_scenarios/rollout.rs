//! The first write and the refresh of stale workers: pacing, crash-looping and terminating
//! pods, operator restarts and lagging caches, `rollout.policy: None`, and pausing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{Handoff, Phase, RolloutPolicy};
use swarm_operator::planner;
use swarm_protocol::config::CONFIG_KEY;
use swarm_protocol::names::{PENDING_REFRESH_ANNOTATION, VERSION_ANNOTATION};

use super::world::{World, balanced, example_jobs, names, ordinal, set_ready};
use crate::fixtures::POOL_UID;

#[test]
fn first_write_assigns_every_job_once_and_refreshes_the_running_workers_one_at_a_time() {
    let mut world = World::new(example_jobs(), 2);
    let uids = [world.uid_of(0), world.uid_of(1)];
    let plan = world.reconcile();

    let config = world.config();
    assert_eq!(config.version, 1);
    let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
    assert_eq!(loads, [14, 13]);
    let mut all: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 27, "every job exactly once");

    // Both pods started without the config: both are stale, recorded by uid.
    let pending = world.pending();
    assert_eq!(pending["swarm-worker-0"], uids[0]);
    assert_eq!(pending["swarm-worker-1"], uids[1]);
    // 25% of 2 rounds down to 0, raised to 1: one pod at a time.
    assert_eq!(
        world.deleted,
        vec![("swarm-worker-0".to_owned(), uids[0].clone())]
    );
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(
        plan.status.stale_workers,
        ["swarm-worker-0", "swarm-worker-1"]
    );
    assert_eq!(plan.status.version, Some(1));
    assert_eq!(plan.status.jobs, 27);
    assert_eq!(
        world.event_reasons(),
        [reason::REBALANCED, reason::REFRESHING_WORKER]
    );

    let cm = world.config_map.as_ref().unwrap();
    assert_eq!(
        cm.labels()["app.kubernetes.io/managed-by"],
        "swarm-operator"
    );
    assert_eq!(cm.labels()["swarm.io/pool"], "swarm-pool");
    assert_eq!(cm.annotations()[VERSION_ANNOTATION], "1");
    let owner = &cm.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.kind.as_str(), owner.controller),
        (POOL_UID, "SwarmPool", Some(true))
    );

    // While worker 0 terminates, worker 1 waits (the budget is spent).
    world.reconcile();
    assert_eq!(world.deleted.len(), 1);

    world.settle_pods();
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
    assert_eq!(
        world.pending().keys().collect::<Vec<_>>(),
        ["swarm-worker-1"]
    );

    world.settle_pods();
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
    assert_eq!(plan.status.ready.as_deref(), Some("2/2"));
    assert!(plan.status.stale_workers.is_empty());
    assert_eq!(world.ready_condition().status, "True");
    assert_eq!(
        world.config().version,
        1,
        "refreshing workers does not change the config"
    );
}

#[test]
fn a_reconcile_that_changes_nothing_writes_nothing() {
    let mut world = balanced(example_jobs(), 3);
    let lists = world.live_lists;
    let plan = world.reconcile();
    assert_eq!(world.writes, 0, "no ConfigMap write");
    assert!(world.deleted.is_empty(), "no delete");
    assert!(!world.status_written, "no status write");
    assert!(world.events.is_empty(), "no event");
    assert_eq!(world.live_lists, lists, "no live list either");
    assert_eq!(plan.requeue_after, planner::REQUEUE_IDLE);
}

#[test]
fn first_write_before_any_pod_exists_restarts_nothing() {
    let mut world = World::new(example_jobs(), 2);
    world.pods.clear();
    let plan = world.reconcile();
    assert_eq!(world.config().version, 1);
    assert!(
        world.pending().is_empty(),
        "pods created later mount the new content"
    );
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::WAITING_FOR_WORKERS);
}

#[test]
fn a_crash_looping_stale_worker_is_deleted_at_once_without_spending_the_budget() {
    let mut world = balanced(example_jobs(), 4);
    let now = world.now;
    set_ready(world.pod_mut(3), false, now);
    world.pool.spec.jobs.clear();
    world.reconcile();
    // All four workers changed; worker 3 is not Ready (deleted first, free), and one Ready
    // worker would fit 25% of 4 = 1 if nothing were unavailable, but worker 3 is.
    assert_eq!(names(&world.deleted), ["swarm-worker-3"]);
}

#[test]
fn a_worker_whose_jobs_did_not_change_is_never_deleted_even_when_crash_looping() {
    let mut world = balanced(example_jobs(), 3);
    let now = world.now;
    set_ready(world.pod_mut(1), false, now - SignedDuration::from_mins(10));
    let plan = world.reconcile();
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Degraded));
    assert_eq!(world.ready_condition().reason, reason::WORKERS_NOT_READY);
    assert_eq!(plan.status.ready.as_deref(), Some("2/3"));
    assert_eq!(plan.status.ready_workers, 2);
}

#[test]
fn a_worker_not_ready_for_less_than_the_grace_period_is_starting_not_degraded() {
    let mut world = balanced(example_jobs(), 3);
    let now = world.now;
    set_ready(world.pod_mut(1), false, now - SignedDuration::from_secs(30));
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
    assert_eq!(world.ready_condition().reason, reason::WORKERS_STARTING);
    assert_eq!(plan.requeue_after, planner::REQUEUE_ROLLING);
}

#[test]
fn a_terminating_stale_pod_is_never_deleted_again_and_holds_the_budget() {
    let mut world = balanced(example_jobs(), 4);
    // Worker 0 is already terminating (someone else deleted it).
    let now = world.now;
    world.pod_mut(0).metadata.deletion_timestamp = Some(Time(now));
    world.pool.spec.jobs.clear();
    world.reconcile();
    assert!(world.deleted.is_empty(), "{:?}", world.deleted);
    assert_eq!(world.pool.status.as_ref().unwrap().stale_workers.len(), 4);
}

#[test]
fn after_an_operator_restart_mid_rollout_no_pod_is_deleted_twice_and_the_rollout_finishes() {
    let mut world = World::new(example_jobs(), 4);
    world.reconcile();
    let first = world.deleted.clone();
    assert_eq!(first.len(), 1);
    let writes = world.writes;

    // Restart: the in-memory record of requested deletes is gone; the cache lists the pod as
    // terminating, as the API server has it.
    world.deleting.clear();
    world.reconcile();
    assert_eq!(
        world.deleted, first,
        "the terminating pod is not deleted again"
    );
    assert_eq!(
        world.writes, writes,
        "the version survives: nothing to rewrite"
    );

    world.run_to_balanced(20);
    let mut refreshed: Vec<&str> = names(&world.deleted);
    refreshed.sort();
    assert_eq!(
        refreshed,
        [
            "swarm-worker-0",
            "swarm-worker-1",
            "swarm-worker-2",
            "swarm-worker-3"
        ]
    );
    assert_eq!(world.config().version, 1);
}

#[test]
fn a_crash_between_the_config_write_and_the_uid_resolution_is_recovered() {
    let mut world = balanced(example_jobs(), 2);
    // The previous process wrote version 2 with unresolved entries and died.
    let mut config = world.config();
    config.version = 2;
    let cm = world.config_map.as_mut().unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), config.render());
    cm.annotations_mut()
        .insert(VERSION_ANNOTATION.into(), "2".into());
    cm.annotations_mut().insert(
        PENDING_REFRESH_ANNOTATION.into(),
        r#"{"swarm-worker-1":""}"#.into(),
    );
    let uid1 = world.uid_of(1);

    world.reconcile();
    assert_eq!(
        world.pending()["swarm-worker-1"],
        uid1,
        "resolved against a live pod list"
    );
    assert_eq!(names(&world.deleted), ["swarm-worker-1"]);
}

#[test]
fn a_cache_lagging_behind_a_replaced_pod_does_not_end_the_refresh_early() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.jobs.push("stream:extra".into());
    // The cache still shows no pod for worker 0 (it lags behind the StatefulSet), while the
    // API server has the instance that started before the write.
    let mut cache = world.pods.clone();
    cache.retain(|p| ordinal(p) != 0);
    world.stale_cache = Some(cache);
    world.reconcile();
    let touched: Vec<String> = world.pending().keys().cloned().collect();
    assert_eq!(touched.len(), 1);
    // The entry is kept with the uid of the live pod, whatever the cache says.
    let ordinal: usize = touched[0].rsplit_once('-').unwrap().1.parse().unwrap();
    assert_eq!(world.pending()[&touched[0]], world.uid_of(ordinal));
    assert!(world.live_lists > 0);
}

#[test]
fn a_pod_not_controlled_by_the_statefulset_is_never_deleted() {
    let mut world = World::new(example_jobs(), 2);
    for pod in &mut world.pods {
        pod.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    }
    let plan = world.reconcile();
    assert!(world.deleted.is_empty());
    assert!(world.pending().is_empty());
    assert_eq!(
        plan.status.phase,
        Some(Phase::Pending),
        "no worker pod of ours exists"
    );
}

#[test]
fn a_paused_pool_reports_the_change_but_writes_and_deletes_nothing() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.paused = true;
    world.scale(3);
    world.settle_pods();
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::PAUSED);
    assert_eq!(
        plan.status.version,
        Some(1),
        "the version in the ConfigMap, not the planned one"
    );
    assert_eq!(plan.status.workers, 3);

    world.pool.spec.paused = false;
    world.reconcile();
    assert_eq!(world.config().version, 2);
}

#[test]
fn rollout_policy_none_writes_the_config_and_restarts_nobody() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.rollout.policy = RolloutPolicy::None;
    world.pool.spec.rollout.handoff = Handoff::Overlap;
    let plan = world.reconcile();
    assert_eq!(world.config().version, 1);
    assert!(world.pending().is_empty());
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
}

#[test]
fn rollout_policy_none_with_an_exclusive_handoff_fails_and_says_what_to_set() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.rollout.policy = RolloutPolicy::None;
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::INVALID_ROLLOUT);
    assert!(world.ready_condition().message.contains("handoff: Overlap"));
    assert!(world.events[0].warning);
}

#[test]
fn max_unavailable_paces_the_refresh() {
    let mut world = World::new(example_jobs(), 6);
    world.pool.spec.rollout.max_unavailable = IntOrString::Int(2);
    world.reconcile();
    assert_eq!(names(&world.deleted), ["swarm-worker-0", "swarm-worker-1"]);
    world.reconcile();
    assert_eq!(
        world.deleted.len(),
        2,
        "two are terminating: no more until they are back"
    );
    world.settle_pods();
    world.reconcile();
    assert_eq!(
        names(&world.deleted)[2..],
        ["swarm-worker-2", "swarm-worker-3"]
    );
}

#[test]
fn pausing_takes_precedence_over_a_scale_to_zero_that_is_not_written_yet() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.paused = true;
    world.scale(0);
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(world.ready_condition().reason, reason::PAUSED);
    assert_eq!(world.config().len(), 2, "the workers keep their config");
}
