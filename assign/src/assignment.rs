//! The result of an assignment: the job list of every ordinal.

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

    /// Builds the assignment that gives job `jobs[i]` to ordinal `owners[i]`, keeping spec order
    /// within each worker.
    pub(crate) fn from_owners(jobs: &[String], owners: &[usize], replicas: usize) -> Self {
        let mut loads = vec![0_usize; replicas];
        for &owner in owners {
            loads[owner] += 1;
        }
        let mut workers: Vec<Vec<String>> = loads.into_iter().map(Vec::with_capacity).collect();
        for (job, &owner) in jobs.iter().zip(owners) {
            workers[owner].push(job.clone());
        }
        Self { workers }
    }
}

/// The pod name of `ordinal` in `statefulset`: `<statefulset>-<ordinal>`.
pub fn pod_name(statefulset: &str, ordinal: usize) -> String {
    format!("{statefulset}-{ordinal}")
}
