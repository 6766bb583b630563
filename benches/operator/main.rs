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
//! per worker pod, started once every pod is Ready (spread over one read interval), sharing 512
//! HTTP/2 connections, with the library's permit (30 s: a fence read every 15 s, the Lease
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

mod apiserver;
mod cluster;
mod costs;
mod driver;
mod process;
mod served;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::VERSION_ANNOTATION;
use swarm_protocol::names::{POOL_LABEL, WORKER_LABEL};

use cluster::{
    Cluster, changed, configmap_watch_bytes, poll, settled, wait_for, worker_config_map_versions,
};
use driver::LoadDriver;
use process::{HeapAtPeak, OperatorProcess, Requests};

/// The grid of the table in docs/performance.md ("The operator at scale").
const DEFAULT_GRID: &str = "10x10x50 100x5x50 100x100x300";
/// Most pools scaled one by one in the scale phase.
const SCALE_SAMPLES: usize = 20;
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

/// What one cell measured.
struct Measured {
    plane: &'static str,
    cell: Cell,
    /// From creating the StatefulSets to all their pods Ready: the control plane alone.
    pods_created: Duration,
    /// From creating the pools to every pool's first config version written.
    first_configs: Duration,
    converge: Duration,
    rss_converged: f64,
    rss_idle: f64,
    rss_after_rollout: f64,
    /// The most RSS seen at any time of the cell.
    rss_peak: f64,
    /// The most RSS seen in each full rollout (from its start until every pool settled).
    rss_peak_full_rollouts: Vec<f64>,
    /// The allocator's figures at each of those peaks.
    heap_at_full_rollout_peaks: Vec<Option<HeapAtPeak>>,
    /// The most sockets the operator had open at once.
    most_sockets: usize,
    cpu_first_rollout: f64,
    first_rollout: Requests,
    idle: Requests,
    idle_seconds: u64,
    scale: Requests,
    scale_samples: usize,
    scale_latency_ms: Vec<f64>,
    full_rollout: Duration,
    /// Each further full rollout: how long it took, and the RSS after it (after the idle time).
    more_rollouts: Vec<Rollout>,
    full_rollout_requests: Requests,
    /// Only for `:ack` cells.
    ack: Option<AckMeasured>,
}

/// One further full rollout (a job of every worker renamed).
struct Rollout {
    took: Duration,
    /// Workers' ConfigMaps it wrote or created (none under `DeletePods`, whose workers share one).
    slices_written: usize,
    /// The RSS after it, after the idle time.
    rss_after: f64,
}

/// What an `:ack` cell measured besides.
struct AckMeasured {
    permit_seconds: Option<u64>,
    /// Worker pods in the idle phase.
    workers: usize,
    /// How long the idle phase took.
    idle_took: Duration,
    /// The load driver's requests in the idle phase as kube-sim's request log shows them.
    sim_idle: Option<Requests>,
    /// From the moment the last worker pod was Ready (its worker started) to all pools Balanced.
    balanced_after_running: Duration,
    /// How long before the pools were created the last worker pod was Ready.
    running_before_pools: Duration,
    /// Per scale sample: from the new pod Ready (its worker started) to its pool settled.
    scale_balanced_ms: Vec<f64>,
    /// Pods the operator deleted over the whole cell.
    pod_deletes: u64,
    workers_started: u64,
    /// ConfigMap watch bytes the API server sent (all watchers, the operator's too) and the
    /// workers' own ConfigMaps written, in the scale phase and in the full rollout.
    watch_bytes: Option<(f64, usize, f64, usize)>,
    /// The API server's requests and CPU in the idle phase (steady state: every worker
    /// reading, nothing changing), and over the whole cell, with their wall times; `None` on
    /// kube-sim.
    api_idle: Option<(apiserver::Window, Duration)>,
    api_cell: Option<(apiserver::Window, Duration)>,
    /// The load driver's requests per phase.
    first_rollout: Requests,
    idle: Requests,
    scale: Requests,
    full_rollout: Requests,
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
    let name = pool_name;
    let config_map = config_map_name;
    let rollouts: usize = std::env::var("SWARM_BENCH_ROLLOUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);

    // 0. The control plane's own pod churn, the yardstick of the first rollout.
    let creating = Instant::now();
    for i in 0..cell.pools {
        cluster
            .create_workers(&name(i), cell.workers, &config_map(i))
            .await;
    }
    cluster
        .wait_workers_ready(cell.pools * cell.workers, PHASE_LIMIT)
        .await;
    let pods_created = creating.elapsed();
    eprintln!(
        "  {} worker pods Ready in {:.1} s",
        cell.pools * cell.workers,
        pods_created.as_secs_f64()
    );
    // The workers start once their pods exist, spread over one read interval: creating 10,000
    // pods takes the control plane minutes on its own, which is not what a cell measures.
    let driver = if cell.ack {
        let permit = permit_seconds.map(Duration::from_secs);
        Some(LoadDriver::start(&cluster.kubeconfig, &cluster.namespace, permit).await)
    } else {
        None
    };
    if let Some(driver) = &driver {
        let expected = cell.pools * cell.workers;
        wait_for("a worker for every pod", PHASE_LIMIT, || async {
            (driver.running() == expected).then_some(())
        })
        .await;
        // Their starts are spread over a read interval: the operator starts after the last.
        if let Some(last) = driver.last_start() {
            tokio::time::sleep_until(last.into()).await;
        }
        eprintln!("  {expected} workers running in the load driver");
    }
    let driver_started = driver.as_ref().map(LoadDriver::requests);
    let api_started = apiserver::sample(&cluster.client, cluster.etcd_url.as_deref()).await;
    let began_cell = Instant::now();

    let kept_log = std::env::var_os("SWARM_BENCH_OPERATOR_LOG").map(PathBuf::from);
    let (log, level) = match kept_log {
        Some(path) => (path, "info"),
        None => (dir.path().join("operator.log"), "warn"),
    };
    let mut operator = OperatorProcess::spawn(&cluster.kubeconfig, &log, level);
    let ready_after = operator.wait_ready(&http).await;
    eprintln!("  operator ready after {:.1} s", ready_after.as_secs_f64());
    let started = operator.requests(&http).await;
    let cpu_start = operator.cpu_seconds();

    // 1. First rollout.
    let mut jobs: Vec<Vec<String>> = (0..cell.pools)
        .map(|p| {
            (0..cell.jobs)
                .map(|j| format!("stream:p{p:03}-cam{j:05}"))
                .collect()
        })
        .collect();
    let mut workers: HashMap<String, usize> =
        (0..cell.pools).map(|i| (name(i), cell.workers)).collect();
    let began = Instant::now();
    let began_pools = began;
    for (i, pool_jobs) in jobs.iter().enumerate() {
        cluster
            .apply_pool(&name(i), &name(i), &config_map(i), pool_jobs, cell.ack)
            .await;
    }
    let first_configs = tokio::spawn(first_configs_written(
        cluster.config_maps(),
        cell.pools,
        began_pools,
    ));
    wait_settled(&cluster, &workers, &jobs, "every pool to converge").await;
    let converge = began.elapsed();
    let first_configs = first_configs.await.expect("first config watch");
    let converged_at = Instant::now();
    let api_converged = apiserver::sample(&cluster.client, cluster.etcd_url.as_deref()).await;
    let sim_converged = sim_served(&cluster, cell.ack, &served::Mark::default()).await;
    let driver_converged = driver.as_ref().map(LoadDriver::requests);
    let last_running = driver.as_ref().and_then(LoadDriver::last_start);
    let cpu_first_rollout = operator.cpu_seconds() - cpu_start;
    let converged = operator.requests(&http).await;
    let rss_converged = operator.rss_mib();
    eprintln!("  converged in {:.1} s", converge.as_secs_f64());

    // 2. Idle.
    let idle_began = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let api_after_idle = apiserver::sample(&cluster.client, cluster.etcd_url.as_deref()).await;
    let idle_took = idle_began.elapsed();
    let sim_idle = match &sim_converged {
        Some((_, mark)) => sim_served(&cluster, true, mark).await.map(|(r, _)| r),
        None => None,
    };
    let after_idle = operator.requests(&http).await;
    let driver_after_idle = driver.as_ref().map(LoadDriver::requests);
    let rss_idle = operator.rss_mib();
    let mut rss_peak = operator.take_peak_mib();

    let client = &cluster.client;
    let slices_before_scale = worker_config_map_versions(&cluster.config_maps()).await;
    let bytes_before_scale = configmap_watch_bytes(client).await;
    // 3. Scale one pool at a time.
    let scale_samples = cell.pools.min(SCALE_SAMPLES);
    let mut scale_latency_ms = Vec::new();
    let mut scale_balanced_ms = Vec::new();
    for (i, pool_jobs) in jobs.iter().enumerate().take(scale_samples) {
        let before = cluster.config_version(&config_map(i)).await.unwrap_or(0);
        let replicas = cell.workers + 1;
        let t = Instant::now();
        cluster.scale(&name(i), replicas).await;
        // A GET every 2 ms: the latency is read to within a few milliseconds.
        let every = Duration::from_millis(2);
        poll(
            "the ConfigMap to change after a scale",
            PHASE_LIMIT,
            every,
            || {
                let cluster = &cluster;
                let cm = config_map(i);
                async move {
                    let version = cluster.config_version(&cm).await?;
                    (version > before).then_some(())
                }
            },
        )
        .await;
        scale_latency_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        workers.insert(name(i), replicas);
        let pool = name(i);
        let jobs_now = pool_jobs.len();
        wait_for("the scaled pool to settle", PHASE_LIMIT, || {
            let pools = cluster.pools();
            let pool = pool.clone();
            async move {
                let pool = pools.get(&pool).await.ok()?;
                settled(&pool, replicas, jobs_now).then_some(())
            }
        })
        .await;
        // The new pod is the StatefulSet's next ordinal.
        let new_pod = format!("{}-{}", name(i), cell.workers);
        if let Some(started) = driver.as_ref().and_then(|d| d.started_at(&new_pod)) {
            scale_balanced_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let after_scale = operator.requests(&http).await;
    let driver_after_scale = driver.as_ref().map(LoadDriver::requests);
    rss_peak = rss_peak.max(operator.take_peak_mib());

    let slices_after_scale = worker_config_map_versions(&cluster.config_maps()).await;
    let bytes_after_scale = configmap_watch_bytes(client).await;
    // 4. Full rollout: one more job per worker in every pool.
    let began = Instant::now();
    full_rollout_of(&cluster, &mut jobs, &workers, cell.ack, "new").await;
    let full_rollout = began.elapsed();
    let slices_after_rollout = worker_config_map_versions(&cluster.config_maps()).await;
    let bytes_after_rollout = configmap_watch_bytes(client).await;
    let watch_bytes = match (bytes_before_scale, bytes_after_scale, bytes_after_rollout) {
        (Some(a), Some(b), Some(c)) => Some((
            b - a,
            changed(&slices_before_scale, &slices_after_scale),
            c - b,
            changed(&slices_after_scale, &slices_after_rollout),
        )),
        _ => None,
    };
    let after_rollout = operator.requests(&http).await;
    let driver_after_rollout = driver.as_ref().map(LoadDriver::requests);
    let first_peak = operator.take_peak();
    let mut rss_peak_full_rollouts = vec![first_peak.rss_mib];
    let mut heap_at_full_rollout_peaks = vec![first_peak.heap];
    rss_peak = rss_peak.max(first_peak.rss_mib);
    // Measured after the same quiet time as the idle RSS, so the two compare like for like.
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let rss_after_rollout = operator.rss_mib();
    // More full rollouts (`SWARM_BENCH_ROLLOUTS`, 1 by default): whether memory stays flat.
    let mut more_rollouts = Vec::new();
    for round in 1..rollouts {
        // Read before the clock starts: which job each worker gives up.
        rename_one_job_per_worker(&cluster, &mut jobs, &workers, &format!("r{round}-")).await;
        let slices_before = worker_config_map_versions(&cluster.config_maps()).await;
        // The job count stays, and a pool whose jobs come from ConfigMaps keeps its generation:
        // settled means settled on a newer config version.
        let versions_before = pool_versions(&cluster).await;
        let began = Instant::now();
        apply_pools(&cluster, &jobs, cell.ack).await;
        wait_settled_past(
            &cluster,
            &workers,
            &jobs,
            &versions_before,
            "every pool to finish its rollout",
        )
        .await;
        let took = began.elapsed();
        let slices_after = worker_config_map_versions(&cluster.config_maps()).await;
        let peak = operator.take_peak();
        rss_peak_full_rollouts.push(peak.rss_mib);
        heap_at_full_rollout_peaks.push(peak.heap);
        rss_peak = rss_peak.max(peak.rss_mib);
        tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
        more_rollouts.push(Rollout {
            took,
            slices_written: changed(&slices_before, &slices_after),
            rss_after: operator.rss_mib(),
        });
    }

    let apiserver_at_end = apiserver::sample(&cluster.client, cluster.etcd_url.as_deref()).await;
    let ack = driver.map(|driver| {
        let last_running = last_running.expect("the load driver started every worker");
        let requests = |r: &Option<Requests>| r.clone().unwrap_or_default();
        let measured = AckMeasured {
            permit_seconds,
            workers: cell.pools * cell.workers,
            sim_idle,
            idle_took,
            balanced_after_running: converged_at - last_running,
            running_before_pools: began_pools.saturating_duration_since(last_running),
            scale_balanced_ms,
            pod_deletes: after_rollout.since(&started).of("delete", "pods"),
            workers_started: driver.starts(),
            watch_bytes,
            api_idle: match (&api_converged, &api_after_idle) {
                (Some(before), Some(after)) => Some((after.since(before), idle_took)),
                _ => None,
            },
            api_cell: match (&api_started, apiserver_at_end) {
                (Some(before), Some(after)) => Some((after.since(before), began_cell.elapsed())),
                _ => None,
            },
            first_rollout: requests(&driver_converged).since(&requests(&driver_started)),
            idle: requests(&driver_after_idle).since(&requests(&driver_converged)),
            scale: requests(&driver_after_scale).since(&requests(&driver_after_idle)),
            full_rollout: requests(&driver_after_rollout).since(&requests(&driver_after_scale)),
        };
        driver.stop();
        measured
    });
    let measured = Measured {
        plane: cluster.name(),
        cell,
        pods_created,
        first_configs,
        converge,
        rss_converged,
        rss_idle,
        rss_after_rollout,
        more_rollouts,
        rss_peak,
        rss_peak_full_rollouts,
        heap_at_full_rollout_peaks,
        most_sockets: operator.most_sockets(),
        cpu_first_rollout,
        first_rollout: converged.since(&started),
        idle: after_idle.since(&converged),
        idle_seconds,
        scale: after_scale.since(&after_idle),
        scale_samples,
        scale_latency_ms,
        full_rollout,
        full_rollout_requests: after_rollout.since(&after_scale),
        ack,
    };
    drop(operator);
    // Printed before the namespace goes: deleting thousands of pods may outlast the limit.
    print_detail(&measured);
    cluster.finish().await;
    measured
}

/// The load driver's requests that kube-sim served since `mark`, with a mark of now; `None`
/// unless the cell runs on kube-sim under `Acknowledge`.
async fn sim_served(
    cluster: &Cluster,
    ack: bool,
    mark: &served::Mark,
) -> Option<(Requests, served::Mark)> {
    let url = cluster.sim_url().filter(|_| ack)?;
    served::since(&url, driver::USER_AGENT, mark).await
}

/// How long after `began` every pool's ConfigMap shows its first config version, as a watch of
/// the pools' ConfigMaps (not the workers' own) delivers them: polling a hundred pools with GETs
/// would load the API server the operator is writing to.
async fn first_configs_written(
    config_maps: Api<ConfigMap>,
    pools: usize,
    began: Instant,
) -> Duration {
    let mut waiting: HashSet<String> = (0..pools).map(config_map_name).collect();
    let selector = format!("{POOL_LABEL},!{WORKER_LABEL}");
    let mut events = watcher(config_maps, watcher::Config::default().labels(&selector))
        .applied_objects()
        .boxed();
    while !waiting.is_empty() {
        let left = PHASE_LIMIT.saturating_sub(began.elapsed());
        let next = tokio::time::timeout(left, events.try_next()).await;
        let cm = next
            .expect("timed out waiting for every pool's first config")
            .expect("first config watch failed")
            .expect("first config watch ended");
        let version = cm
            .annotations()
            .get(VERSION_ANNOTATION)
            .and_then(|v| v.parse::<u64>().ok());
        if version.is_some_and(|v| v > 0) {
            waiting.remove(&cm.name_any());
        }
    }
    began.elapsed()
}

/// A full rollout: one more job per worker in every pool (named with `tag`), applied, until
/// every pool has settled on it.
async fn full_rollout_of(
    cluster: &Cluster,
    jobs: &mut [Vec<String>],
    workers: &HashMap<String, usize>,
    acknowledge: bool,
    tag: &str,
) {
    for (i, pool_jobs) in jobs.iter_mut().enumerate() {
        let extra = workers[&pool_name(i)];
        let base = pool_jobs.len();
        pool_jobs.extend((0..extra).map(|j| format!("stream:p{i:03}-{tag}{:05}", base + j)));
    }
    apply_pools(cluster, jobs, acknowledge).await;
    wait_settled(cluster, workers, jobs, "every pool to finish its rollout").await;
}

/// Applies every pool with its jobs.
async fn apply_pools(cluster: &Cluster, jobs: &[Vec<String>], acknowledge: bool) {
    for (i, pool_jobs) in jobs.iter().enumerate() {
        cluster
            .apply_pool(
                &pool_name(i),
                &pool_name(i),
                &config_map_name(i),
                pool_jobs,
                acknowledge,
            )
            .await;
    }
}

/// Renames, in place, the first job every worker of every pool holds now (named with `tag`):
/// a full rollout that keeps each pool's size. A balanced pool gives each renamed job back to
/// the worker that held it, so every worker's jobs change, by one.
async fn rename_one_job_per_worker(
    cluster: &Cluster,
    jobs: &mut [Vec<String>],
    workers: &HashMap<String, usize>,
    tag: &str,
) {
    for (i, pool_jobs) in jobs.iter_mut().enumerate() {
        let renamed = first_job_of_each_worker(&cluster.config_maps(), &pool_name(i)).await;
        assert_eq!(
            renamed.len(),
            workers[&pool_name(i)],
            "every worker of {} holds a job",
            pool_name(i)
        );
        let mut next = 0;
        for job in pool_jobs.iter_mut() {
            if renamed.contains(job) {
                *job = format!("stream:p{i:03}-{tag}{next:05}");
                next += 1;
            }
        }
    }
}

/// The first job of every worker of `pool` that holds one, from the `config.yml` of the pool's
/// ConfigMaps: the pool's own (one shared config) or each worker's (the per-worker layout).
async fn first_job_of_each_worker(config_maps: &Api<ConfigMap>, pool: &str) -> HashSet<String> {
    let listed = config_maps
        .list(&kube::api::ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await
        .unwrap_or_else(|e| panic!("list the ConfigMaps of {pool}: {e}"));
    let mut first = HashSet::new();
    for cm in &listed.items {
        let Some(text) = cm.data.as_ref().and_then(|d| d.get("config.yml")) else {
            continue;
        };
        let config = WorkerConfig::parse(text)
            .unwrap_or_else(|e| panic!("config.yml of {}: {e}", cm.name_any()));
        first.extend(
            config
                .workloads()
                .filter_map(|(_, workload)| workload.jobs.first().cloned()),
        );
    }
    first
}

/// The ConfigMap of pool `i`.
fn config_map_name(i: usize) -> String {
    format!("pool-{i:03}-config")
}

/// The name of pool `i` (and of its StatefulSet).
fn pool_name(i: usize) -> String {
    format!("pool-{i:03}")
}

async fn wait_settled(
    cluster: &Cluster,
    workers: &HashMap<String, usize>,
    jobs: &[Vec<String>],
    what: &str,
) {
    wait_settled_past(cluster, workers, jobs, &HashMap::new(), what).await;
}

/// The config version every pool's status reports now.
async fn pool_versions(cluster: &Cluster) -> HashMap<String, i64> {
    let list = cluster
        .pools()
        .list(&kube::api::ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("list the pools: {e}"));
    list.items
        .iter()
        .map(|pool| {
            let version = pool.status.as_ref().and_then(|s| s.version).unwrap_or(0);
            (pool.name_any(), version)
        })
        .collect()
}

/// Waits until every pool is settled on its workers and jobs, at a config version above the
/// one `past` holds for it (if any).
async fn wait_settled_past(
    cluster: &Cluster,
    workers: &HashMap<String, usize>,
    jobs: &[Vec<String>],
    past: &HashMap<String, i64>,
    what: &str,
) {
    // Each poll lists every pool with its status: for thousands of workers, ten a second would
    // load the very control plane being timed.
    let total: usize = workers.values().sum();
    let every = Duration::from_millis(if total >= 1000 { 1000 } else { 100 });
    poll(what, PHASE_LIMIT, every, || async {
        let list = cluster
            .pools()
            .list(&kube::api::ListParams::default())
            .await
            .ok()?;
        let all = list.items.len() == workers.len()
            && list.items.iter().all(|pool| {
                let expected = workers.get(&kube::ResourceExt::name_any(pool)).copied();
                let index =
                    (0..jobs.len()).find(|&i| pool_name(i) == kube::ResourceExt::name_any(pool));
                let newer = past.get(&pool.name_any()).is_none_or(|&before| {
                    pool.status
                        .as_ref()
                        .and_then(|s| s.version)
                        .is_some_and(|now| now > before)
                });
                newer
                    && expected
                        .zip(index)
                        .is_some_and(|(n, i)| settled(pool, n, jobs[i].len()))
            });
        all.then_some(())
    })
    .await;
}

/// The `q` quantile (0..=1) of `samples`, nearest rank.
fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn per_pool(n: u64, pools: usize) -> f64 {
    n as f64 / pools as f64
}

fn print_detail(m: &Measured) {
    let pools = m.cell.pools;
    println!("\n{} on {}", m.cell.label(), m.plane);
    println!(
        "  the control plane created the {} worker pods in {:.1} s; every pool's first config written {:.1} s after the pools were created",
        m.cell.pools * m.cell.workers,
        m.pods_created.as_secs_f64(),
        m.first_configs.as_secs_f64(),
    );
    println!(
        "  first rollout: {:.1} s ({:.2}x the pods' creation), operator CPU {:.1} s; requests: {}",
        m.converge.as_secs_f64(),
        m.converge.as_secs_f64() / m.pods_created.as_secs_f64().max(f64::EPSILON),
        m.cpu_first_rollout,
        m.first_rollout.describe()
    );
    println!(
        "  idle {} s: {} requests ({})",
        m.idle_seconds,
        m.idle.calls(),
        m.idle.describe()
    );
    println!(
        "  scale (+1 worker) x {}: latency ms {:?}; requests: {}",
        m.scale_samples,
        m.scale_latency_ms
            .iter()
            .map(|ms| ms.round() as u64)
            .collect::<Vec<_>>(),
        m.scale.describe()
    );
    println!(
        "  full rollout (a job more per worker): {:.1} s; writes per pool {:.1}; requests: {}",
        m.full_rollout.as_secs_f64(),
        per_pool(m.full_rollout_requests.writes(), pools),
        m.full_rollout_requests.describe()
    );
    println!(
        "  operator RSS MiB: converged {:.1}, after idle {:.1}, after full rollout {:.1}, peak {:.1}",
        m.rss_converged, m.rss_idle, m.rss_after_rollout, m.rss_peak
    );
    for (i, rollout) in m.more_rollouts.iter().enumerate() {
        println!(
            "  full rollout {} (a job of every worker renamed): {:.1} s; {} workers' ConfigMaps written; operator RSS after it {:.1} MiB",
            i + 2,
            rollout.took.as_secs_f64(),
            rollout.slices_written,
            rollout.rss_after,
        );
    }
    let peaks: Vec<String> = m
        .rss_peak_full_rollouts
        .iter()
        .map(|p| format!("{p:.1}"))
        .collect();
    println!(
        "  operator RSS peak MiB in each full rollout: {}",
        peaks.join(" / ")
    );
    let heaps: Vec<String> = m
        .heap_at_full_rollout_peaks
        .iter()
        .map(|heap| {
            heap.map_or_else(
                || "-".to_owned(),
                |h| format!("{:.1} / {:.1} / {:.1}", h.allocated, h.active, h.resident),
            )
        })
        .collect();
    println!(
        "  allocator at each of those peaks, allocated / active / resident MiB: {}",
        heaps.join("; ")
    );
    println!(
        "  operator sockets open at most: {} (a connection per request in flight, the watches and the /metrics scrapes)",
        m.most_sockets
    );
    if let Some(ack) = &m.ack {
        print_ack_detail(ack);
    }
}

fn print_ack_detail(ack: &AckMeasured) {
    println!(
        "  Acknowledge: Balanced {:.1} s after all worker pods were running (the last was Ready {:.1} s before the pools were created); scale, new pod Ready -> Balanced ms {:?}",
        ack.balanced_after_running.as_secs_f64(),
        ack.running_before_pools.as_secs_f64(),
        ack.scale_balanced_ms
            .iter()
            .map(|ms| ms.round() as u64)
            .collect::<Vec<_>>(),
    );
    println!(
        "  pods deleted by the operator: {}; load driver: {} workers started, permit {}",
        ack.pod_deletes,
        ack.workers_started,
        ack.permit_seconds.map_or(
            "the library's default (30 s, a read every 15 s)".to_owned(),
            |s| { format!("{s} s (SWARM_BENCH_PERMIT_SECONDS)") }
        ),
    );
    match ack.watch_bytes {
        Some((scale, scale_written, rollout, rollout_written)) => println!(
            "  ConfigMap watch bytes sent (API server metric, all watchers): scale {:.0} KiB for {scale_written} workers' ConfigMaps written ({:.1} KiB each); full rollout {:.0} KiB for {rollout_written} ({:.1} KiB each)",
            scale / 1024.0,
            scale / 1024.0 / scale_written.max(1) as f64,
            rollout / 1024.0,
            rollout / 1024.0 / rollout_written.max(1) as f64,
        ),
        None => println!("  ConfigMap watch bytes: the control plane serves no metrics"),
    }
    for (what, window) in [("idle", &ack.api_idle), ("whole cell", &ack.api_cell)] {
        if let Some((window, took)) = window {
            println!("  {}", window.describe(what, took.as_secs_f64()));
        }
    }
    print_at_rest(ack);
    for (phase, requests) in [
        ("first rollout", &ack.first_rollout),
        ("idle", &ack.idle),
        ("scale", &ack.scale),
        ("full rollout", &ack.full_rollout),
    ] {
        println!("  load driver requests, {phase}: {}", requests.describe());
    }
}

/// The workers' cost at rest: the idle phase's requests per worker and 10 s, by verb and
/// resource, as each source saw them, with the control plane's CPU over it.
fn print_at_rest(ack: &AckMeasured) {
    let seconds = ack.idle_took.as_secs_f64();
    let rate = |r: &Requests| per_worker_per_10s(r, ack.workers, seconds);
    println!(
        "  at rest, {:.0} s idle, {} workers; per worker per 10 s:",
        seconds, ack.workers
    );
    println!("    load driver's own count: {}", rate(&ack.idle));
    if let Some(served) = &ack.sim_idle {
        println!(
            "    kube-sim's request log (the driver's user agent): {}",
            rate(served)
        );
    }
    if let Some((window, took)) = &ack.api_idle {
        let cores = |cpu: f64| cpu / took.as_secs_f64().max(1e-9);
        println!(
            "    API server's apiserver_request_total (every client): {}",
            per_worker_per_10s(&window.requests, ack.workers, took.as_secs_f64())
        );
        println!(
            "    CPU over the idle phase: kube-apiserver {:.3} cores, etcd {}",
            cores(window.cpu_seconds),
            window
                .etcd_cpu_seconds
                .map_or("not read".to_owned(), |cpu| format!(
                    "{:.3} cores",
                    cores(cpu)
                )),
        );
    }
}

/// `verb resource: rate` of `requests` per worker per 10 s over `seconds`, watches apart
/// (they stay open), then the writes.
fn per_worker_per_10s(requests: &Requests, workers: usize, seconds: f64) -> String {
    let per = |n: u64| n as f64 / workers.max(1) as f64 / seconds.max(1e-9) * 10.0;
    let mut parts: Vec<String> = requests
        .0
        .iter()
        .map(|((verb, resource), n)| format!("{verb} {resource} {:.3} ({n})", per(*n)))
        .collect();
    if parts.is_empty() {
        parts.push("none".to_owned());
    }
    format!(
        "{}; writes {:.4} ({} in all)",
        parts.join(", "),
        per(requests.writes()),
        requests.writes()
    )
}

fn print_table(results: &[Measured]) {
    println!();
    println!(
        "| control plane | pools x workers x jobs | converge | operator RSS: idle / after full rollout / peak | CPU to converge | requests per pool (writes: ConfigMap, status, pod deletes, events) | writes per pool per scale | scale -> ConfigMap write p50 / p99 | idle requests |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in results {
        let pools = m.cell.pools;
        let r = &m.first_rollout;
        let writes_of = |resource: &str| {
            per_pool(
                r.of("patch", resource) + r.of("create", resource) + r.of("update", resource),
                pools,
            )
        };
        println!(
            "| {} | {} | {:.1} s | {:.1} / {:.1} / {:.1} MiB | {:.1} s | {:.1} ({:.1}, {:.1}, {:.1}, {:.1}) | {:.1} | {:.0} / {:.0} ms | {} in {} s |",
            m.plane,
            m.cell.label(),
            m.converge.as_secs_f64(),
            m.rss_idle,
            m.rss_after_rollout,
            m.rss_peak,
            m.cpu_first_rollout,
            per_pool(r.calls(), pools),
            writes_of("configmaps"),
            writes_of("swarmpools/status"),
            per_pool(r.of("delete", "pods"), pools),
            writes_of("events"),
            per_pool(m.scale.writes(), m.scale_samples),
            quantile(&m.scale_latency_ms, 0.5),
            quantile(&m.scale_latency_ms, 0.99),
            m.idle.calls(),
            m.idle_seconds,
        );
    }
}
