//! `spec.qos`: dedicated jobs on workers of their own, weighted jobs, and the names they must
//! match.

use swarm_assign::Qos;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use swarm_operator::api::conditions::{self, reason};
use swarm_operator::api::crd::Phase;

use super::failures::assert_failed;
use super::world::{World, balanced, example_jobs, loads};

fn qos(dedicated: &[&str], weights: &[(&str, u64)]) -> Option<Qos> {
    Some(Qos {
        dedicated: dedicated.iter().map(|job| job.to_string()).collect(),
        weights: weights
            .iter()
            .map(|(job, weight)| (job.to_string(), *weight))
            .collect(),
    })
}

fn condition<'a>(world: &'a World, type_: &str) -> &'a Condition {
    let status = world.pool.status.as_ref().unwrap();
    status.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

#[test]
fn a_qos_naming_a_job_outside_the_spec_fails_with_invalid_qos_naming_the_job() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&["stream:xxrtve1", "stream:nope"], &[]);
    assert_failed(&mut world, reason::INVALID_QOS);
    assert!(world.ready_condition().message.contains("\"stream:nope\""));
    assert!(world.events[0].note.contains("\"stream:nope\""));

    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&[], &[("stream:gone", 3)]);
    assert_failed(&mut world, reason::INVALID_QOS);
    assert!(world.ready_condition().message.contains("\"stream:gone\""));
}

#[test]
fn fixing_one_invalid_qos_name_and_breaking_another_warns_again() {
    let mut world = World::new(example_jobs(), 2);
    world.pool.spec.qos = qos(&["stream:a"], &[]);
    assert_failed(&mut world, reason::INVALID_QOS);
    world.reconcile();
    assert!(
        world.events.is_empty(),
        "the same failure is not warned twice"
    );
    world.pool.spec.qos = qos(&["stream:b"], &[]);
    world.reconcile();
    assert_eq!(world.event_reasons(), [reason::INVALID_QOS]);
    assert!(world.events[0].note.contains("\"stream:b\""));
}

#[test]
fn dedicated_jobs_run_alone_and_the_rest_share_the_other_workers() {
    let mut world = World::new(example_jobs(), 4);
    world.pool.spec.qos = qos(&["stream:cars:new", "stream:xxrtve1"], &[]);
    world.run_to_balanced(20);
    let config = world.config();
    let alone: Vec<&str> = config
        .workloads()
        .filter(|(_, w)| w.jobs.len() == 1)
        .map(|(_, w)| w.jobs[0].as_str())
        .collect();
    assert_eq!(alone, ["stream:cars:new", "stream:xxrtve1"]);
    let shared: Vec<usize> = loads(&config).into_iter().filter(|&n| n > 1).collect();
    assert_eq!(shared, [13, 12], "25 shared jobs over the 2 other workers");
    let status = world.pool.status.as_ref().unwrap();
    assert_eq!(status.dedicated_unmet, Some(0));
    assert_eq!(condition(&world, conditions::DEGRADED).status, "False");
}

#[test]
fn too_few_workers_share_the_last_dedicated_jobs_and_report_not_enough_workers() {
    let mut world = balanced(example_jobs(), 2);
    world.pool.spec.qos = qos(
        &["stream:cars:new", "stream:xxrtve1", "stream:foo:new"],
        &[],
    );
    world.reconcile();
    let warning = world
        .events
        .iter()
        .find(|e| e.reason == reason::NOT_ENOUGH_WORKERS)
        .expect("a NotEnoughWorkers event");
    assert!(warning.warning);
    assert!(
        warning
            .note
            .contains("2 of 3 dedicated jobs run as shared jobs")
            && warning.note.contains("4 would give each its own worker")
            && warning.note.contains("stream:xxrtve1, stream:foo:new"),
        "{}",
        warning.note
    );
    let degraded = condition(&world, conditions::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", reason::NOT_ENOUGH_WORKERS)
    );
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, Some(2));

    for _ in 0..20 {
        world.settle_pods();
        let plan = world.reconcile();
        assert!(
            !world.event_reasons().contains(&reason::NOT_ENOUGH_WORKERS),
            "warned once, not on every reconcile"
        );
        if plan.status.phase == Some(Phase::Degraded) && plan.status.stale_workers.is_empty() {
            break;
        }
    }
    assert_eq!(
        world.pool.status.as_ref().unwrap().phase,
        Some(Phase::Degraded)
    );
    assert_eq!(world.ready_condition().reason, reason::NOT_ENOUGH_WORKERS);
    let config = world.config();
    assert!(
        config
            .workloads()
            .any(|(_, w)| w.jobs == ["stream:cars:new"]),
        "the first dedicated job has a worker of its own"
    );

    world.scale(4);
    world.settle_pods();
    world.run_to_balanced(30);
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, Some(0));
    let alone = world
        .config()
        .workloads()
        .filter(|(_, w)| w.jobs.len() == 1)
        .count();
    assert_eq!(alone, 3);
}

#[test]
fn weighted_jobs_balance_the_total_weight_of_the_workers() {
    let mut world = World::new(example_jobs(), 3);
    world.pool.spec.qos = qos(&[], &[("stream:cars:new", 9), ("stream:xxrtve1", 6)]);
    world.run_to_balanced(20);
    let config = world.config();
    let weight = |jobs: &[String]| -> u64 {
        jobs.iter()
            .map(|job| match job.as_str() {
                "stream:cars:new" => 9,
                "stream:xxrtve1" => 6,
                _ => 1,
            })
            .sum()
    };
    let weights: Vec<u64> = config.workloads().map(|(_, w)| weight(&w.jobs)).collect();
    assert_eq!(weights.iter().sum::<u64>(), 25 + 9 + 6);
    let spread = weights.iter().max().unwrap() - weights.iter().min().unwrap();
    assert!(spread <= 9, "weights {weights:?}");
    assert_eq!(world.pool.status.as_ref().unwrap().dedicated_unmet, None);
}

#[test]
fn without_qos_the_status_has_no_dedicated_count() {
    let world = balanced(example_jobs(), 2);
    let status = serde_json::to_value(world.pool.status.as_ref().unwrap()).unwrap();
    assert!(status.get("dedicatedUnmet").is_none(), "{status}");
}
