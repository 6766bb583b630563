//! The operator benchmark: runs the release `swarm-operator` against a grid of pools x workers
//! x jobs and prints what each cell costs.
//!
//! `cargo bench --bench operator [-- CELL...]`, a cell being `POOLSxWORKERSxJOBS` (default:
//! the grid of the table in docs/performance.md). Cells run on kube-sim, started in this
//! process; with `SWARM_BENCH_KUBECONFIG=<path>` they run on that cluster instead (for
//! example one from `scripts/real-cluster.sh up`). Per cell:
//! 1. create the StatefulSets and wait for their pods, then start the operator;
//! 2. first rollout: create every pool, time until all are Balanced with every job held;
//! 3. idle: count the operator's requests over `SWARM_BENCH_IDLE_SECONDS` (15);
//! 4. scale: one pool at a time (up to 20), scale its StatefulSet up by one and time until the
//!    ConfigMap's version changes, then wait for the pool to settle;
//! 5. full rollout: add a job per worker to every pool (every worker restarts), time until all
//!    settle; the RSS after it is read after the same idle time as the RSS after step 3;
//!    `SWARM_BENCH_ROLLOUTS=N` runs N of them, each with the RSS after it. The rollouts after
//!    the first rename one job of every worker instead (read from the workers' configs), so the
//!    pools keep their size and the RSS after each compares like for like.
//!
//! A pool of more than 20,000 jobs takes them from ConfigMaps (`spec.jobsFrom`), as a SwarmPool
//! object holds at most about 1.5 MiB.
//!
//! A cell with the suffix `:ack` (`10x10x50:ack`) creates its pools under `rollout.policy:
//! Acknowledge`, and this process runs the load driver of `driver.rs`: a `swarm-worker` Worker
//! per worker pod, started as its pod turns Ready, as the kubelet starts a pod's containers
//! (with `SWARM_BENCH_WORKERS_AFTER_PODS=1`, once every pod is Ready, all within one read
//! interval: a whole fleet starting at once, as after an outage), sharing 512 HTTP/2 connections, with the library's permit (30 s: a fence read every 15 s, the Lease
//! written only to acknowledge) unless `SWARM_BENCH_PERMIT_SECONDS` sets one. Nothing restarts: step 2 waits for every worker's
//! acknowledgement as well, and the cell also reports how long after the last worker pod was
//! Ready every pool was Balanced, how many pods the operator deleted, the load driver's
//! requests, and what the workers cost at rest: in the idle phase, per worker and 10 s, the
//! requests by verb and resource as the driver counted them, as kube-sim's request log shows
//! them (on kube-sim) or as the API server's `apiserver_request_total` does (every client's),
//! with the API server's and etcd's CPU.
//!
//! The pseudo-cell `costs` measures instead what one fence read costs the control plane against
//! one renewal of the protocol before it: 4 tasks for 30 s each send quorum GETs of 200 small
//! ConfigMaps, then read-modify-write PUTs of 200 Leases (the cached object, re-read on a
//! conflict, as the renewing workers did), and it prints the API server's and etcd's CPU per
//! request, less their CPU over 15 s of nothing beforehand (see `costs.rs`).
//!
//! `SWARM_BENCH_OPERATOR_LOG=<path>` keeps the operator's log there, at `info` (each write and
//! delete with its time), instead of warnings in a scratch file.
//!
//! Requests come from the operator's own `swarm_operator_api_requests_total`; memory and CPU
//! from `/proc`. On a real control plane an `:ack` cell also reports, from the API server's own
//! `/metrics`, its Lease updates, their latency (p50/p99) and its CPU, and etcd's CPU from
//! etcd's (its URL in `etcd-url` beside the kubeconfig, as `scripts/real-cluster.sh` writes
//! it), in the idle phase (every worker reading, nothing changing) and over the whole cell.
//!
//! The phases are in `phases.rs`, the pools they apply and wait on in `pools.rs`, what a cell
//! prints in `report.rs`.

mod apiserver;
mod cluster;
mod costs;
mod driver;
mod phases;
mod pools;
mod process;
mod report;
mod served;
mod worker_identity;

use std::path::PathBuf;
use std::time::Duration;

use cluster::Cluster;
use phases::{Baseline, Bench, Phases};
use pools::Pools;
use report::{Measured, print_detail, print_table};

/// The grid of the table in docs/performance.md ("The operator at scale").
const DEFAULT_GRID: &str = "10x10x50 100x5x50 100x100x300";
/// How long any phase may take before the cell fails.
const PHASE_LIMIT: Duration = Duration::from_secs(1800);

/// One grid cell.
#[derive(Clone, Copy, Debug)]
struct Cell {
    pools: usize,
    workers: usize,
    jobs: usize,
    /// Pools under `rollout.policy: Acknowledge`, workers run by the load driver.
    ack: bool,
}

impl Cell {
    fn parse(text: &str) -> Result<Cell, String> {
        let (grid, ack) = match text.split_once(':') {
            None => (text, false),
            Some((grid, "ack")) => (grid, true),
            Some(_) => return Err(format!("{text}: the only suffix is :ack")),
        };
        let parts: Vec<usize> = grid
            .split('x')
            .map(|n| {
                n.parse()
                    .map_err(|_| format!("{text}: not POOLSxWORKERSxJOBS"))
            })
            .collect::<Result<_, _>>()?;
        match parts.as_slice() {
            [pools, workers, jobs] if *pools > 0 && *workers > 0 => Ok(Cell {
                pools: *pools,
                workers: *workers,
                jobs: *jobs,
                ack,
            }),
            _ => Err(format!("{text}: expected POOLSxWORKERSxJOBS, each above 0")),
        }
    }

    fn label(&self) -> String {
        let policy = if self.ack { " (Acknowledge)" } else { "" };
        format!("{} x {} x {}{policy}", self.pools, self.workers, self.jobs)
    }
}

/// The pseudo-cell that measures a fence read's cost against a Lease renewal's.
const COSTS: &str = "costs";

/// What one argument asks for.
enum Run {
    Cell(Cell),
    /// The pseudo-cell `costs` (`costs.rs`).
    Costs,
}

impl Run {
    fn parse(text: &str) -> Result<Run, String> {
        match text {
            COSTS => Ok(Run::Costs),
            _ => Cell::parse(text).map(Run::Cell),
        }
    }
}

fn main() {
    let cells: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let cells = if cells.is_empty() {
        std::env::var("SWARM_BENCH_GRID")
            .unwrap_or_else(|_| DEFAULT_GRID.to_owned())
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    } else {
        cells
    };
    let runs: Vec<Run> = match cells.iter().map(|c| Run::parse(c)).collect() {
        Ok(cells) => cells,
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    };
    let real = std::env::var_os("SWARM_BENCH_KUBECONFIG").map(PathBuf::from);
    let idle_seconds = std::env::var("SWARM_BENCH_IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let permit_seconds: Option<u64> = std::env::var("SWARM_BENCH_PERMIT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut results = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let cell = match run {
            Run::Costs => {
                eprintln!("cell {}: {COSTS}", i + 1);
                runtime.block_on(costs::run(real.clone(), i));
                continue;
            }
            Run::Cell(cell) => *cell,
        };
        eprintln!("cell {}: {}", i + 1, cell.label());
        let measured = runtime.block_on(run_cell(
            cell,
            real.clone(),
            i,
            idle_seconds,
            permit_seconds,
        ));
        results.push(measured);
    }
    if !results.is_empty() {
        print_table(&results);
    }
}

/// Runs one cell, its phases in the order the top of this file lists them, and prints what it
/// measured before the cluster is cleaned up.
async fn run_cell(
    cell: Cell,
    real: Option<PathBuf>,
    index: usize,
    idle_seconds: u64,
    permit_seconds: Option<u64>,
) -> Measured {
    let dir = tempfile::tempdir().expect("scratch directory");
    let cluster = Cluster::start(dir.path(), real.as_deref(), &format!("bench-{index}")).await;
    let http = reqwest::Client::new();
    let after_pods = std::env::var_os("SWARM_BENCH_WORKERS_AFTER_PODS").is_some_and(|v| v == "1");
    let mut driver = None;
    if !after_pods {
        driver = phases::start_load_driver(&cluster, cell, permit_seconds).await;
    }
    let pods_created = phases::create_worker_pods(&cluster, cell).await;
    if after_pods {
        driver = phases::start_load_driver(&cluster, cell, permit_seconds).await;
    }
    phases::wait_load_driver(driver.as_ref(), cell).await;
    let baseline = Baseline::read(&cluster, driver.as_ref()).await;
    let operator = phases::start_operator(&cluster, dir.path(), &http).await;
    let mut bench = Bench {
        cell,
        cluster: &cluster,
        http,
        operator,
        driver,
        idle_seconds,
    };
    let mut pools = Pools::new(cell);
    let first = bench.first_rollout(&pools).await;
    let idle = bench.idle(&first).await;
    let scale = bench.scale_one_pool_at_a_time(&mut pools).await;
    let full = bench.full_rollout(&mut pools).await;
    let more = bench.more_rollouts(&mut pools).await;
    let phases = Phases {
        pods_created,
        baseline,
        first,
        idle,
        scale,
        full,
        more,
    };
    let api_at_end = bench.api_sample().await;
    let ack = bench
        .driver
        .take()
        .map(|driver| bench.acknowledged(driver, &phases, api_at_end, permit_seconds));
    let measured = bench.measured(phases, ack);
    // Stops the operator.
    drop(bench);
    // Printed before the namespace goes: deleting thousands of pods may outlast the limit.
    print_detail(&measured);
    cluster.finish().await;
    measured
}
