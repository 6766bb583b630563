//! The predecessor's failing case: its 27 example jobs on 2 workers.

use crate::common;

use common::*;
use swarm_assign::{Strategy, assign, predecessor};

#[test]
fn predecessor_example_27_jobs_on_2_workers_get_14_and_13_each_exactly_once() {
    let jobs = example_jobs();
    for strategy in [Strategy::Sticky, Strategy::Contiguous] {
        let assignment = assign(strategy, &jobs, 2, None);
        assert_exactly_once(&jobs, &assignment);
        assert_eq!(assignment.loads(), vec![14, 13], "{strategy}");
    }
    // Contiguous is the predecessor's intended split: the first 14 on worker 0, the last 13 on
    // worker 1.
    let contiguous = assign(Strategy::Contiguous, &jobs, 2, None);
    assert_eq!(contiguous.workers()[0], jobs[..14]);
    assert_eq!(contiguous.workers()[1], jobs[14..]);
    let consistent = assign(Strategy::Consistent, &jobs, 2, None);
    assert_exactly_once(&jobs, &consistent);
}

#[test]
fn predecessor_algorithm_assigns_job_14_twice_and_loses_job_27() {
    let jobs = example_jobs();
    let assignment = predecessor::assign(&jobs, 2);
    assert_eq!(assignment.loads(), vec![14, 13]);
    let both: Vec<&String> = assignment.workers()[0]
        .iter()
        .filter(|job| assignment.workers()[1].contains(job))
        .collect();
    assert_eq!(both, ["stream:xxctv12:updated"]);
    let lost: Vec<&String> = jobs
        .iter()
        .filter(|job| assignment.workers().iter().all(|held| !held.contains(job)))
        .collect();
    assert_eq!(lost, ["stream:cars:updated"]);
}

#[test]
fn predecessor_algorithm_is_exactly_once_only_when_n_divides_j() {
    let jobs = example_jobs();
    for replicas in 1..=27 {
        let assignment = predecessor::assign(&jobs, replicas);
        let held: usize = assignment.loads().iter().sum();
        let distinct: std::collections::HashSet<&String> =
            assignment.workers().iter().flatten().collect();
        let exactly_once = held == jobs.len() && distinct.len() == jobs.len();
        assert_eq!(
            exactly_once,
            jobs.len().is_multiple_of(replicas),
            "N = {replicas}"
        );
    }
}
