//! What an assignment change costs: the numbers behind `--explain`, events and the benchmark.

use std::collections::hash_map::Entry;

use foldhash::{HashMap, HashSet};

use crate::{Assignment, pod_name};

/// Statistics of one assignment and of the change that led to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Movement {
    /// Number of jobs in the spec (J).
    pub jobs: usize,
    /// Number of workers (N).
    pub workers: usize,
    /// Fewest jobs on one worker (0 without workers).
    pub min_load: usize,
    /// Most jobs on one worker (0 without workers).
    pub max_load: usize,
    /// Jobs that existed before and now run on a worker that did not hold them (new and removed
    /// jobs are not moves).
    pub jobs_moved: usize,
    /// Pod names whose job set changed, in ordinal order; a worker that did not exist before
    /// counts as changed.
    pub workers_touched: Vec<String>,
    /// Jobs held by no worker, in spec order (only when there are no workers).
    pub unassigned: Vec<String>,
    /// Jobs per ordinal.
    pub loads: Vec<usize>,
}

impl Movement {
    /// The movement from `previous` (the assignment before, if any) to `next` for the pods of
    /// `statefulset`. A worker is touched when its job set differs from that of the same ordinal
    /// before, or when that ordinal did not exist before.
    pub fn between(
        statefulset: &str,
        jobs: &[String],
        previous: Option<&Assignment>,
        next: &Assignment,
    ) -> Movement {
        let touched = next
            .workers()
            .iter()
            .enumerate()
            .filter(|(ordinal, held)| {
                previous
                    .and_then(|previous| previous.workers().get(*ordinal))
                    .is_none_or(|before| !same_job_set(before, held))
            })
            .map(|(ordinal, _)| pod_name(statefulset, ordinal))
            .collect();
        let unassigned = unassigned(jobs, next);
        Movement::with_touched(jobs, previous, next, touched, unassigned)
    }

    /// The movement with `workers_touched` and `unassigned` decided by the caller.
    pub(crate) fn with_touched(
        jobs: &[String],
        previous: Option<&Assignment>,
        next: &Assignment,
        workers_touched: Vec<String>,
        unassigned: Vec<String>,
    ) -> Movement {
        let loads = next.loads();
        Movement {
            jobs: jobs.len(),
            workers: next.replicas(),
            min_load: loads.iter().copied().min().unwrap_or(0),
            max_load: loads.iter().copied().max().unwrap_or(0),
            jobs_moved: previous.map_or(0, |previous| jobs_moved(previous, next)),
            workers_touched,
            unassigned,
            loads,
        }
    }
}

/// Jobs of `jobs` that no worker of `next` holds, in spec order.
fn unassigned(jobs: &[String], next: &Assignment) -> Vec<String> {
    let held: HashSet<&str> = next
        .workers()
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    jobs.iter()
        .filter(|job| !held.contains(job.as_str()))
        .cloned()
        .collect()
}

/// Jobs held both before and after that some worker now holds without having held it before.
fn jobs_moved(previous: &Assignment, next: &Assignment) -> usize {
    // The first holder of every job, and the further holders a hand-edited config may list.
    let mut holder: HashMap<&str, usize> = HashMap::default();
    let mut further: HashSet<(&str, usize)> = HashSet::default();
    for (job, ordinal) in holdings(previous) {
        match holder.entry(job) {
            Entry::Vacant(entry) => {
                entry.insert(ordinal);
            }
            Entry::Occupied(entry) if *entry.get() != ordinal => {
                further.insert((job, ordinal));
            }
            Entry::Occupied(_) => {}
        }
    }
    let moved: HashSet<&str> = holdings(next)
        .filter(|&(job, ordinal)| {
            holder.get(job).is_some_and(|&first| first != ordinal)
                && !further.contains(&(job, ordinal))
        })
        .map(|(job, _)| job)
        .collect();
    moved.len()
}

/// Every (job, ordinal) pair of an assignment.
fn holdings(assignment: &Assignment) -> impl Iterator<Item = (&str, usize)> {
    assignment
        .workers()
        .iter()
        .enumerate()
        .flat_map(|(ordinal, held)| held.iter().map(move |job| (job.as_str(), ordinal)))
}

/// Whether two job lists hold the same jobs. A list with a repeated job never equals one
/// without, so a config with duplicates gets rewritten.
pub(crate) fn same_job_set(a: &[String], b: &[String]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a == b {
        return true;
    }
    let a_set: HashSet<&str> = a.iter().map(String::as_str).collect();
    let b_set: HashSet<&str> = b.iter().map(String::as_str).collect();
    a_set.len() == a.len() && b_set.len() == b.len() && a_set == b_set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(workers: &[&[&str]]) -> Assignment {
        Assignment::new(
            workers
                .iter()
                .map(|held| held.iter().map(|job| job.to_string()).collect())
                .collect(),
        )
    }

    #[test]
    fn dropping_a_duplicate_is_not_a_move_but_starting_a_job_elsewhere_is() {
        let before = assignment(&[&["a", "b"], &["a"]]);
        assert_eq!(jobs_moved(&before, &assignment(&[&["b"], &["a"]])), 0);
        assert_eq!(jobs_moved(&before, &assignment(&[&["a", "b"], &[]])), 0);
        assert_eq!(jobs_moved(&before, &assignment(&[&["b"], &[], &["a"]])), 1);
        // A job new to the config is not a move.
        assert_eq!(jobs_moved(&before, &assignment(&[&["a", "b"], &["c"]])), 0);
    }

    #[test]
    fn a_job_started_by_two_new_workers_counts_once() {
        let before = assignment(&[&["a"], &[], &[]]);
        assert_eq!(jobs_moved(&before, &assignment(&[&[], &["a"], &["a"]])), 1);
    }

    #[test]
    fn job_sets_compare_as_sets_and_a_repeated_job_never_matches() {
        let list = |jobs: &[&str]| jobs.iter().map(|job| job.to_string()).collect::<Vec<_>>();
        assert!(same_job_set(&list(&["a", "b"]), &list(&["b", "a"])));
        assert!(!same_job_set(&list(&["a", "b"]), &list(&["a", "a"])));
        assert!(!same_job_set(&list(&["a", "a"]), &list(&["a", "b"])));
        assert!(!same_job_set(&list(&["a"]), &list(&["a", "b"])));
    }

    #[test]
    fn between_reports_new_ordinals_as_touched_and_unassigned_jobs_in_spec_order() {
        let jobs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let before = assignment(&[&["a", "b"], &["c"]]);
        let after = assignment(&[&["a"], &["c"], &[]]);
        let movement = Movement::between("w", &jobs, Some(&before), &after);
        assert_eq!(movement.workers_touched, ["w-0", "w-2"]);
        assert_eq!(movement.unassigned, ["b"]);
        assert_eq!((movement.min_load, movement.max_load), (0, 1));
        assert_eq!(movement.jobs_moved, 0);
    }
}
