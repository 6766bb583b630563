//! The phases of one cell, in the order `run_cell` runs them (see the top of `main.rs`), each
//! returning what it measured; then what the cell reports, made of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::apiserver::{self, Sample};
use crate::cluster::{
    Cluster, ControlPlane, changed, configmap_watch_bytes, poll, settled, wait_for,
    worker_config_map_versions,
};
use crate::driver::{self, LoadDriver};
use crate::pools::{Pools, config_map_name, first_configs_written, pool_name, pool_versions};
use crate::process::{OperatorProcess, Peak, Requests};
use crate::report::{AckMeasured, Measured, Rollout};
use crate::{Cell, PHASE_LIMIT, served};

/// Most pools scaled one by one in the scale phase.
const SCALE_SAMPLES: usize = 20;

/// Creates every pool's StatefulSet and waits for all their pods Ready: the control plane's own
/// pod churn, the yardstick of the first rollout.
pub async fn create_worker_pods(cluster: &Cluster, cell: Cell) -> Duration {
    let creating = Instant::now();
    for i in 0..cell.pools {
        cluster
            .create_workers(&pool_name(i), cell.workers, &config_map_name(i))
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
    pods_created
}

/// In an `:ack` cell, starts the load driver: a worker for each Ready pod, those Ready already
/// spread over one read interval, each later one as its pod turns Ready.
pub async fn start_load_driver(
    cluster: &Cluster,
    cell: Cell,
    permit_seconds: Option<u64>,
) -> Option<LoadDriver> {
    if !cell.ack {
        return None;
    }
    let permit = permit_seconds.map(Duration::from_secs);
    let real = matches!(cluster.plane, ControlPlane::Real);
    Some(LoadDriver::start(&cluster.kubeconfig, &cluster.namespace, permit, real).await)
}

/// Waits until the load driver runs a worker for every pod, and the last has started.
pub async fn wait_load_driver(driver: Option<&LoadDriver>, cell: Cell) {
    let Some(driver) = driver else {
        return;
    };
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

/// The counters read before the operator starts: where the whole cell's window begins.
pub struct Baseline {
    /// The load driver's requests (`:ack` cells).
    driver: Option<Requests>,
    /// The API server's metrics (`None` on kube-sim).
    api: Option<Sample>,
    at: Instant,
}

impl Baseline {
    /// Reads them now.
    pub async fn read(cluster: &Cluster, driver: Option<&LoadDriver>) -> Baseline {
        let driver = driver.map(LoadDriver::requests);
        let api = api_sample(cluster).await;
        Baseline {
            driver,
            api,
            at: Instant::now(),
        }
    }
}

/// Starts the operator and waits until it is ready. Its log goes to `SWARM_BENCH_OPERATOR_LOG`
/// at `info` if that is set, else to the scratch directory at `warn`.
pub async fn start_operator(
    cluster: &Cluster,
    scratch: &Path,
    http: &reqwest::Client,
) -> OperatorProcess {
    let kept_log = std::env::var_os("SWARM_BENCH_OPERATOR_LOG").map(PathBuf::from);
    let (log, level) = match kept_log {
        Some(path) => (path, "info"),
        None => (scratch.join("operator.log"), "warn"),
    };
    let mut operator = OperatorProcess::spawn(&cluster.kubeconfig, &log, level);
    let ready_after = operator.wait_ready(http).await;
    eprintln!("  operator ready after {:.1} s", ready_after.as_secs_f64());
    operator
}

/// What the phases from the operator's start on work with.
pub struct Bench<'a> {
    pub cell: Cell,
    pub cluster: &'a Cluster,
    /// Reads the operator's `/metrics`.
    pub http: reqwest::Client,
    pub operator: OperatorProcess,
    /// In an `:ack` cell, the load driver running its workers.
    pub driver: Option<LoadDriver>,
    /// The idle phase's length, and the quiet time before each RSS read after a full rollout.
    pub idle_seconds: u64,
}

/// The first rollout: every pool created, until all are settled.
pub struct FirstRollout {
    /// The operator's requests from its start to this phase's.
    requests_before: Requests,
    /// The operator's requests from its start to every pool converged.
    requests: Requests,
    /// When the pools were created.
    began: Instant,
    /// From creating the pools to every pool's first config version written.
    first_configs: Duration,
    converge: Duration,
    converged_at: Instant,
    cpu_seconds: f64,
    rss: f64,
    /// The API server's metrics, once converged.
    api: Option<Sample>,
    /// Where kube-sim's request log stood once converged (`:ack` cells on kube-sim).
    sim: Option<served::Mark>,
    /// The load driver's requests, once converged.
    driver: Option<Requests>,
    /// When the load driver started its last worker.
    last_running: Option<Instant>,
}

/// The idle phase: nothing changing for `idle_seconds`.
pub struct Idle {
    took: Duration,
    /// The API server's metrics at its end.
    api: Option<Sample>,
    /// The load driver's requests kube-sim served in it.
    sim: Option<Requests>,
    requests: Requests,
    driver: Option<Requests>,
    rss: f64,
    /// The most RSS seen from the operator's start to its end.
    rss_peak: f64,
}

/// The workers' ConfigMaps and the ConfigMap watch bytes the API server sent, read between
/// phases: what a phase's writes cost every watcher.
pub struct WatchMark {
    slices: HashMap<String, String>,
    /// `None` where the control plane serves no metrics.
    bytes: Option<f64>,
}

impl WatchMark {
    async fn read(cluster: &Cluster) -> WatchMark {
        WatchMark {
            slices: worker_config_map_versions(&cluster.config_maps()).await,
            bytes: configmap_watch_bytes(&cluster.client).await,
        }
    }
}

/// The scale phase: one pool at a time scaled up by one worker.
pub struct Scale {
    samples: usize,
    /// Per pool: from the scale to its ConfigMap's new version.
    latency_ms: Vec<f64>,
    /// Per pool, in an `:ack` cell: from the new pod's worker started to its pool settled.
    balanced_ms: Vec<f64>,
    watch_before: WatchMark,
    watch_after: WatchMark,
    requests: Requests,
    driver: Option<Requests>,
    /// The most RSS seen in it.
    rss_peak: f64,
}

/// One pool scaled up by one worker.
struct ScaledPool {
    /// From the scale to the pool's ConfigMap's new version.
    latency_ms: f64,
    /// From the new pod's worker started to the pool settled (`:ack` cells).
    balanced_ms: Option<f64>,
}

/// The first full rollout: a job more per worker in every pool.
pub struct FullRollout {
    took: Duration,
    watch_after: WatchMark,
    requests: Requests,
    driver: Option<Requests>,
    /// The most RSS seen in it, with the allocator's figures.
    peak: Peak,
    /// The RSS after it, after the idle time.
    rss_after: f64,
}

/// A further full rollout, a job of every worker renamed.
pub struct RenamingRollout {
    measured: Rollout,
    /// The most RSS seen in it, with the allocator's figures.
    peak: Peak,
}

/// Every phase's measurements of one cell.
pub struct Phases {
    pub pods_created: Duration,
    pub baseline: Baseline,
    pub first: FirstRollout,
    pub idle: Idle,
    pub scale: Scale,
    pub full: FullRollout,
    pub more: Vec<RenamingRollout>,
}

impl Bench<'_> {
    /// Creates every pool and waits until all have converged.
    pub async fn first_rollout(&self, pools: &Pools) -> FirstRollout {
        let requests_before = self.requests().await;
        let cpu_start = self.operator.cpu_seconds();
        let began = Instant::now();
        pools.apply(self.cluster).await;
        let first_configs = tokio::spawn(first_configs_written(
            self.cluster.config_maps(),
            self.cell.pools,
            began,
        ));
        pools
            .wait_settled(self.cluster, "every pool to converge")
            .await;
        let converge = began.elapsed();
        let first_configs = first_configs.await.expect("first config watch");
        let converged_at = Instant::now();
        let api = api_sample(self.cluster).await;
        let sim = sim_served(self.cluster, self.cell.ack, &served::Mark::default())
            .await
            .map(|(_, mark)| mark);
        let driver = self.driver_requests();
        let last_running = self.driver.as_ref().and_then(LoadDriver::last_start);
        let cpu_seconds = self.operator.cpu_seconds() - cpu_start;
        let requests = self.requests().await;
        let rss = self.operator.rss_mib();
        eprintln!("  converged in {:.1} s", converge.as_secs_f64());
        FirstRollout {
            requests_before,
            requests,
            began,
            first_configs,
            converge,
            converged_at,
            cpu_seconds,
            rss,
            api,
            sim,
            driver,
            last_running,
        }
    }

    /// Changes nothing for `idle_seconds`, then reads what the operator and the workers did.
    pub async fn idle(&self, first: &FirstRollout) -> Idle {
        let began = Instant::now();
        tokio::time::sleep(self.idle_time()).await;
        let api = api_sample(self.cluster).await;
        let took = began.elapsed();
        let sim = match &first.sim {
            Some(mark) => sim_served(self.cluster, true, mark).await.map(|(r, _)| r),
            None => None,
        };
        Idle {
            took,
            api,
            sim,
            requests: self.requests().await,
            driver: self.driver_requests(),
            rss: self.operator.rss_mib(),
            rss_peak: self.operator.take_peak_mib(),
        }
    }

    /// Scales one pool at a time (the first `SCALE_SAMPLES`) up by one worker.
    pub async fn scale_one_pool_at_a_time(&self, pools: &mut Pools) -> Scale {
        let watch_before = WatchMark::read(self.cluster).await;
        let samples = self.cell.pools.min(SCALE_SAMPLES);
        let mut latency_ms = Vec::new();
        let mut balanced_ms = Vec::new();
        for i in 0..samples {
            let scaled = self.scale_pool(pools, i).await;
            latency_ms.push(scaled.latency_ms);
            balanced_ms.extend(scaled.balanced_ms);
        }
        let requests = self.requests().await;
        let driver = self.driver_requests();
        let rss_peak = self.operator.take_peak_mib();
        Scale {
            samples,
            latency_ms,
            balanced_ms,
            watch_before,
            watch_after: WatchMark::read(self.cluster).await,
            requests,
            driver,
            rss_peak,
        }
    }

    /// Scales pool `i` up by one worker, until its ConfigMap's version changes and then until
    /// it has settled.
    async fn scale_pool(&self, pools: &mut Pools, i: usize) -> ScaledPool {
        let cluster = self.cluster;
        let before = cluster
            .config_version(&config_map_name(i))
            .await
            .unwrap_or(0);
        let replicas = self.cell.workers + 1;
        let t = Instant::now();
        cluster.scale(&pool_name(i), replicas).await;
        // A GET every 2 ms: the latency is read to within a few milliseconds.
        let every = Duration::from_millis(2);
        poll(
            "the ConfigMap to change after a scale",
            PHASE_LIMIT,
            every,
            || {
                let cm = config_map_name(i);
                async move {
                    let version = cluster.config_version(&cm).await?;
                    (version > before).then_some(())
                }
            },
        )
        .await;
        let latency_ms = t.elapsed().as_secs_f64() * 1000.0;
        pools.workers.insert(pool_name(i), replicas);
        let pool = pool_name(i);
        let jobs_now = pools.jobs[i].len();
        wait_for("the scaled pool to settle", PHASE_LIMIT, || {
            let api = cluster.pools();
            let pool = pool.clone();
            async move {
                let pool = api.get(&pool).await.ok()?;
                settled(&pool, replicas, jobs_now).then_some(())
            }
        })
        .await;
        // The new pod is the StatefulSet's next ordinal.
        let new_pod = format!("{}-{}", pool_name(i), self.cell.workers);
        let balanced_ms = self
            .driver
            .as_ref()
            .and_then(|d| d.started_at(&new_pod))
            .map(|started| started.elapsed().as_secs_f64() * 1000.0);
        ScaledPool {
            latency_ms,
            balanced_ms,
        }
    }

    /// Adds a job per worker to every pool (every worker restarts) until all have settled, then
    /// reads the RSS after the idle time.
    pub async fn full_rollout(&self, pools: &mut Pools) -> FullRollout {
        let began = Instant::now();
        pools.full_rollout(self.cluster, "new").await;
        let took = began.elapsed();
        let watch_after = WatchMark::read(self.cluster).await;
        let requests = self.requests().await;
        let driver = self.driver_requests();
        let peak = self.operator.take_peak();
        // Measured after the same quiet time as the idle RSS, so the two compare like for like.
        tokio::time::sleep(self.idle_time()).await;
        FullRollout {
            took,
            watch_after,
            requests,
            driver,
            peak,
            rss_after: self.operator.rss_mib(),
        }
    }

    /// The full rollouts after the first (`SWARM_BENCH_ROLLOUTS` in all, 1 by default): whether
    /// memory stays flat.
    pub async fn more_rollouts(&self, pools: &mut Pools) -> Vec<RenamingRollout> {
        let rollouts: usize = std::env::var("SWARM_BENCH_ROLLOUTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let mut more = Vec::new();
        for round in 1..rollouts {
            more.push(self.renaming_rollout(pools, round).await);
        }
        more
    }

    /// Renames one job of every worker until every pool has settled on a newer config version,
    /// then reads the RSS after the idle time.
    async fn renaming_rollout(&self, pools: &mut Pools, round: usize) -> RenamingRollout {
        let cluster = self.cluster;
        // Read before the clock starts: which job each worker gives up.
        pools
            .rename_one_job_per_worker(cluster, &format!("r{round}-"))
            .await;
        let slices_before = worker_config_map_versions(&cluster.config_maps()).await;
        // The job count stays, and a pool whose jobs come from ConfigMaps keeps its generation:
        // settled means settled on a newer config version.
        let versions_before = pool_versions(cluster).await;
        let began = Instant::now();
        pools.apply(cluster).await;
        pools
            .wait_settled_past(
                cluster,
                &versions_before,
                "every pool to finish its rollout",
            )
            .await;
        let took = began.elapsed();
        let slices_after = worker_config_map_versions(&cluster.config_maps()).await;
        let peak = self.operator.take_peak();
        tokio::time::sleep(self.idle_time()).await;
        RenamingRollout {
            measured: Rollout {
                took,
                slices_written: changed(&slices_before, &slices_after),
                rss_after: self.operator.rss_mib(),
            },
            peak,
        }
    }

    /// The API server's metrics now (`None` on kube-sim).
    pub async fn api_sample(&self) -> Option<Sample> {
        api_sample(self.cluster).await
    }

    /// What an `:ack` cell measured besides; stops the load `driver`.
    pub fn acknowledged(
        &self,
        driver: LoadDriver,
        phases: &Phases,
        api_at_end: Option<Sample>,
        permit_seconds: Option<u64>,
    ) -> AckMeasured {
        let Phases {
            baseline,
            first,
            idle,
            scale,
            full,
            ..
        } = phases;
        let last_running = first
            .last_running
            .expect("the load driver started every worker");
        let requests = |r: &Option<Requests>| r.clone().unwrap_or_default();
        let measured = AckMeasured {
            permit_seconds,
            workers: self.cell.pools * self.cell.workers,
            sim_idle: idle.sim.clone(),
            idle_took: idle.took,
            balanced_after_running: first.converged_at - last_running,
            running_before_pools: first.began.saturating_duration_since(last_running),
            scale_balanced_ms: scale.balanced_ms.clone(),
            pod_deletes: full
                .requests
                .since(&first.requests_before)
                .of("delete", "pods"),
            workers_started: driver.starts(),
            watch_bytes: watch_bytes(&scale.watch_before, &scale.watch_after, &full.watch_after),
            api_idle: api_window(first.api.as_ref(), idle.api.as_ref(), || idle.took),
            api_cell: api_window(baseline.api.as_ref(), api_at_end.as_ref(), || {
                baseline.at.elapsed()
            }),
            first_rollout: requests(&first.driver).since(&requests(&baseline.driver)),
            idle: requests(&idle.driver).since(&requests(&first.driver)),
            scale: requests(&scale.driver).since(&requests(&idle.driver)),
            full_rollout: requests(&full.driver).since(&requests(&scale.driver)),
        };
        driver.stop();
        measured
    }

    /// What the cell measured, with `ack`'s measurements.
    pub fn measured(&self, phases: Phases, ack: Option<AckMeasured>) -> Measured {
        let Phases {
            pods_created,
            first,
            idle,
            scale,
            full,
            more,
            ..
        } = phases;
        let rss_peak = more.iter().map(|r| r.peak.rss_mib).fold(
            idle.rss_peak.max(scale.rss_peak).max(full.peak.rss_mib),
            f64::max,
        );
        let peaks: Vec<Peak> = std::iter::once(full.peak)
            .chain(more.iter().map(|r| r.peak))
            .collect();
        Measured {
            plane: self.cluster.name(),
            cell: self.cell,
            pods_created,
            first_configs: first.first_configs,
            converge: first.converge,
            rss_converged: first.rss,
            rss_idle: idle.rss,
            rss_after_rollout: full.rss_after,
            rss_peak,
            rss_peak_full_rollouts: peaks.iter().map(|p| p.rss_mib).collect(),
            heap_at_full_rollout_peaks: peaks.iter().map(|p| p.heap).collect(),
            most_sockets: self.operator.most_sockets(),
            cpu_first_rollout: first.cpu_seconds,
            first_rollout: first.requests.since(&first.requests_before),
            idle: idle.requests.since(&first.requests),
            idle_seconds: self.idle_seconds,
            scale: scale.requests.since(&idle.requests),
            scale_samples: scale.samples,
            scale_latency_ms: scale.latency_ms,
            full_rollout: full.took,
            more_rollouts: more.into_iter().map(|r| r.measured).collect(),
            full_rollout_requests: full.requests.since(&scale.requests),
            ack,
        }
    }

    async fn requests(&self) -> Requests {
        self.operator.requests(&self.http).await
    }

    fn driver_requests(&self) -> Option<Requests> {
        self.driver.as_ref().map(LoadDriver::requests)
    }

    fn idle_time(&self) -> Duration {
        Duration::from_secs(self.idle_seconds)
    }
}

async fn api_sample(cluster: &Cluster) -> Option<Sample> {
    apiserver::sample(&cluster.client, cluster.etcd_url.as_deref()).await
}

/// What the API server did from `before` to `after`, with the wall time `took` gives; `None`
/// unless both were read.
fn api_window(
    before: Option<&Sample>,
    after: Option<&Sample>,
    took: impl FnOnce() -> Duration,
) -> Option<(apiserver::Window, Duration)> {
    Some((after?.since(before?), took()))
}

/// The ConfigMap watch bytes sent and the workers' ConfigMaps written in the scale phase
/// (`before` to `between`) and in the full rollout (`between` to `after`); `None` where the
/// control plane serves no metrics.
fn watch_bytes(
    before: &WatchMark,
    between: &WatchMark,
    after: &WatchMark,
) -> Option<(f64, usize, f64, usize)> {
    let (a, b, c) = (before.bytes?, between.bytes?, after.bytes?);
    Some((
        b - a,
        changed(&before.slices, &between.slices),
        c - b,
        changed(&between.slices, &after.slices),
    ))
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
