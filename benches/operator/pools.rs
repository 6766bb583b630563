//! The pools a cell asks for (each one's jobs and workers): how they are named and applied, how
//! their jobs change from one rollout to the next, and the waits until the operator has settled
//! them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, ResourceExt as _};
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::names::{POOL_LABEL, VERSION_ANNOTATION, WORKER_LABEL};

use crate::cluster::{Cluster, poll, settled};
use crate::{Cell, PHASE_LIMIT};

/// The pools of a cell as last applied.
pub struct Pools {
    /// The jobs of pool `i`.
    pub jobs: Vec<Vec<String>>,
    /// Each pool's workers (its StatefulSet's replicas), by pool name.
    pub workers: HashMap<String, usize>,
    /// Whether the pools are under `rollout.policy: Acknowledge`.
    acknowledge: bool,
}

impl Pools {
    /// The cell's pools before the first rollout: `cell.jobs` jobs and `cell.workers` workers
    /// each.
    pub fn new(cell: Cell) -> Pools {
        let jobs = (0..cell.pools)
            .map(|p| {
                (0..cell.jobs)
                    .map(|j| format!("stream:p{p:03}-cam{j:05}"))
                    .collect()
            })
            .collect();
        let workers = (0..cell.pools)
            .map(|i| (pool_name(i), cell.workers))
            .collect();
        Pools {
            jobs,
            workers,
            acknowledge: cell.ack,
        }
    }

    /// Applies every pool with its jobs.
    pub async fn apply(&self, cluster: &Cluster) {
        for (i, pool_jobs) in self.jobs.iter().enumerate() {
            cluster
                .apply_pool(
                    &pool_name(i),
                    &pool_name(i),
                    &config_map_name(i),
                    pool_jobs,
                    self.acknowledge,
                )
                .await;
        }
    }

    /// A full rollout: one more job per worker in every pool (named with `tag`), applied, until
    /// every pool has settled on it.
    pub async fn full_rollout(&mut self, cluster: &Cluster, tag: &str) {
        for (i, pool_jobs) in self.jobs.iter_mut().enumerate() {
            let extra = self.workers[&pool_name(i)];
            let base = pool_jobs.len();
            pool_jobs.extend((0..extra).map(|j| format!("stream:p{i:03}-{tag}{:05}", base + j)));
        }
        self.apply(cluster).await;
        self.wait_settled(cluster, "every pool to finish its rollout")
            .await;
    }

    /// Renames, in place, the first job every worker of every pool holds now (named with
    /// `tag`): a full rollout that keeps each pool's size. A balanced pool gives each renamed
    /// job back to the worker that held it, so every worker's jobs change, by one.
    pub async fn rename_one_job_per_worker(&mut self, cluster: &Cluster, tag: &str) {
        for (i, pool_jobs) in self.jobs.iter_mut().enumerate() {
            let renamed = first_job_of_each_worker(&cluster.config_maps(), &pool_name(i)).await;
            assert_eq!(
                renamed.len(),
                self.workers[&pool_name(i)],
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

    /// Waits until every pool is settled on its workers and jobs.
    pub async fn wait_settled(&self, cluster: &Cluster, what: &str) {
        self.wait_settled_past(cluster, &HashMap::new(), what).await;
    }

    /// Waits until every pool is settled on its workers and jobs, at a config version above the
    /// one `past` holds for it (if any).
    pub async fn wait_settled_past(
        &self,
        cluster: &Cluster,
        past: &HashMap<String, i64>,
        what: &str,
    ) {
        let (workers, jobs) = (&self.workers, &self.jobs);
        // Each poll lists every pool with its status: for thousands of workers, ten a second
        // would load the very control plane being timed.
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
                    let index = (0..jobs.len())
                        .find(|&i| pool_name(i) == kube::ResourceExt::name_any(pool));
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
}

/// The name of pool `i` (and of its StatefulSet).
pub fn pool_name(i: usize) -> String {
    format!("pool-{i:03}")
}

/// The ConfigMap of pool `i`.
pub fn config_map_name(i: usize) -> String {
    format!("pool-{i:03}-config")
}

/// The config version every pool's status reports now.
pub async fn pool_versions(cluster: &Cluster) -> HashMap<String, i64> {
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

/// How long after `began` every pool's ConfigMap shows its first config version, as a watch of
/// the pools' ConfigMaps (not the workers' own) delivers them: polling a hundred pools with GETs
/// would load the API server the operator is writing to.
pub async fn first_configs_written(
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
