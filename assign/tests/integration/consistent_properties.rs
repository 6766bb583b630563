//! Property tests of the `Consistent` strategy: exactly once, purity, monotone movement.

use crate::common;

use common::*;
use proptest::prelude::*;
use swarm_assign::hash::{job_hash, jump_hash};
use swarm_assign::{Assignment, Strategy as Assign, assign};

fn consistent(jobs: &[String], replicas: usize) -> Assignment {
    assign(Assign::Consistent, jobs, replicas, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_job_is_on_exactly_one_worker(jobs in jobs(0..400), replicas in 1_usize..300) {
        let next = consistent(&jobs, replicas);
        prop_assert_eq!(next.replicas(), replicas);
        assert_exactly_once(&jobs, &next);
        assert_spec_order(&jobs, &next);
    }

    #[test]
    fn a_jobs_owner_depends_only_on_its_name_and_n(
        jobs in jobs(0..300),
        others in jobs(0..100),
        replicas in 1_usize..300,
        seed in any::<u64>(),
        picks in prop::collection::vec(any::<usize>(), 0..300),
    ) {
        let alone = consistent(&jobs, replicas);
        // Another job set, another spec order, and a current assignment: same owners.
        let mut mixed = dedup(jobs.iter().chain(&others).cloned().collect());
        shuffle(&mut mixed, seed);
        let current = arbitrary_assignment(&mixed, replicas, &picks);
        let together = assign(Assign::Consistent, &mixed, replicas, Some(&current));
        let together = owners(&together);
        for (job, owner) in owners(&alone) {
            prop_assert_eq!(together[job], owner);
            prop_assert_eq!(owner, jump_hash(job_hash(job), replicas));
        }
    }

    #[test]
    fn scaling_up_by_one_moves_jobs_only_to_the_new_worker(jobs in jobs(0..400), replicas in 1_usize..300) {
        let before = consistent(&jobs, replicas);
        let after = consistent(&jobs, replicas + 1);
        prop_assert!(moves(&before, &after).iter().all(|&(_, _, to)| to == replicas));
    }

    #[test]
    fn scaling_down_by_one_moves_only_the_removed_workers_jobs(jobs in jobs(0..400), replicas in 2_usize..300) {
        let before = consistent(&jobs, replicas);
        let after = consistent(&jobs, replicas - 1);
        let moved = moves(&before, &after);
        prop_assert_eq!(moved.len(), before.workers()[replicas - 1].len());
    }

    #[test]
    fn adding_or_removing_a_job_moves_no_other_job(
        jobs in jobs(1..400),
        replicas in 1_usize..300,
        position in any::<usize>(),
    ) {
        let before = consistent(&jobs, replicas);
        let mut grown = jobs.clone();
        grown.insert(position % (jobs.len() + 1), fresh_name(&jobs, position % 97));
        prop_assert!(moves(&before, &consistent(&grown, replicas)).is_empty());
        let mut shrunk = jobs.clone();
        shrunk.remove(position % jobs.len());
        prop_assert!(moves(&before, &consistent(&shrunk, replicas)).is_empty());
    }
}

#[test]
fn growing_from_n_to_n_plus_1_moves_about_j_over_n_plus_1_jobs() {
    let jobs: Vec<String> = (0..20_000).map(|i| format!("stream:camera-{i}")).collect();
    let before = consistent(&jobs, 10);
    let moved = moves(&before, &consistent(&jobs, 11)).len();
    let expected = jobs.len() / 11;
    // A binomial count around 1818 with standard deviation ~41: 10% is over four deviations.
    assert!(
        moved.abs_diff(expected) < expected / 10,
        "moved {moved}, expected about {expected}"
    );
}

#[test]
fn loads_are_balanced_on_average() {
    let jobs: Vec<String> = (0..20_000).map(|i| format!("stream:camera-{i}")).collect();
    let loads = consistent(&jobs, 10).loads();
    // Each load is binomial around 2000 with standard deviation ~42: 10% is over four deviations.
    for load in loads {
        assert!(load.abs_diff(2000) < 200, "load {load} far from 2000");
    }
}
