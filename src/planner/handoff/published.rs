//! What the config now written says of each job: the pods that list it, and those it is in
//! transit from.

use std::collections::BTreeMap;

use smallvec::SmallVec;
use swarm_protocol::config::WorkerConfig;

use crate::planner::by_job::{ByJob, Positions};

/// The pods that list one job: nearly always one, kept inline (a pool of 100,000 jobs would
/// otherwise make as many allocations on every plan).
pub(super) type Pods<'a> = SmallVec<[&'a str; 1]>;

/// Every job of the previous config's `workloads` and the pods that list it: by spec position
/// for the first pod that lists a job of the spec (4 bytes per job where a table by name takes
/// 32), by name for the rest (jobs that left the spec, and a job listed twice by a hand edit).
pub(super) struct Published<'a> {
    /// The pods of the previous config.
    pods: Vec<&'a str>,
    /// By spec position: the index in `pods` of the first pod listing the job, or [`UNLISTED`].
    first: Vec<u32>,
    /// Every other listing.
    pub(super) others: ByJob<'a, &'a str>,
}

/// No pod lists the job.
const UNLISTED: u32 = u32::MAX;

impl<'a> Published<'a> {
    pub(super) fn of(previous: Option<&'a WorkerConfig>, spec: &Positions) -> Self {
        let mut pods = Vec::new();
        let mut first = vec![UNLISTED; spec.len()];
        let mut others = Vec::new();
        for (pod, workload) in previous.into_iter().flat_map(WorkerConfig::workloads) {
            let index = u32::try_from(pods.len()).expect("fewer than 4 billion pods");
            pods.push(pod);
            for job in &workload.jobs {
                match spec.of(job) {
                    Some(position) if first[position] == UNLISTED => first[position] = index,
                    Some(position) if first[position] == index => {}
                    _ => others.push((job.as_str(), pod)),
                }
            }
        }
        Self {
            pods,
            first,
            others: ByJob::new(others),
        }
    }

    /// The pods that list `job`, at `position` in the spec, in order.
    pub(super) fn get(&self, position: usize, job: &str) -> Pods<'a> {
        let first = self
            .first
            .get(position)
            .filter(|&&index| index != UNLISTED)
            .map(|&index| self.pods[index as usize]);
        let mut pods: Pods = first.into_iter().chain(self.others.get(job)).collect();
        if pods.len() > 1 {
            pods.sort_unstable();
            pods.dedup();
        }
        pods
    }
}

/// Every job of the previous config's `transit` and the pods it is in transit from.
pub(super) fn transit_by_job(previous: Option<&WorkerConfig>) -> BTreeMap<&str, Vec<&str>> {
    let mut by_job: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, jobs) in previous.into_iter().flat_map(WorkerConfig::transit) {
        for job in jobs {
            let pods = by_job.entry(job.as_str()).or_default();
            if !pods.contains(&pod) {
                pods.push(pod);
            }
        }
    }
    by_job
}
