//! Pools the planner refuses: what the status and one Warning event say, and that nothing is
//! written or deleted.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::SignedDuration;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::Phase;
use swarm_operator::planner::Outcome;

use super::world::{World, balanced, example_jobs, pool, statefulset, t0};
use crate::fixtures::labels;

/// Reconciles `world` and checks that it fails with `reason`: nothing written or deleted,
/// `Ready` False with that reason, and a Warning event of it.
pub(super) fn assert_failed(world: &mut World, reason: &str) -> Outcome {
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.writes, 0, "no ConfigMap write");
    assert!(world.deleted.is_empty(), "no delete");
    assert_eq!(world.ready_condition().reason, reason);
    assert_eq!(world.ready_condition().status, "False");
    let warning = world
        .events
        .iter()
        .find(|e| e.warning)
        .expect("a Warning event");
    assert_eq!(warning.reason, reason);
    plan
}

#[test]
fn no_matching_statefulset_fails_with_statefulset_not_found() {
    let mut world = World::new(example_jobs(), 2);
    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "other")]));
    assert_failed(&mut world, reason::STATEFUL_SET_NOT_FOUND);
}

#[test]
fn two_matching_statefulsets_fail_with_ambiguous_selector() {
    let mut world = World::new(example_jobs(), 2);
    world
        .statefulsets
        .push(statefulset("second", "second-uid", 1));
    let plan = assert_failed(&mut world, reason::AMBIGUOUS_SELECTOR);
    assert!(
        world
            .ready_condition()
            .message
            .contains("second, swarm-worker")
    );
    assert_eq!(plan.status.stateful_set, None);
}

#[test]
fn an_empty_selector_fails_instead_of_matching_everything() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.selector = LabelSelector::default();
    assert_failed(&mut world, reason::EMPTY_SELECTOR);
}

#[test]
fn duplicate_jobs_fail_with_the_job_named() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.jobs.push("stream:xxrtve1".into());
    assert_failed(&mut world, reason::INVALID_JOBS);
    assert!(world.ready_condition().message.contains("stream:xxrtve1"));
}

#[test]
fn a_malformed_max_unavailable_fails() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.rollout.max_unavailable = IntOrString::String("lots".into());
    assert_failed(&mut world, reason::INVALID_MAX_UNAVAILABLE);
}

#[test]
fn a_config_over_half_a_mebibyte_fails_naming_its_size_and_the_limit() {
    let jobs: Vec<String> = (0..20_000)
        .map(|i| format!("stream:a-rather-long-job-name-{i:08}"))
        .collect();
    let mut world = World::new(jobs, 2);
    assert_failed(&mut world, reason::CONFIG_MAP_TOO_LARGE);
    let message = &world.ready_condition().message;
    assert!(message.contains("524288"), "{message}");
    assert!(message.contains("rollout.policy: Acknowledge"), "{message}");
    let size: usize = message
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .expect("the size in bytes");
    assert!(size > 524_288, "{message}");
}

#[test]
fn failure_status_keeps_what_is_known_and_flips_back_when_fixed() {
    let mut world = balanced(example_jobs(), 2);
    let balanced_since = world.ready_condition().last_transition_time.clone();
    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "moved")]));
    world.now += SignedDuration::from_secs(60);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert_eq!(status.version, Some(1));
    assert_ne!(world.ready_condition().last_transition_time, balanced_since);

    world.statefulsets[0].metadata.labels = Some(labels(&[("app", "swarm-worker")]));
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::Balanced));
    assert_eq!(world.writes, 0, "the config did not change");
}

#[test]
fn of_two_pools_selecting_one_statefulset_only_the_older_manages_it() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.metadata.creation_timestamp = Some(Time(t0()));
    let mut older = pool(vec!["other".into()]);
    older.metadata.name = Some("first-pool".into());
    older.metadata.uid = Some("first-uid".into());
    older.metadata.creation_timestamp = Some(Time(t0() - SignedDuration::from_secs(60)));
    world.other_pools.push(older);
    assert_failed(&mut world, reason::STATEFUL_SET_IN_USE);
    assert!(world.ready_condition().message.contains("first-pool"));

    // The younger pool does not stop the older one.
    let mut world = World::new(example_jobs(), 2);
    world.pool.metadata.creation_timestamp = Some(Time(t0() - SignedDuration::from_secs(60)));
    let mut younger = pool(vec!["other".into()]);
    younger.metadata.name = Some("later-pool".into());
    younger.metadata.uid = Some("later-uid".into());
    younger.metadata.creation_timestamp = Some(Time(t0()));
    world.other_pools.push(younger);
    let plan = world.reconcile();
    assert_eq!(plan.status.phase, Some(Phase::RollingOut));
}

#[test]
fn stale_worker_bookkeeping_beyond_the_annotation_limit_fails_instead_of_erroring_on_write() {
    // 4500 running workers all touched by the first write: ~60 bytes each of pod name and
    // uid exceed 256 KiB. Nothing is written, not even the config.
    let mut world = World::new(vec!["a".into(), "b".into()], 4500);
    assert_failed(&mut world, reason::CONFIG_MAP_TOO_LARGE);
    assert!(world.ready_condition().message.contains("262144"));
}
