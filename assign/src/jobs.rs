//! Validation of a pool's job list.

use foldhash::{HashMap, HashMapExt};

/// Why a job list cannot be assigned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobsError {
    /// A job name is the empty string.
    #[error("spec.jobs[{index}] is empty: every job needs a non-empty name")]
    EmptyName {
        /// Zero-based position in `spec.jobs`.
        index: usize,
    },
    /// The same job is listed twice; each job must be listed once.
    #[error("job {job:?} is listed more than once in spec.jobs (at {first} and {second})")]
    Duplicate {
        /// The repeated job name.
        job: String,
        /// Zero-based position of its first occurrence.
        first: usize,
        /// Zero-based position of its second occurrence.
        second: usize,
    },
}

/// Checks that every job name is non-empty and unique, reporting the first problem in spec
/// order.
pub fn validate_jobs(jobs: &[String]) -> Result<(), JobsError> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(jobs.len());
    for (index, job) in jobs.iter().enumerate() {
        if job.is_empty() {
            return Err(JobsError::EmptyName { index });
        }
        if let Some(&first) = seen.get(job.as_str()) {
            return Err(JobsError::Duplicate {
                job: job.clone(),
                first,
                second: index,
            });
        }
        seen.insert(job, index);
    }
    Ok(())
}
