//! `Sticky`: perfect balance with minimal movement from the current assignment.
//!
//! # The rule
//! Given the jobs, N and the assignment now in the ConfigMap:
//! 1. every job keeps its current owner if that owner is still one of the N ordinals (a job held
//!    twice by a hand-edited config keeps its lowest such ordinal);
//! 2. targets: with `q = J / N` and `r = J % N`, the `r` workers holding the most kept jobs
//!    (ties: lowest ordinal) may hold `q + 1`, the others `q`; this choice keeps the most jobs;
//! 3. a worker above its target sheds its surplus, highest [`job_order`] first;
//! 4. shed jobs, jobs of removed workers and new jobs are sorted by [`job_order`] and handed out
//!    in that order to the workers below their target, lowest ordinal first.
//!
//! Only the surplus of step 3 and the jobs that had no owner among the N ordinals move, which is
//! the lower bound for reaching perfect balance. Every decision depends on the job set, N and the
//! current owners only, never on spec order or hash-map iteration order.
//!
//! # From scratch
//! Without a current assignment (or one that keeps none of the jobs) the result is the canonical
//! assignment: all jobs on worker 0, then the rule above for 1 -> 2 -> ... -> N. A ConfigMap lost
//! after a history of scale-ups is therefore rebuilt exactly as it was.

use foldhash::HashMap;

use crate::assignment::Held;
use crate::hash::{job_hash, job_order};

/// Marks a job that has no owner among the N ordinals.
pub(crate) const UNOWNED: usize = usize::MAX;

/// Owner of every job under the sticky rule. `replicas` must be at least 1.
pub(crate) fn owners(jobs: &[String], replicas: usize, current: Option<&Held>) -> Vec<usize> {
    let kept = current.map_or_else(
        || vec![UNOWNED; jobs.len()],
        |current| current_owners(jobs, replicas, current),
    );
    owners_from(jobs, replicas, kept)
}

/// Owner of every job under the sticky rule, from the current owner of every job (`kept[i]` in
/// `0..replicas`, or [`UNOWNED`]). `replicas` must be at least 1.
pub(crate) fn owners_from(jobs: &[String], replicas: usize, kept: Vec<usize>) -> Vec<usize> {
    debug_assert!(replicas > 0, "the caller handles replicas == 0");
    let hashes: Vec<u64> = jobs.iter().map(|job| job_hash(job)).collect();
    if kept.iter().any(|&owner| owner != UNOWNED) {
        rebalance(jobs, &hashes, replicas, kept)
    } else {
        canonical(jobs, &hashes, replicas)
    }
}

/// The owner of every job in `current`, limited to ordinals below `replicas`.
fn current_owners(jobs: &[String], replicas: usize, current: &Held) -> Vec<usize> {
    current_owners_by(&positions(jobs), jobs.len(), replicas, current)
}

/// The position of every job in `jobs`.
pub(crate) fn positions(jobs: &[String]) -> HashMap<&str, usize> {
    jobs.iter()
        .enumerate()
        .map(|(position, job)| (job.as_str(), position))
        .collect()
}

/// [`current_owners`] with the positions of the `job_count` jobs already indexed.
pub(crate) fn current_owners_by(
    index: &HashMap<&str, usize>,
    job_count: usize,
    replicas: usize,
    current: &Held,
) -> Vec<usize> {
    let mut owners = vec![UNOWNED; job_count];
    for (ordinal, held) in current.workers().iter().take(replicas).enumerate() {
        for &job in held {
            if let Some(&position) = index.get(job)
                && owners[position] == UNOWNED
            {
                owners[position] = ordinal;
            }
        }
    }
    owners
}

/// Steps 2 to 4 of the rule, starting from the kept owners. `hashes[i]` is the [`job_hash`] of
/// `jobs[i]`, computed once in spec order: hashing the jobs of shedding workers on demand reads
/// strings scattered over the heap and costs several times more.
fn rebalance(
    jobs: &[String],
    hashes: &[u64],
    replicas: usize,
    mut owners: Vec<usize>,
) -> Vec<usize> {
    let mut kept: Vec<Vec<usize>> = vec![Vec::new(); replicas];
    let mut pool: Vec<usize> = Vec::new();
    for (position, &owner) in owners.iter().enumerate() {
        if owner == UNOWNED {
            pool.push(position);
        } else {
            kept[owner].push(position);
        }
    }

    let order = |&a: &usize, &b: &usize| job_order((hashes[a], &jobs[a]), (hashes[b], &jobs[b]));
    let targets = targets(jobs.len(), &kept);
    for (held, &target) in kept.iter_mut().zip(&targets) {
        if held.len() > target {
            // The surplus: the jobs above position `target` in job order.
            held.select_nth_unstable_by(target, order);
            pool.extend(held.drain(target..));
        }
    }

    pool.sort_unstable_by(order);
    let mut pool = pool.into_iter();
    for (ordinal, (held, &target)) in kept.iter().zip(&targets).enumerate() {
        for position in pool.by_ref().take(target.saturating_sub(held.len())) {
            owners[position] = ordinal;
        }
    }
    debug_assert!(pool.next().is_none(), "targets add up to the job count");
    owners
}

/// Balanced targets: `q + 1` for the `J % N` workers keeping the most jobs (ties: lowest
/// ordinal), `q` for the others.
fn targets(job_count: usize, kept: &[Vec<usize>]) -> Vec<usize> {
    let (size, longer) = (job_count / kept.len(), job_count % kept.len());
    let mut by_kept: Vec<usize> = (0..kept.len()).collect();
    by_kept.sort_unstable_by(|&a, &b| kept[b].len().cmp(&kept[a].len()).then(a.cmp(&b)));
    let mut targets = vec![size; kept.len()];
    for &ordinal in &by_kept[..longer] {
        targets[ordinal] += 1;
    }
    targets
}

/// The canonical assignment: all jobs on worker 0, then the sticky rule for 1 -> 2 -> ... -> N.
///
/// Instead of running the general rule N - 1 times (O(J * N)), this uses the shape the rule keeps:
/// after step `m` workers `0..J % m` hold `J / m + 1` jobs and the others `J / m`, so step
/// `m -> m + 1` has targets `q' + 1` for ordinals below `r'` and knows which workers shed without
/// looking at the others. Each worker keeps its jobs as ranks in [`job_order`], ascending, and
/// sheds from the end. Cost: ranking the jobs, O(J log J); then N - 1 steps that visit only the
/// workers that shed and move about J ln N ranks in all; each step sorts the integer ranks it
/// moves, so the whole is at most O(J log J log N) comparisons, far from the O(J N) of running
/// the general rule N - 1 times.
fn canonical(jobs: &[String], hashes: &[u64], replicas: usize) -> Vec<usize> {
    let total = jobs.len();
    let mut by_rank: Vec<usize> = (0..total).collect();
    by_rank.sort_unstable_by(|&a, &b| job_order((hashes[a], &jobs[a]), (hashes[b], &jobs[b])));

    let mut held: Vec<Vec<usize>> = Vec::with_capacity(replicas);
    held.push((0..total).collect());
    for workers in 1..replicas {
        let (size, longer) = (total / workers, total % workers);
        let (next_size, next_longer) = (total / (workers + 1), total % (workers + 1));
        let shed = |ordinal: usize| {
            size - next_size + usize::from(ordinal < longer) - usize::from(ordinal < next_longer)
        };
        // Workers that shed: everyone when the size drops by 2 or more; all but
        // `longer..next_longer` (which shed 0) when it drops by 1; only `next_longer..longer`
        // (which shed 1) when it stays.
        let (first, second) = match size - next_size {
            0 => (next_longer..longer, 0..0),
            1 => (0..longer, longer.max(next_longer)..workers),
            _ => (0..workers, 0..0),
        };
        let mut moved = Vec::with_capacity(next_size);
        for ordinal in first.chain(second) {
            let ranks = &mut held[ordinal];
            let keep = ranks.len() - shed(ordinal);
            moved.extend(ranks.drain(keep..));
        }
        moved.sort_unstable();
        debug_assert_eq!(moved.len(), next_size, "the new worker gets q' jobs");
        held.push(moved);
    }

    let mut owners = vec![UNOWNED; total];
    for (ordinal, ranks) in held.iter().enumerate() {
        for &rank in ranks {
            owners[by_rank[rank]] = ordinal;
        }
    }
    owners
}
