//! Property tests of the `Contiguous` strategy: exactly once, balance, spec order.

use crate::common;

use common::*;
use proptest::prelude::*;
use swarm_assign::{Assignment, Strategy as Assign, assign};

fn contiguous(jobs: &[String], replicas: usize) -> Assignment {
    assign(Assign::Contiguous, jobs, replicas, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_job_is_on_exactly_one_worker_with_perfect_balance(jobs in jobs(0..400), replicas in 1_usize..300) {
        let next = contiguous(&jobs, replicas);
        prop_assert_eq!(next.replicas(), replicas);
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
    }

    #[test]
    fn workers_hold_consecutive_chunks_of_the_spec_longest_first(jobs in jobs(0..400), replicas in 1_usize..300) {
        let next = contiguous(&jobs, replicas);
        let concatenated: Vec<String> = next.workers().concat();
        prop_assert_eq!(&concatenated, &jobs);
        let loads = next.loads();
        prop_assert!(loads.is_sorted_by(|a, b| a >= b), "the longer chunks come first: {:?}", loads);
    }

    #[test]
    fn the_current_assignment_is_ignored(
        jobs in jobs(0..200),
        replicas in 1_usize..100,
        picks in prop::collection::vec(any::<usize>(), 0..200),
    ) {
        let current = arbitrary_assignment(&jobs, replicas, &picks);
        prop_assert_eq!(assign(Assign::Contiguous, &jobs, replicas, Some(&current)), contiguous(&jobs, replicas));
    }
}
