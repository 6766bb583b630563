//! What both assignment benchmarks measure: the algorithms, the job lists, the four changes and
//! the weighted case.
#![allow(dead_code)] // each benchmark uses a different part

use std::collections::BTreeMap;

use swarm_assign::hash::job_hash;
use swarm_assign::{Assignment, Qos, Strategy, assign, predecessor};

/// Job counts (J) of the report.
pub const JOB_COUNTS: [usize; 4] = [27, 1_000, 30_000, 100_000];
/// Worker counts (N) of the report; only N <= J is measured.
pub const WORKER_COUNTS: [usize; 4] = [2, 10, 100, 1_000];
/// StatefulSet name used for pod names.
pub const STATEFULSET: &str = "swarm-worker";
/// J and N of the weighted case.
pub const WEIGHTED_SIZE: (usize, usize) = (100_000, 1_000);
/// The largest job weight of the weighted case: weights run from 1 to this.
pub const LARGEST_WEIGHT: u64 = 10;

/// An assignment algorithm: one of the strategies, or the predecessor's as the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// A strategy of this project.
    Strategy(Strategy),
    /// The predecessor's contiguous split, with its overlap and loss.
    Predecessor,
}

impl Algorithm {
    /// Every algorithm, the baseline last.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Strategy(Strategy::Sticky),
        Algorithm::Strategy(Strategy::Consistent),
        Algorithm::Strategy(Strategy::Contiguous),
        Algorithm::Predecessor,
    ];

    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Strategy(strategy) => strategy.as_str(),
            Algorithm::Predecessor => "predecessor",
        }
    }

    /// Assigns `jobs` to `replicas` workers, starting from `current` where the algorithm uses it.
    pub fn run(self, jobs: &[String], replicas: usize, current: Option<&Assignment>) -> Assignment {
        match self {
            Algorithm::Strategy(strategy) => assign(strategy, jobs, replicas, current),
            Algorithm::Predecessor => predecessor::assign(jobs, replicas),
        }
    }
}

/// `count` distinct job names shaped like real stream jobs (about 20 characters).
pub fn jobs(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("stream:cam{i:06}:{}", ["live", "new", "updated"][i % 3]))
        .collect()
}

/// One change between two reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// N -> N+1.
    ScaleUp,
    /// N -> N-1.
    ScaleDown,
    /// One new job, inserted in the middle of the spec list.
    AddJob,
    /// The job in the middle of the spec list removed.
    RemoveJob,
}

impl Change {
    /// Every change, in report order.
    pub const ALL: [Change; 4] = [
        Change::ScaleUp,
        Change::ScaleDown,
        Change::AddJob,
        Change::RemoveJob,
    ];

    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Change::ScaleUp => "N -> N+1",
            Change::ScaleDown => "N -> N-1",
            Change::AddJob => "+1 job",
            Change::RemoveJob => "-1 job",
        }
    }

    /// The jobs and N after the change.
    pub fn apply(self, jobs: &[String], replicas: usize) -> (Vec<String>, usize) {
        let mut jobs = jobs.to_vec();
        let middle = jobs.len() / 2;
        match self {
            Change::ScaleUp => (jobs, replicas + 1),
            Change::ScaleDown => (jobs, replicas - 1),
            Change::AddJob => {
                jobs.insert(middle, "stream:added:new".to_string());
                (jobs, replicas)
            }
            Change::RemoveJob => {
                jobs.remove(middle);
                (jobs, replicas)
            }
        }
    }
}

/// The weight of `job` in the weighted case, from 1 to [`LARGEST_WEIGHT`]: from its stable hash,
/// so weights are reproducible and do not follow the spec order.
pub fn weight(job: &str) -> u64 {
    job_hash(job) % LARGEST_WEIGHT + 1
}

/// The `qos` of the weighted case: no dedicated job, every job weighted by [`weight`].
pub fn weighted_qos(jobs: &[String]) -> Qos {
    let weights: BTreeMap<String, u64> =
        jobs.iter().map(|job| (job.clone(), weight(job))).collect();
    Qos {
        dedicated: vec![],
        weights,
    }
}
