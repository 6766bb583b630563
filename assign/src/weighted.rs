//! `Sticky` with job weights: the total weights of the workers differ by at most the largest job
//! weight, with as little movement as that takes.
//!
//! # The rule
//! With `W` the largest weight of the jobs:
//! 1. every job keeps its current owner if that owner is still one of the workers;
//! 2. if no job is left without an owner and the loads already differ by at most `W`, that is
//!    the answer (a valid assignment is returned unchanged);
//! 3. jobs without an owner (new jobs, jobs of removed workers), heaviest first and then in
//!    [`job_order`], each go to the lightest worker (ties: lowest index);
//! 4. while the heaviest and the lightest worker differ by more than `W`, the heaviest (ties:
//!    lowest index) hands the lightest (ties: lowest index) one job: the heaviest of its jobs
//!    weighing at most half the difference, or its lightest job if none does (ties: the highest
//!    in [`job_order`]).
//!
//! Step 3 keeps the loads within `W` of each other if they were, so adding a job moves no other
//! job and removing a worker moves only that worker's jobs. Step 4 moves weight from the heaviest
//! to the lightest only. Every move of step 4 lowers the sum of the squared loads (a job of weight
//! `w < gap` goes from a load to one `gap` lower), so it ends. After N -> N+1 from loads within
//! `W` of each other, only the new worker receives: a worker that gave a job was the heaviest
//! then and lost at most `W`, and the heaviest load never grows, so it stays within `W` of every
//! later maximum; a worker that gave nothing is at least the old minimum, within `W` of every
//! later maximum too. The new worker ends within `W` of `T / (N + 1)`.
//!
//! Decisions depend on the weights, the current owners and [`job_order`] only.

use std::collections::BTreeSet;

use crate::hash::{job_hash, job_order};
use crate::sticky::UNOWNED;

/// Owner of every job under the weighted sticky rule. `owners[i]` is the current owner of
/// `jobs[i]` among `0..workers`, or [`UNOWNED`]; `weights[i]` is its weight. `workers` must be
/// at least 1.
pub(crate) fn owners(
    jobs: &[String],
    weights: &[u64],
    workers: usize,
    mut owners: Vec<usize>,
) -> Vec<usize> {
    debug_assert!(workers > 0, "the caller handles 0 workers");
    let Some(&heaviest_job) = weights.iter().max() else {
        return owners;
    };
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); workers];
    let mut loads = vec![0_u64; workers];
    let mut pool = Vec::new();
    for (position, &owner) in owners.iter().enumerate() {
        if owner == UNOWNED {
            pool.push(position);
        } else {
            held[owner].push(position);
            loads[owner] += weights[position];
        }
    }
    let spread = |loads: &[u64]| {
        let (min, max) = loads
            .iter()
            .fold((u64::MAX, 0), |(min, max), &l| (min.min(l), max.max(l)));
        max - min
    };
    if pool.is_empty() && spread(&loads) <= heaviest_job {
        return owners;
    }

    let hashes: Vec<u64> = jobs.iter().map(|job| job_hash(job)).collect();
    let order = |a: usize, b: usize| job_order((hashes[a], &jobs[a]), (hashes[b], &jobs[b]));
    let mut by_load: BTreeSet<(u64, usize)> = loads.iter().copied().zip(0..).collect();

    // Step 3: the jobs without an owner, heaviest first, each to the lightest worker.
    pool.sort_unstable_by(|&a, &b| weights[b].cmp(&weights[a]).then_with(|| order(a, b)));
    for position in pool {
        let (load, lightest) = by_load.pop_first().expect("at least one worker");
        let load = load + weights[position];
        held[lightest].push(position);
        loads[lightest] = load;
        by_load.insert((load, lightest));
    }

    // Step 4: from the heaviest to the lightest while they differ by more than the heaviest job.
    loop {
        let (&(low, lightest), &(high, _)) = (
            by_load.first().expect("at least one worker"),
            by_load.last().expect("at least one worker"),
        );
        let gap = high - low;
        if gap <= heaviest_job {
            break;
        }
        // The heaviest load's lowest index: the first entry at `high`.
        let heaviest = by_load
            .range((high, 0)..)
            .next()
            .map(|&(_, index)| index)
            .expect("the heaviest load is in the set");
        let slot = pick(&held[heaviest], weights, gap, order);
        let position = held[heaviest].swap_remove(slot);
        let weight = weights[position];
        by_load.remove(&(high, heaviest));
        by_load.remove(&(low, lightest));
        loads[heaviest] -= weight;
        loads[lightest] += weight;
        by_load.insert((loads[heaviest], heaviest));
        by_load.insert((loads[lightest], lightest));
        held[lightest].push(position);
    }

    for (worker, positions) in held.iter().enumerate() {
        for &position in positions {
            owners[position] = worker;
        }
    }
    owners
}

/// The index in `held` of the job the heaviest worker hands over across `gap`: the heaviest
/// weighing at most `gap / 2` (the giver stays at least as heavy as the receiver), else the
/// lightest; ties go to the highest in job order.
fn pick(
    held: &[usize],
    weights: &[u64],
    gap: u64,
    order: impl Fn(usize, usize) -> std::cmp::Ordering,
) -> usize {
    let fits = |position: usize| 2 * weights[position] <= gap;
    let better = |candidate: usize, best: usize| {
        let (c, b) = (held[candidate], held[best]);
        match (fits(c), fits(b)) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => weights[c]
                .cmp(&weights[b])
                .then_with(|| order(c, b))
                .is_gt(),
            (false, false) => weights[c]
                .cmp(&weights[b])
                .reverse()
                .then_with(|| order(c, b))
                .is_gt(),
        }
    };
    (1..held.len()).fold(0, |best, candidate| {
        if better(candidate, best) {
            candidate
        } else {
            best
        }
    })
}
