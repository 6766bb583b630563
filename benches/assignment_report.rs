//! The assignment report: for every J and N of the grid and every algorithm, the time to compute,
//! the balance, and the jobs moved and workers touched by each of the four changes, as a markdown
//! table, followed by the checks against the targets.
//!
//! `cargo bench --bench assignment-report` (release build, one thread). Times are medians of
//! repeated runs.

mod scenario;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use scenario::{Algorithm, Change, JOB_COUNTS, STATEFULSET, WORKER_COUNTS, jobs};
use swarm_assign::{Assignment, Movement, Strategy};

/// Runs `f` repeatedly (at least 3 times, up to about 300 ms) and returns its last result with
/// the median time.
fn timed<T>(mut f: impl FnMut() -> T) -> (T, Duration) {
    let budget = Instant::now();
    let mut times = Vec::new();
    loop {
        let start = Instant::now();
        let result = f();
        times.push(start.elapsed());
        let done = times.len() >= 3
            && (budget.elapsed() > Duration::from_millis(300) || times.len() >= 1_000);
        if done {
            times.sort_unstable();
            return (result, times[times.len() / 2]);
        }
        drop(result);
    }
}

fn format_time(time: Duration) -> String {
    let micros = time.as_secs_f64() * 1e6;
    if micros >= 1_000.0 {
        format!("{:.1} ms", micros / 1_000.0)
    } else {
        format!("{micros:.1} µs")
    }
}

/// Jobs held twice or more, and jobs of `jobs` held by nobody.
fn duplicated_and_lost(jobs: &[String], assignment: &Assignment) -> (usize, usize) {
    let mut holders: HashMap<&str, usize> = HashMap::new();
    for job in assignment.workers().iter().flatten() {
        *holders.entry(job.as_str()).or_default() += 1;
    }
    let duplicated = holders.values().filter(|&&count| count > 1).count();
    let lost = jobs
        .iter()
        .filter(|job| !holders.contains_key(job.as_str()))
        .count();
    (duplicated, lost)
}

/// The fewest jobs any perfectly balanced assignment of `jobs` over `replicas` workers must move
/// from `current` (each job held once): all jobs of removed workers, plus every job above its
/// worker's target when the `J % N` larger targets go to the workers that keep the most.
fn lower_bound(jobs: &[String], replicas: usize, current: &Assignment) -> usize {
    let wanted: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    let mut existing = 0;
    let mut kept = vec![0_usize; replicas];
    for (ordinal, held) in current.workers().iter().enumerate() {
        let count = held
            .iter()
            .filter(|job| wanted.contains(job.as_str()))
            .count();
        existing += count;
        if ordinal < replicas {
            kept[ordinal] = count;
        }
    }
    let (size, longer) = (jobs.len() / replicas, jobs.len() % replicas);
    kept.sort_unstable_by(|a, b| b.cmp(a));
    let stay: usize = kept
        .iter()
        .enumerate()
        .map(|(rank, &count)| count.min(size + usize::from(rank < longer)))
        .sum();
    existing - stay
}

/// One row of the table.
struct Row {
    scratch: Duration,
    update: Duration,
    spread: usize,
    changes: Vec<(usize, usize)>,
    exactly_once: String,
}

fn measure(algorithm: Algorithm, jobs: &[String], replicas: usize) -> Row {
    let (before, scratch) = timed(|| algorithm.run(jobs, replicas, None));
    let mut update = Duration::ZERO;
    let mut changes = Vec::new();
    let mut exactly_once = match duplicated_and_lost(jobs, &before) {
        (0, 0) => None,
        (duplicated, lost) => Some(format!("no: {duplicated} twice, {lost} lost")),
    };
    for change in Change::ALL {
        let (next_jobs, next_replicas) = change.apply(jobs, replicas);
        let (after, time) = timed(|| algorithm.run(&next_jobs, next_replicas, Some(&before)));
        update = update.max(time);
        let movement = Movement::between(STATEFULSET, &next_jobs, Some(&before), &after);
        changes.push((movement.jobs_moved, movement.workers_touched.len()));
        if exactly_once.is_none() && duplicated_and_lost(&next_jobs, &after) != (0, 0) {
            let (duplicated, lost) = duplicated_and_lost(&next_jobs, &after);
            exactly_once = Some(format!(
                "no after {}: {duplicated} twice, {lost} lost",
                change.name()
            ));
        }
    }
    let loads = before.loads();
    let spread = loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0);
    Row {
        scratch,
        update,
        spread,
        changes,
        exactly_once: exactly_once.unwrap_or_else(|| "yes".to_string()),
    }
}

fn main() {
    println!(
        "| J | N | algorithm | from scratch | update | max-min load | N -> N+1 moved / touched | N -> N-1 moved / touched | +1 job moved / touched | -1 job moved / touched | exactly once |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut sticky_at_bound = true;
    let mut target_times = None;
    for job_count in JOB_COUNTS {
        let jobs = jobs(job_count);
        for replicas in WORKER_COUNTS.into_iter().filter(|&n| n <= job_count) {
            let sticky_before = Algorithm::Strategy(Strategy::Sticky).run(&jobs, replicas, None);
            let bounds: Vec<usize> = Change::ALL
                .iter()
                .map(|change| {
                    let (next_jobs, next_replicas) = change.apply(&jobs, replicas);
                    lower_bound(&next_jobs, next_replicas, &sticky_before)
                })
                .collect();
            let bound_cells: Vec<String> = bounds.iter().map(|b| format!("{b} / -")).collect();
            println!(
                "| {job_count} | {replicas} | *lower bound* | | | {} | {} | |",
                usize::from(job_count % replicas != 0),
                bound_cells.join(" | ")
            );
            for algorithm in Algorithm::ALL {
                let row = measure(algorithm, &jobs, replicas);
                if algorithm == Algorithm::Strategy(Strategy::Sticky) {
                    let moved: Vec<usize> = row.changes.iter().map(|&(moved, _)| moved).collect();
                    sticky_at_bound &= moved == bounds;
                    if (job_count, replicas) == (100_000, 1_000) {
                        target_times = Some((row.update, row.scratch));
                    }
                }
                let cells: Vec<String> = row
                    .changes
                    .iter()
                    .map(|(moved, touched)| format!("{moved} / {touched}"))
                    .collect();
                println!(
                    "| {job_count} | {replicas} | {} | {} | {} | {} | {} | {} |",
                    algorithm.name(),
                    format_time(row.scratch),
                    format_time(row.update),
                    row.spread,
                    cells.join(" | "),
                    row.exactly_once
                );
            }
        }
    }
    println!();
    println!(
        "Sticky movement equals the lower bound in every scenario: {}",
        if sticky_at_bound { "yes" } else { "NO" }
    );
    if let Some((update, scratch)) = target_times {
        println!(
            "Sticky at J=100000, N=1000: slowest update {} (target < 20 ms), from scratch {} (target < 200 ms)",
            format_time(update),
            format_time(scratch)
        );
    }
}
