//! One planning step, shared by the operator and `swarm-operator plan`.

use crate::movement::same_job_set;
use crate::worker_config::{WorkerConfig, Workload};
use crate::{JobsError, Movement, Strategy, assign, pod_name, validate_jobs};

/// What to plan for: a pool's jobs and strategy, its StatefulSet, and the config now in the
/// ConfigMap.
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest<'a> {
    /// Name of the StatefulSet; pods are `<statefulset>-<ordinal>`.
    pub statefulset: &'a str,
    /// Number of workers (N).
    pub replicas: usize,
    /// The pool's jobs in spec order.
    pub jobs: &'a [String],
    /// The pool's strategy.
    pub strategy: Strategy,
    /// The config now in the ConfigMap, if it could be read.
    pub previous: Option<&'a WorkerConfig>,
}

/// The next config and what it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOutcome {
    /// The config to write. Its version is the previous one, +1 iff the mapping pod -> job set
    /// changed (pods appearing or disappearing count); 1 without a previous config.
    pub config: WorkerConfig,
    /// Whether the version was bumped, i.e. the config must be written.
    pub changed: bool,
    /// Statistics of the new assignment and of the change.
    pub movement: Movement,
}

/// Plans the next config.
///
/// The previous config's assignment is used only if it names pods of `statefulset`; otherwise
/// the strategy starts from scratch. A worker keeps its per-worker version while its job set is
/// unchanged; a worker whose job set changed, or that appears, gets the new config version. A
/// previous config of version 0 (the predecessor's format) is always rewritten, as version 1 or
/// more. Fails only on an invalid job list.
pub fn plan(request: &PlanRequest) -> Result<PlanOutcome, JobsError> {
    validate_jobs(request.jobs)?;
    let previous = request.previous;
    let current = previous.and_then(|config| config.assignment(request.statefulset));
    let next = assign(
        request.strategy,
        request.jobs,
        request.replicas,
        current.as_ref(),
    );

    let mut kept_versions: Vec<Option<u64>> = Vec::with_capacity(next.replicas());
    let mut touched = Vec::new();
    for (ordinal, held) in next.workers().iter().enumerate() {
        let pod = pod_name(request.statefulset, ordinal);
        let unchanged = previous
            .and_then(|config| config.workload(&pod))
            .filter(|workload| same_job_set(&workload.jobs, held));
        kept_versions.push(unchanged.map(|workload| workload.version));
        if unchanged.is_none() {
            touched.push(pod);
        }
    }

    let (version, changed) = match previous {
        None => (1, true),
        Some(config) => {
            let mapping_changed = !touched.is_empty() || config.len() != next.replicas();
            if mapping_changed || config.version == 0 {
                (config.version.saturating_add(1), true)
            } else {
                (config.version, false)
            }
        }
    };

    // Every strategy holds each job exactly once, so only N = 0 leaves jobs unassigned.
    let unassigned = if next.replicas() == 0 {
        request.jobs.to_vec()
    } else {
        Vec::new()
    };
    let movement =
        Movement::with_touched(request.jobs, current.as_ref(), &next, touched, unassigned);
    let workloads = next
        .into_workers()
        .into_iter()
        .zip(kept_versions)
        .enumerate()
        .map(|(ordinal, (jobs, kept))| {
            // A kept version outside 1..=version can only come from a hand edit: renumber it.
            let worker_version = kept
                .filter(|kept| (1..=version).contains(kept))
                .unwrap_or(version);
            let workload = Workload {
                version: worker_version,
                jobs,
            };
            (pod_name(request.statefulset, ordinal), workload)
        });
    Ok(PlanOutcome {
        config: WorkerConfig::new(version, workloads),
        changed,
        movement,
    })
}
