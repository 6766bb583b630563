//! Which dedicated jobs get a worker of their own, and which worker.
//!
//! # The rule
//! With `D` dedicated jobs and `N` workers, every dedicated job gets a worker when there are only
//! dedicated jobs and `D <= N`. Otherwise one worker at least stays shared (for the shared jobs,
//! or for the dedicated jobs left without a worker) and `k = min(D, N - 1)` dedicated jobs get a
//! worker: the first `k` in the order of `qos.dedicated`. The others run as shared jobs. Each of
//! the `k` then claims a worker:
//! 1. a job that is already alone on a worker keeps it;
//! 2. the others, in list order, take the unclaimed worker that now holds the least weight of
//!    other jobs (its own current worker preferred on ties, then the lowest ordinal), so that as
//!    few jobs as possible make way: a newly dedicated job stays where it is if its worker is
//!    the lightest, and after N -> N+1 a job that waited for a worker gets the new, empty one.
//!
//! From scratch the dedicated jobs take the lowest ordinals, which a scale-down keeps.

use crate::sticky::UNOWNED;

/// How many dedicated jobs get a worker of their own.
pub(crate) fn served(dedicated: usize, shared: usize, workers: usize) -> usize {
    if shared == 0 && dedicated <= workers {
        dedicated
    } else {
        dedicated.min(workers.saturating_sub(1))
    }
}

/// The worker of every served dedicated job: `served[i]` is the position (in the job list) of
/// the `i`-th served job, and the result's `i`-th entry its ordinal. `owners[p]` is the current
/// owner of job `p` among `0..workers` (or [`UNOWNED`]) and `weights[p]` its weight.
pub(crate) fn claim(
    served: &[usize],
    owners: &[usize],
    weights: &[u64],
    workers: usize,
) -> Vec<usize> {
    let mut held = vec![0_usize; workers];
    let mut load = vec![0_u64; workers];
    for (position, &owner) in owners.iter().enumerate() {
        if owner != UNOWNED {
            held[owner] += 1;
            load[owner] += weights[position];
        }
    }
    let mut claimed = vec![false; workers];
    let mut worker_of = vec![UNOWNED; served.len()];
    // 1. Alone on its worker: keep it.
    for (slot, &position) in served.iter().enumerate() {
        let owner = owners[position];
        if owner != UNOWNED && held[owner] == 1 {
            claimed[owner] = true;
            worker_of[slot] = owner;
        }
    }
    // 2. The unclaimed worker with the least weight of other jobs.
    for (slot, &position) in served.iter().enumerate() {
        if worker_of[slot] != UNOWNED {
            continue;
        }
        let own = owners[position];
        let other_weight =
            |ordinal: usize| load[ordinal] - if ordinal == own { weights[position] } else { 0 };
        let worker = (0..workers)
            .filter(|&ordinal| !claimed[ordinal])
            .min_by_key(|&ordinal| (other_weight(ordinal), ordinal != own, ordinal))
            .expect("served() leaves a worker for every served job");
        claimed[worker] = true;
        worker_of[slot] = worker;
    }
    worker_of
}
