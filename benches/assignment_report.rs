//! The assignment report: for every J and N of the grid and every algorithm, the time to compute,
//! the balance, and the jobs moved and workers touched by each of the four changes, as a markdown
//! table, followed by the checks against the targets; then the same for weighted `Sticky`
//! (`spec.qos.weights`, weights 1 to 10) on N -> N+1 at J=100000, N=1000, with its own table and
//! checks.
//!
//! `cargo bench --bench assignment-report` (release build, one thread). Times are medians of
//! repeated runs.

mod scenario;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use scenario::{
    Algorithm, Change, JOB_COUNTS, LARGEST_WEIGHT, STATEFULSET, WEIGHTED_SIZE, WORKER_COUNTS, jobs,
    weighted_qos,
};
use swarm_assign::{Assignment, Movement, Qos, Strategy, assign_with_qos};

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

/// The difference between the heaviest and the lightest worker's total job weight.
fn weight_spread(assignment: &Assignment, qos: &Qos) -> u64 {
    let loads: Vec<u64> = assignment
        .workers()
        .iter()
        .map(|held| held.iter().map(|job| qos.weight(job)).sum())
        .collect();
    loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0)
}

/// The ordinal holding each job of `assignment`.
fn owners(assignment: &Assignment) -> HashMap<&str, usize> {
    assignment
        .workers()
        .iter()
        .enumerate()
        .flat_map(|(ordinal, held)| held.iter().map(move |job| (job.as_str(), ordinal)))
        .collect()
}

/// Total weight of the jobs of `jobs` whose owner in `next` differs from that in `previous` (jobs
/// that only one of them holds are not moves).
fn weight_moved(jobs: &[String], qos: &Qos, previous: &Assignment, next: &Assignment) -> u64 {
    let (before, after) = (owners(previous), owners(next));
    jobs.iter()
        .filter(|job| {
            matches!(
                (before.get(job.as_str()), after.get(job.as_str())),
                (Some(from), Some(to)) if from != to
            )
        })
        .map(|job| qos.weight(job))
        .sum()
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "FAIL" }
}

/// Weighted `Sticky` at [`WEIGHTED_SIZE`]: from scratch, then N -> N+1 from the settled
/// assignment at N; its table and checks.
fn weighted_report() {
    let (job_count, replicas) = WEIGHTED_SIZE;
    let jobs = jobs(job_count);
    let qos = weighted_qos(&jobs);
    let run = |replicas: usize, current: Option<&Assignment>| {
        assign_with_qos(Strategy::Sticky, &jobs, replicas, current, &qos).assignment
    };
    let (scratch_result, scratch) = timed(|| run(replicas, None));
    // The settled assignment at N: what the operator holds after reconciling N again.
    let settled = run(replicas, Some(&scratch_result));
    let is_fixed_point = settled == scratch_result;
    let (after, update) = timed(|| run(replicas + 1, Some(&settled)));

    let total: u64 = jobs.iter().map(|job| qos.weight(job)).sum();
    let (spread_before, spread_after) =
        (weight_spread(&settled, &qos), weight_spread(&after, &qos));
    let moved = weight_moved(&jobs, &qos, &settled, &after);
    let bound = total as f64 / (replicas + 1) as f64;
    let ratio = moved as f64 / bound;
    let movement = Movement::between(STATEFULSET, &jobs, Some(&settled), &after);
    let exactly_once = match (
        duplicated_and_lost(&jobs, &settled),
        duplicated_and_lost(&jobs, &after),
    ) {
        ((0, 0), (0, 0)) => "yes".to_string(),
        ((0, 0), (duplicated, lost)) => {
            format!("no after N -> N+1: {duplicated} twice, {lost} lost")
        }
        ((duplicated, lost), _) => format!("no: {duplicated} twice, {lost} lost"),
    };

    println!(
        "| J | N | weights | total weight | from scratch | update N -> N+1 | max-min weight at N | max-min weight at N+1 | largest weight | N -> N+1 weight moved | lower bound total/(N+1) | moved / bound | N -> N+1 jobs moved / touched | exactly once |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    println!(
        "| {job_count} | {replicas} | 1..{LARGEST_WEIGHT} (hash) | {total} | {} | {} | {spread_before} | {spread_after} | {LARGEST_WEIGHT} | {moved} | {bound:.1} | {ratio:.3} | {} / {} | {exactly_once} |",
        format_time(scratch),
        format_time(update),
        movement.jobs_moved,
        movement.workers_touched.len(),
    );
    println!();
    println!(
        "Weighted Sticky at J={job_count}, N={replicas}: update N -> N+1 {} (target < 50 ms), from scratch {}: {}",
        format_time(update),
        format_time(scratch),
        verdict(update < Duration::from_millis(50))
    );
    println!(
        "Weighted Sticky weight moved on N -> N+1: {moved} = {ratio:.3} x the lower bound {bound:.1} (target within 5%): {}",
        verdict((ratio - 1.0).abs() <= 0.05)
    );
    println!(
        "Weighted Sticky max-min weight: {spread_before} at N, {spread_after} at N+1 (target <= largest weight {LARGEST_WEIGHT}): {}",
        verdict(spread_before <= LARGEST_WEIGHT && spread_after <= LARGEST_WEIGHT)
    );
    println!(
        "Weighted Sticky holds every job exactly once at N and N+1, and from scratch is already settled at N: {}",
        verdict(exactly_once == "yes" && is_fixed_point)
    );
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
    println!();
    weighted_report();
}
