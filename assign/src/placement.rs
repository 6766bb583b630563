//! Assignment under `spec.qos`: dedicated jobs on workers of their own, the shared jobs spread
//! over the other workers by the pool's strategy, weighted under `Sticky`.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::ConfigAssignment;
use crate::assignment::{Held, Owners};
use crate::sticky::{self, UNOWNED};
use crate::{Assignment, Qos, Strategy, consistent, contiguous, dedicated, weighted};
use swarm_protocol::config::WorkerConfig;

/// An assignment and how it honours the pool's `qos`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The job list of every ordinal.
    pub assignment: Assignment,
    /// Ordinals whose worker runs one dedicated job and nothing else, ascending.
    pub dedicated_workers: Vec<usize>,
    /// Dedicated jobs that run as shared jobs for want of workers, in `qos.dedicated` order.
    pub dedicated_unmet: Vec<String>,
}

/// A [`Placement`] by job position: the ordinal of each job instead of job lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// The ordinal of every job.
    pub owners: Owners,
    /// Ordinals whose worker runs one dedicated job and nothing else, ascending.
    pub dedicated_workers: Vec<usize>,
    /// Dedicated jobs that run as shared jobs for want of workers, in `qos.dedicated` order.
    pub dedicated_unmet: Vec<String>,
}

impl Placed {
    /// The placement of `jobs`, the job list it was placed from.
    fn into_placement(self, jobs: &[String]) -> Placement {
        Placement {
            assignment: self.owners.assignment(jobs),
            dedicated_workers: self.dedicated_workers,
            dedicated_unmet: self.dedicated_unmet,
        }
    }
}

/// The current assignment to plan from, read from the config in the ConfigMap.
///
/// Under a neutral `qos`, jobs in transit count as unplaced, so they go where balance needs
/// them. Otherwise they count as held by the pod that last held them: weighted balance computed
/// after a revoke could differ from the one computed before it, and counting what a pod may
/// still run makes the target the same on both sides of the revoke.
pub fn current_assignment(
    config: &WorkerConfig,
    statefulset: &str,
    qos: &Qos,
) -> Option<Assignment> {
    current_holders(config, statefulset, qos).map(|held| held.to_assignment())
}

/// [`current_assignment`] borrowed from `config`.
pub fn current_holders<'a>(
    config: &'a WorkerConfig,
    statefulset: &str,
    qos: &Qos,
) -> Option<Held<'a>> {
    if qos.is_neutral() {
        config.held(statefulset)
    } else {
        config.held_with_transit(statefulset)
    }
}

/// Like [`assign_with_qos`], over the ordinals `0..replicas` that are not `absent`: an absent
/// worker (one whose Lease expired) gets no job, and its jobs go to the others as if it were not
/// in the pool, so a sticky assignment moves only them. Ordinals keep their place: the
/// assignment still has `replicas` entries. (`Consistent` hashes over the members' positions,
/// so it may move more.)
pub fn assign_over_members(
    strategy: Strategy,
    jobs: &[String],
    replicas: usize,
    absent: &BTreeSet<usize>,
    current: Option<&Assignment>,
    qos: &Qos,
) -> Placement {
    let current = current.map(Held::from);
    place_over_members(strategy, jobs, replicas, absent, current.as_ref(), qos).into_placement(jobs)
}

/// [`assign_over_members`] by job position, from what the workers hold now: neither `current`
/// nor the result copies a job name.
pub fn place_over_members(
    strategy: Strategy,
    jobs: &[String],
    replicas: usize,
    absent: &BTreeSet<usize>,
    current: Option<&Held>,
    qos: &Qos,
) -> Placed {
    if absent.iter().all(|&ordinal| ordinal >= replicas) {
        return place(strategy, jobs, replicas, current, qos);
    }
    let members: Vec<usize> = (0..replicas).filter(|o| !absent.contains(o)).collect();
    let current = current.map(|current| {
        Held::new(
            members
                .iter()
                .map(|&o| current.workers().get(o).cloned().unwrap_or_default())
                .collect(),
        )
    });
    let placed = place(strategy, jobs, members.len(), current.as_ref(), qos);
    let owners = placed
        .owners
        .iter()
        .map(|position| position.map_or(UNOWNED, |position| members[position]))
        .collect();
    Placed {
        owners: Owners::new(owners, replicas),
        dedicated_workers: placed
            .dedicated_workers
            .iter()
            .map(|&position| members[position])
            .collect(),
        dedicated_unmet: placed.dedicated_unmet,
    }
}

/// Assigns `jobs` to the ordinals `0..replicas` with `strategy`, honouring `qos`.
///
/// Dedicated jobs get workers of their own as far as workers allow (see the rule in
/// `dedicated.rs`); the other jobs, with the dedicated jobs left without a worker, are assigned
/// over the remaining workers in ordinal order by `strategy`. `Sticky` balances their weights
/// when some job weighs more than 1 (the rule in `weighted.rs`); `Consistent` and `Contiguous`
/// ignore weights. Under a neutral `qos` ([`Qos::is_neutral`]) this is exactly [`crate::assign`].
///
/// `current` is the assignment now in the ConfigMap, if any; `Sticky` and the choice of
/// dedicated workers use it. `jobs` and `qos` must be valid ([`crate::validate_jobs`],
/// [`crate::validate_qos`]).
pub fn assign_with_qos(
    strategy: Strategy,
    jobs: &[String],
    replicas: usize,
    current: Option<&Assignment>,
    qos: &Qos,
) -> Placement {
    let current = current.map(Held::from);
    place(strategy, jobs, replicas, current.as_ref(), qos).into_placement(jobs)
}

/// [`assign_with_qos`] by job position.
fn place(
    strategy: Strategy,
    jobs: &[String],
    replicas: usize,
    current: Option<&Held>,
    qos: &Qos,
) -> Placed {
    if qos.is_neutral() {
        return Placed {
            owners: crate::owners(strategy, jobs, replicas, current),
            ..Placed::default()
        };
    }
    if replicas == 0 {
        return Placed {
            dedicated_unmet: qos.dedicated.clone(),
            ..Placed::default()
        };
    }

    let position = sticky::positions(jobs);
    // One pass over the weights that are listed, not a map lookup per job.
    let mut weights = vec![1_u64; jobs.len()];
    for (job, &weight) in &qos.weights {
        if let Some(&p) = position.get(job.as_str()) {
            weights[p] = weight;
        }
    }
    let current_owners = match current {
        Some(current) => sticky::current_owners_by(&position, jobs.len(), replicas, current),
        None => vec![UNOWNED; jobs.len()],
    };

    let shared_count = jobs.len() - qos.dedicated.len();
    let served_count = dedicated::served(qos.dedicated.len(), shared_count, replicas);
    let served: Vec<usize> = qos.dedicated[..served_count]
        .iter()
        .map(|job| position[job.as_str()])
        .collect();
    let claimed = dedicated::claim(&served, &current_owners, &weights, replicas);

    let mut owners = vec![UNOWNED; jobs.len()];
    let mut is_dedicated_worker = vec![false; replicas];
    for (&position, &ordinal) in served.iter().zip(&claimed) {
        owners[position] = ordinal;
        is_dedicated_worker[ordinal] = true;
    }
    let shared_workers: Vec<usize> = (0..replicas)
        .filter(|&ordinal| !is_dedicated_worker[ordinal])
        .collect();
    let shared_positions: Vec<usize> = (0..jobs.len())
        .filter(|&position| owners[position] == UNOWNED)
        .collect();
    if !shared_positions.is_empty() {
        let shared_owners = assign_shared(
            strategy,
            jobs,
            &shared_positions,
            &shared_workers,
            &current_owners,
            &weights,
            qos.is_weighted(),
        );
        for (&position, &index) in shared_positions.iter().zip(&shared_owners) {
            owners[position] = shared_workers[index];
        }
    }

    let mut dedicated_workers = claimed;
    dedicated_workers.sort_unstable();
    Placed {
        owners: Owners::new(owners, replicas),
        dedicated_workers,
        dedicated_unmet: qos.dedicated[served_count..].to_vec(),
    }
}

/// The shared jobs (`jobs[p]` for `p` in `positions`) over the shared workers (the ordinals in
/// `workers`, ascending): the owner of each as an index into `workers`.
fn assign_shared(
    strategy: Strategy,
    jobs: &[String],
    positions: &[usize],
    workers: &[usize],
    current_owners: &[usize],
    weights: &[u64],
    weighted: bool,
) -> Vec<usize> {
    let shared: Cow<[String]> = if positions.len() == jobs.len() {
        Cow::Borrowed(jobs)
    } else {
        Cow::Owned(positions.iter().map(|&p| jobs[p].clone()).collect())
    };
    let count = workers.len();
    match strategy {
        Strategy::Sticky => {
            // Ordinal -> index among the shared workers (UNOWNED for dedicated workers).
            let mut index_of = vec![UNOWNED; workers.last().map_or(0, |&last| last + 1)];
            for (index, &ordinal) in workers.iter().enumerate() {
                index_of[ordinal] = index;
            }
            let kept: Vec<usize> = positions
                .iter()
                .map(|&p| index_of.get(current_owners[p]).copied().unwrap_or(UNOWNED))
                .collect();
            if weighted {
                let shared_weights: Vec<u64> = positions.iter().map(|&p| weights[p]).collect();
                weighted::owners(&shared, &shared_weights, count, kept)
            } else {
                sticky::owners_from(&shared, count, kept)
            }
        }
        Strategy::Consistent => consistent::owners(&shared, count),
        Strategy::Contiguous => contiguous::owners(shared.len(), count),
    }
}

#[cfg(test)]
mod member_tests {
    use super::*;

    fn jobs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("j{i}")).collect()
    }

    #[test]
    fn an_absent_worker_gets_nothing_and_only_its_jobs_move() {
        let jobs = jobs(9);
        let qos = Qos::default();
        let before = assign_with_qos(Strategy::Sticky, &jobs, 3, None, &qos).assignment;
        let absent = BTreeSet::from([1]);
        let after = assign_over_members(Strategy::Sticky, &jobs, 3, &absent, Some(&before), &qos)
            .assignment;
        assert_eq!(after.replicas(), 3);
        assert!(after.workers()[1].is_empty());
        for ordinal in [0, 2] {
            for job in &before.workers()[ordinal] {
                assert!(
                    after.workers()[ordinal].contains(job),
                    "{job} stayed on {ordinal}"
                );
            }
        }
        let mut all: Vec<&String> = after.workers().iter().flatten().collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 9, "every job placed once: {after:?}");
        assert_eq!(after.loads().iter().max(), Some(&5));
    }

    #[test]
    fn without_absent_workers_it_is_assign_with_qos() {
        let jobs = jobs(7);
        let qos = Qos::default();
        let plain = assign_with_qos(Strategy::Sticky, &jobs, 3, None, &qos);
        let members = assign_over_members(Strategy::Sticky, &jobs, 3, &BTreeSet::new(), None, &qos);
        assert_eq!(plain, members);
    }
}
