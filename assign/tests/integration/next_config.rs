//! Planning: versions, change detection, movement statistics and strategy changes.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use swarm_assign::{
    ConfigAssignment, ConfigError, ConfigRequest, JobsError, NextConfig, Strategy as Assign,
    next_config,
};
use swarm_protocol::config::{WorkerConfig, Workload};

const STS: &str = "swarm-worker";

fn plan_for(
    jobs: &[String],
    replicas: usize,
    strategy: Assign,
    previous: Option<&WorkerConfig>,
) -> NextConfig {
    next_config(&ConfigRequest {
        statefulset: STS,
        replicas,
        jobs,
        strategy,
        previous,
        qos: None,
    })
    .expect("valid jobs")
}

/// Pod -> job set of a config.
fn mapping(config: &WorkerConfig) -> BTreeMap<String, BTreeSet<String>> {
    config
        .workloads()
        .map(|(pod, workload)| (pod.to_string(), workload.jobs.iter().cloned().collect()))
        .collect()
}

fn strategy() -> impl Strategy<Value = Assign> {
    prop::sample::select(Assign::ALL.to_vec())
}

#[test]
fn the_first_plan_is_version_1_everywhere_and_touches_every_worker() {
    let jobs = example_jobs();
    let outcome = plan_for(&jobs, 3, Assign::Sticky, None);
    assert!(outcome.changed);
    assert_eq!(outcome.config.version, 1);
    assert!(
        outcome
            .config
            .workloads()
            .all(|(_, workload)| workload.version == 1)
    );
    assert_eq!(
        outcome.movement.workers_touched,
        ["swarm-worker-0", "swarm-worker-1", "swarm-worker-2"]
    );
    assert_eq!(outcome.movement.jobs_moved, 0);
    assert_eq!((outcome.movement.jobs, outcome.movement.workers), (27, 3));
    assert_eq!(
        (outcome.movement.min_load, outcome.movement.max_load),
        (9, 9)
    );
    assert_eq!(outcome.movement.loads, [9, 9, 9]);
}

#[test]
fn scaling_the_example_from_2_to_3_moves_9_jobs_and_bumps_only_touched_workers() {
    let jobs = example_jobs();
    let two = plan_for(&jobs, 2, Assign::Sticky, None).config;
    let three = plan_for(&jobs, 3, Assign::Sticky, Some(&two));
    assert!(three.changed);
    assert_eq!(three.config.version, 2);
    assert_eq!(three.movement.jobs_moved, 9);
    assert!(
        three
            .movement
            .workers_touched
            .contains(&"swarm-worker-2".to_string())
    );
    for (pod, workload) in three.config.workloads() {
        let touched = three.movement.workers_touched.iter().any(|t| t == pod);
        assert_eq!(workload.version, if touched { 2 } else { 1 }, "{pod}");
    }
    assert!(three.movement.unassigned.is_empty());
}

#[test]
fn zero_replicas_write_no_worker_and_report_every_job_unassigned() {
    let jobs = example_jobs();
    let before = plan_for(&jobs, 2, Assign::Sticky, None).config;
    let outcome = plan_for(&jobs, 0, Assign::Sticky, Some(&before));
    assert_eq!(outcome.config.render(), "version: 2\nworkloads: {}\n");
    assert!(outcome.changed);
    assert_eq!(outcome.movement.unassigned, jobs);
    assert_eq!(
        (
            outcome.movement.workers,
            outcome.movement.min_load,
            outcome.movement.max_load
        ),
        (0, 0, 0)
    );
    // And back: from no workers, Sticky builds the canonical layout.
    let back = plan_for(&jobs, 2, Assign::Sticky, Some(&outcome.config));
    assert_eq!(mapping(&back.config), mapping(&before));
    assert_eq!(back.config.version, 3);
}

#[test]
fn invalid_jobs_are_refused_naming_the_problem() {
    let jobs: Vec<String> = ["a", "b", "a"].map(String::from).to_vec();
    let error = next_config(&ConfigRequest {
        statefulset: STS,
        replicas: 2,
        jobs: &jobs,
        strategy: Assign::Sticky,
        previous: None,
        qos: None,
    })
    .unwrap_err();
    assert_eq!(
        error,
        ConfigError::Jobs(JobsError::Duplicate {
            job: "a".into(),
            first: 0,
            second: 2
        })
    );
    assert!(error.to_string().contains("\"a\""), "{error}");
    let jobs: Vec<String> = ["a", ""].map(String::from).to_vec();
    let error = next_config(&ConfigRequest {
        statefulset: STS,
        replicas: 2,
        jobs: &jobs,
        strategy: Assign::Sticky,
        previous: None,
        qos: None,
    })
    .unwrap_err();
    assert_eq!(error, ConfigError::Jobs(JobsError::EmptyName { index: 1 }));
}

#[test]
fn a_config_for_another_statefulset_is_no_current_assignment_but_keeps_the_version_rising() {
    let jobs = example_jobs();
    let foreign = next_config(&ConfigRequest {
        statefulset: "old-pool",
        replicas: 3,
        jobs: &jobs,
        strategy: Assign::Contiguous,
        previous: None,
        qos: None,
    })
    .unwrap()
    .config;
    let fresh = plan_for(&jobs, 3, Assign::Sticky, None);
    let outcome = plan_for(&jobs, 3, Assign::Sticky, Some(&foreign));
    assert_eq!(mapping(&outcome.config), mapping(&fresh.config));
    assert_eq!(outcome.config.version, 2);
    assert_eq!(outcome.movement.workers_touched.len(), 3);
    assert_eq!(outcome.movement.jobs_moved, 0);
}

#[test]
fn the_predecessors_unversioned_config_is_migrated_to_version_1_keeping_jobs_in_place() {
    let jobs = example_jobs();
    let mut text = String::from("workloads:\n  swarm-worker-0:\n    jobs:\n");
    for job in &jobs[..14] {
        text.push_str(&format!("      - {job}\n"));
    }
    text.push_str("    version: 0\n  swarm-worker-1:\n    jobs:\n");
    for job in &jobs[13..26] {
        text.push_str(&format!("      - {job}\n"));
    }
    text.push_str("    version: 0\n");
    let previous = WorkerConfig::parse(&text).unwrap();
    let outcome = plan_for(&jobs, 2, Assign::Sticky, Some(&previous));
    assert_eq!(outcome.config.version, 1);
    assert!(outcome.changed);
    assert_eq!(outcome.movement.loads, [14, 13]);
    // The duplicated job stays on worker 0; the lost one is placed; nothing else moves.
    assert_eq!(outcome.movement.jobs_moved, 0);
    let again = plan_for(&jobs, 2, Assign::Sticky, Some(&outcome.config));
    assert!(!again.changed);
    assert_eq!(again.config.render(), outcome.config.render());
}

#[test]
fn a_hand_edited_worker_version_outside_the_config_version_is_renumbered() {
    let jobs: Vec<String> = ["a", "b"].map(String::from).to_vec();
    let previous = WorkerConfig::new(
        3,
        [
            (
                "swarm-worker-0".to_string(),
                Workload {
                    version: 9,
                    jobs: vec!["a".into()],
                },
            ),
            (
                "swarm-worker-1".to_string(),
                Workload {
                    version: 2,
                    jobs: vec!["b".into()],
                },
            ),
        ],
    );
    let outcome = plan_for(&jobs, 2, Assign::Sticky, Some(&previous));
    assert!(!outcome.changed);
    let versions: Vec<u64> = outcome.config.workloads().map(|(_, w)| w.version).collect();
    assert_eq!(versions, [3, 2]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn replanning_from_the_written_config_changes_nothing_and_renders_byte_identical_text(
        jobs in jobs(0..300),
        replicas in 0_usize..200,
        strategy in strategy(),
        rounds in 1_usize..4,
    ) {
        let mut outcome = plan_for(&jobs, replicas, strategy, None);
        for _ in 0..rounds {
            let text = outcome.config.render();
            let previous = WorkerConfig::parse(&text).unwrap();
            let again = plan_for(&jobs, replicas, strategy, Some(&previous));
            prop_assert!(!again.changed);
            prop_assert!(again.movement.workers_touched.is_empty());
            prop_assert_eq!(again.movement.jobs_moved, 0);
            prop_assert_eq!(&again.config.render(), &text);
            outcome = again;
        }
    }

    #[test]
    fn versions_rise_exactly_when_the_pod_to_job_set_mapping_changes(
        initial in jobs(0..150),
        replicas in 0_usize..60,
        steps in prop::collection::vec(
            (strategy(), 0_usize..60, prop::collection::vec(job_name(), 0..5), 0_usize..5, any::<u64>()),
            1..8,
        ),
    ) {
        let mut jobs = initial;
        let mut previous = plan_for(&jobs, replicas, Assign::Sticky, None).config;
        for (strategy, replicas, added, removed, seed) in steps {
            jobs.truncate(jobs.len().saturating_sub(removed));
            jobs = dedup(jobs.into_iter().chain(added).collect());
            shuffle(&mut jobs, seed);
            let text = previous.render();
            let outcome = plan_for(&jobs, replicas, strategy, Some(&WorkerConfig::parse(&text).unwrap()));
            let (before, after) = (mapping(&previous), mapping(&outcome.config));
            let mapping_changed = before != after;
            prop_assert_eq!(outcome.changed, mapping_changed);
            prop_assert_eq!(outcome.config.version, previous.version + u64::from(mapping_changed));
            let mut touched = Vec::new();
            for (pod, workload) in outcome.config.workloads() {
                if before.get(pod) == after.get(pod) {
                    prop_assert_eq!(workload.version, previous.workload(pod).unwrap().version);
                } else {
                    prop_assert_eq!(workload.version, outcome.config.version);
                    touched.push(pod.to_string());
                }
            }
            prop_assert_eq!(&outcome.movement.workers_touched, &touched);
            // Every ordinal 0..N-1 appears, jobs exactly once, in spec order within a worker.
            let pods: Vec<String> = outcome.config.workloads().map(|(pod, _)| pod.to_string()).collect();
            let expected: Vec<String> = (0..replicas).map(|i| format!("{STS}-{i}")).collect();
            prop_assert_eq!(pods, expected);
            if replicas > 0 {
                let assignment = outcome.config.assignment(STS).unwrap();
                assert_exactly_once(&jobs, &assignment);
                assert_spec_order(&jobs, &assignment);
                if strategy != Assign::Consistent {
                    assert_balanced(jobs.len(), &assignment);
                }
            } else {
                prop_assert_eq!(&outcome.movement.unassigned, &jobs);
            }
            previous = outcome.config;
        }
    }

    #[test]
    fn switching_strategy_keeps_every_job_exactly_once_and_sticky_moves_at_the_lower_bound(
        jobs in jobs(0..300),
        replicas in 1_usize..200,
        from in strategy(),
        to in strategy(),
    ) {
        let before = plan_for(&jobs, replicas, from, None).config;
        let current = before.assignment(STS).unwrap();
        let after = plan_for(&jobs, replicas, to, Some(&before));
        let assignment = after.config.assignment(STS).unwrap();
        assert_exactly_once(&jobs, &assignment);
        if to == Assign::Sticky {
            assert_balanced(jobs.len(), &assignment);
            prop_assert_eq!(after.movement.jobs_moved, lower_bound(&jobs, replicas, &current));
            prop_assert_eq!(after.movement.jobs_moved, moves(&current, &assignment).len());
        }
    }
}
