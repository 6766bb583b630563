//! The assignment of the Go proof of concept this project replaces, bug included.
//!
//! Kept only as the benchmark baseline and to prove, in a regression test, what went wrong:
//! chunk `i` has `J/N` jobs (one more for the first `J % N` chunks) but starts at `i * size` with
//! its own size, so when `J % N != 0` neighbouring chunks overlap and the tail is never assigned.
//! With the 27 example jobs on 2 workers, job 14 lands on both workers and job 27 on none.
//! Never use it to assign.

use crate::Assignment;

/// The predecessor's (wrong) layout of `jobs` over `replicas` workers.
pub fn assign(jobs: &[String], replicas: usize) -> Assignment {
    if replicas == 0 {
        return Assignment::default();
    }
    let (size, longer) = (jobs.len() / replicas, jobs.len() % replicas);
    let workers = (0..replicas)
        .map(|ordinal| {
            let chunk = size + usize::from(ordinal < longer);
            let start = (ordinal * chunk).min(jobs.len());
            let end = (start + chunk).min(jobs.len());
            jobs[start..end].to_vec()
        })
        .collect();
    Assignment::new(workers)
}
