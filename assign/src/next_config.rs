//! The next config of a pool: one assignment step, shared by the operator and `swarm-operator plan`.

use crate::ConfigAssignment;
use crate::movement::same_job_set;
use crate::{
    JobsError, Movement, Qos, QosError, Roster, Strategy, assign_with_qos, current_assignment,
    validate_jobs, validate_qos,
};
use swarm_protocol::config::{WorkerConfig, Workload};

/// What to plan for: a pool's jobs and strategy, its StatefulSet, and the config now in the
/// ConfigMap.
#[derive(Clone, Copy, Debug)]
pub struct ConfigRequest<'a> {
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
    /// The pool's `qos`, if any.
    pub qos: Option<&'a Qos>,
}

/// Why a pool cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The job list is invalid.
    #[error(transparent)]
    Jobs(#[from] JobsError),
    /// `qos` names jobs the job list does not hold, or has a bad weight.
    #[error(transparent)]
    Qos(#[from] QosError),
}

/// The next config and what it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextConfig {
    /// The config to write. Its version is the previous one, +1 iff the mapping pod -> job set
    /// changed (pods appearing or disappearing count); 1 without a previous config.
    pub config: WorkerConfig,
    /// Whether the version was bumped, i.e. the config must be written.
    pub changed: bool,
    /// Statistics of the new assignment and of the change.
    pub movement: Movement,
    /// Ordinals whose worker runs one dedicated job and nothing else, ascending.
    pub dedicated_workers: Vec<usize>,
    /// Dedicated jobs that run as shared jobs for want of workers, in `qos.dedicated` order.
    pub dedicated_unmet: Vec<String>,
}

/// Plans the next config.
///
/// The previous config's assignment is used only if it names pods of `statefulset`; otherwise
/// the strategy starts from scratch. A worker keeps its per-worker version while its job set is
/// unchanged; a worker whose job set changed, or that appears, gets the new config version. A
/// previous config of version 0 (the predecessor's format) is always rewritten, as version 1 or
/// more. The assignment planned from is read with [`current_assignment`]; the movement is
/// measured against what the workers hold. Fails only on an invalid job list or `qos`.
pub fn next_config(request: &ConfigRequest) -> Result<NextConfig, ConfigError> {
    validate_jobs(request.jobs)?;
    let neutral = Qos::default();
    let qos = request.qos.unwrap_or(&neutral);
    validate_qos(request.jobs, qos)?;
    let previous = request.previous;
    let current = previous.and_then(|config| config.assignment(request.statefulset));
    // Under a neutral qos, `current_assignment` is `current`: do not read it twice.
    let placed_from = if qos.is_neutral() {
        None
    } else {
        previous.and_then(|config| current_assignment(config, request.statefulset, qos))
    };
    let placement = assign_with_qos(
        request.strategy,
        request.jobs,
        request.replicas,
        placed_from.as_ref().or(current.as_ref()),
        qos,
    );
    let next = placement.assignment;
    // Every strategy holds each job exactly once, so only N = 0 leaves jobs unassigned.
    let unassigned = if next.replicas() == 0 {
        request.jobs.to_vec()
    } else {
        Vec::new()
    };
    let roster = Roster::statefulset(request.statefulset, next.replicas());
    let published = publish(&roster, previous, next.workers().to_vec(), []);
    let movement = Movement::with_touched(
        request.jobs,
        current.as_ref(),
        &next,
        published.touched,
        unassigned,
    );
    Ok(NextConfig {
        config: published.config,
        changed: published.changed,
        movement,
        dedicated_workers: placement.dedicated_workers,
        dedicated_unmet: placement.dedicated_unmet,
    })
}

/// A config built by [`publish`] and what it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// The config to write.
    pub config: WorkerConfig,
    /// Whether the version was bumped: some worker's job set changed, or workers appeared or
    /// disappeared (or the previous config had version 0).
    pub changed: bool,
    /// Pod names whose job set changed (or that are new), in ordinal order.
    pub touched: Vec<String>,
}

/// The config that gives position `i` of `roster` the jobs `held[i]` (and each idle pod none),
/// with `transit` as its jobs in transit, versioned against `previous`: the version is the
/// previous one, +1 iff the mapping pod -> job set changed (1 without a previous config); a
/// worker keeps its per-worker version while its job set is unchanged and gets the new version
/// otherwise. A position without a pod must hold no job.
pub fn publish(
    roster: &Roster,
    previous: Option<&WorkerConfig>,
    held: Vec<Vec<String>>,
    transit: impl IntoIterator<Item = (String, Vec<String>)>,
) -> Publication {
    debug_assert!(
        (0..held.len()).all(|i| roster.pod(i).is_some() || held[i].is_empty()),
        "jobs published for a position without a pod"
    );
    // Each listed pod with its jobs, taken from `held` (moved, not copied: a pool of 100,000
    // jobs would hold them twice) or none for an idle pod.
    let listed: Vec<(&str, Vec<String>)> = held
        .into_iter()
        .enumerate()
        .filter_map(|(i, jobs)| Some((roster.pod(i)?, jobs)))
        .chain(roster.idle().iter().map(|pod| (pod.as_str(), Vec::new())))
        .collect();
    let mut kept_versions: Vec<Option<u64>> = Vec::with_capacity(listed.len());
    let mut touched = Vec::new();
    for (pod, jobs) in &listed {
        let pod = *pod;
        let unchanged = previous
            .and_then(|config| config.workload(pod))
            .filter(|workload| same_job_set(&workload.jobs, jobs));
        kept_versions.push(unchanged.map(|workload| workload.version));
        if unchanged.is_none() {
            touched.push(pod.to_owned());
        }
    }

    let (version, changed) = match previous {
        None => (1, true),
        Some(config) => {
            let mapping_changed = !touched.is_empty() || config.len() != listed.len();
            if mapping_changed || config.version == 0 {
                (config.version.saturating_add(1), true)
            } else {
                (config.version, false)
            }
        }
    };

    let workloads = listed
        .into_iter()
        .zip(kept_versions)
        .map(|((pod, jobs), kept)| {
            // A kept version outside 1..=version can only come from a hand edit: renumber it.
            let worker_version = kept
                .filter(|kept| (1..=version).contains(kept))
                .unwrap_or(version);
            let workload = Workload {
                version: worker_version,
                jobs,
            };
            (pod.to_owned(), workload)
        });
    Publication {
        config: WorkerConfig::new(version, workloads).with_transit(transit),
        changed,
        touched,
    }
}
