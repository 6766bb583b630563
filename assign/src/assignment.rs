//! The result of an assignment: the job list of every ordinal.

use crate::sticky::UNOWNED;

/// Jobs per ordinal: `workers()[i]` is the job list of ordinal `i` (pod `<statefulset>-<i>`).
///
/// Assignments built by [`crate::assign`] hold every job exactly once, listed in spec order
/// within each worker. One read back from a config written elsewhere may hold anything, which is
/// why the strategies never trust it beyond "who holds what now".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    workers: Vec<Vec<String>>,
}

impl Assignment {
    /// An assignment with `workers.len()` ordinals holding the given jobs.
    pub fn new(workers: Vec<Vec<String>>) -> Self {
        Self { workers }
    }

    /// The job list of every ordinal, in ordinal order.
    pub fn workers(&self) -> &[Vec<String>] {
        &self.workers
    }

    /// The number of ordinals (N).
    pub fn replicas(&self) -> usize {
        self.workers.len()
    }

    /// The number of jobs held by every ordinal.
    pub fn loads(&self) -> Vec<usize> {
        self.workers.iter().map(Vec::len).collect()
    }

    /// Takes the job lists out.
    pub fn into_workers(self) -> Vec<Vec<String>> {
        self.workers
    }
}

/// What each ordinal holds now, borrowed from the config it was read from: an [`Assignment`]
/// without a copy of any job name (a pool of 100,000 jobs would copy them all on every plan).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held<'a> {
    workers: Vec<Vec<&'a str>>,
}

impl<'a> Held<'a> {
    /// `workers.len()` ordinals holding the given jobs.
    pub fn new(workers: Vec<Vec<&'a str>>) -> Self {
        Self { workers }
    }

    /// The job list of every ordinal, in ordinal order.
    pub fn workers(&self) -> &[Vec<&'a str>] {
        &self.workers
    }

    /// Takes the job lists out.
    pub fn into_workers(self) -> Vec<Vec<&'a str>> {
        self.workers
    }

    /// The same lists with jobs of their own.
    pub fn to_assignment(&self) -> Assignment {
        Assignment::new(
            self.workers
                .iter()
                .map(|jobs| jobs.iter().map(|&job| job.to_owned()).collect())
                .collect(),
        )
    }
}

impl<'a> From<&'a Assignment> for Held<'a> {
    fn from(assignment: &'a Assignment) -> Self {
        Held::new(
            assignment
                .workers
                .iter()
                .map(|jobs| jobs.iter().map(String::as_str).collect())
                .collect(),
        )
    }
}

/// The ordinal of every job by its position in the job list: what the strategies compute, before
/// (and, for a caller that reads jobs by position, instead of) an [`Assignment`] of names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owners {
    /// `by_position[i]`: the ordinal of `jobs[i]`, or [`UNOWNED`] (only with no ordinals).
    by_position: Vec<usize>,
    replicas: usize,
}

impl Owners {
    /// Job `i` goes to `by_position[i]`, each below `replicas` or [`UNOWNED`].
    pub(crate) fn new(by_position: Vec<usize>, replicas: usize) -> Self {
        debug_assert!(
            by_position.iter().all(|&o| o < replicas || o == UNOWNED),
            "owners are ordinals"
        );
        Self {
            by_position,
            replicas,
        }
    }

    /// The number of ordinals (N).
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The ordinal of the job at `position`, if it has one.
    pub fn of(&self, position: usize) -> Option<usize> {
        self.by_position
            .get(position)
            .copied()
            .filter(|&ordinal| ordinal != UNOWNED)
    }

    /// The ordinal of each job by position, `None` for a job without one.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Option<usize>> + '_ {
        (0..self.by_position.len()).map(|position| self.of(position))
    }

    /// The assignment of `jobs` (the job list these positions are in), keeping its order within
    /// each worker.
    pub fn assignment(&self, jobs: &[String]) -> Assignment {
        let mut loads = vec![0_usize; self.replicas];
        for ordinal in self.iter().flatten() {
            loads[ordinal] += 1;
        }
        let mut workers: Vec<Vec<String>> = loads.into_iter().map(Vec::with_capacity).collect();
        for (job, ordinal) in jobs.iter().zip(self.iter()) {
            if let Some(ordinal) = ordinal {
                workers[ordinal].push(job.clone());
            }
        }
        Assignment::new(workers)
    }
}

/// The pod name of `ordinal` in `statefulset`: `<statefulset>-<ordinal>`.
pub fn pod_name(statefulset: &str, ordinal: usize) -> String {
    format!("{statefulset}-{ordinal}")
}
