//! `Consistent`: jump consistent hash of the job name.

use crate::hash::{job_hash, jump_hash};

/// Owner of every job: a pure function of (job name, replicas), independent of history.
pub(crate) fn owners(jobs: &[String], replicas: usize) -> Vec<usize> {
    jobs.iter()
        .map(|job| jump_hash(job_hash(job), replicas))
        .collect()
}
