//! The guarantees checked while the soak runs and once it has settled: no job on two live
//! workers (a duplicate watch per pool), the status never claiming Balanced over a pod long
//! gone, how long the pools take to settle after each fault, and at the end every job held
//! exactly once with the status agreeing with the ConfigMap and the pods.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use crate::Soak;
use crate::harness::duplicates::{DuplicateWatch, HandoffStats};
use crate::harness::worker_config::WorkerConfig;
use crate::history::config_version;
use crate::pools::{NAMESPACE, PoolDef, Workload};

/// How long (outside faults) a pod may be gone while config.yml still gives it jobs and the
/// status says Balanced.
const GONE_LIMIT: f64 = 15.0;

/// One pool the soak created, and its duplicate watch while it exists.
pub struct PoolEntry {
    pub def: PoolDef,
    pub transient: bool,
    pub live: bool,
    watch: Option<DuplicateWatch>,
    /// The watch's last stats, kept once the pool is deleted.
    stats: Option<HandoffStats>,
}

impl PoolEntry {
    /// The pool `def`, with a duplicate watch started on it.
    pub fn watch(soak: &Soak, def: PoolDef, transient: bool) -> PoolEntry {
        let client = soak.cluster.client.clone();
        let watch = match def.workload {
            Workload::StatefulSet => DuplicateWatch::start(
                soak.inspector.clone(),
                client,
                NAMESPACE.into(),
                def.name.clone(),
            ),
            // Its workers wait for their entry and read the file as the kubelet refreshes it.
            Workload::Deployment => DuplicateWatch::start_for_waiting_workers(
                soak.mounts.clone(),
                client,
                NAMESPACE.into(),
                def.name.clone(),
            ),
        };
        PoolEntry {
            def,
            transient,
            live: true,
            watch: Some(watch),
            stats: None,
        }
    }

    /// What its duplicate watch has seen (kept once the pool is deleted).
    pub fn stats(&self) -> HandoffStats {
        self.watch
            .as_ref()
            .map(DuplicateWatch::stats)
            .or_else(|| self.stats.clone())
            .unwrap_or_default()
    }
}

/// Every pool of the soak, standing ones first (the plan's pool indexes).
#[derive(Default)]
pub struct Pools(Mutex<Vec<PoolEntry>>);

impl Pools {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PoolEntry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a pool the soak created.
    pub fn add(&self, entry: PoolEntry) {
        self.lock().push(entry);
    }

    /// The `index`th pool (the plan's pool indexes are the standing pools').
    pub fn def(&self, index: usize) -> PoolDef {
        self.lock()[index].def.clone()
    }

    /// The transient pool that exists now, if any.
    pub fn live_transient(&self) -> Option<PoolDef> {
        self.lock()
            .iter()
            .find(|e| e.transient && e.live)
            .map(|e| e.def.clone())
    }

    /// The pool is deleted: its watch stops, its stats stay.
    pub fn retire(&self, name: &str) {
        for entry in self.lock().iter_mut().filter(|e| e.def.name == name) {
            entry.stats = Some(entry.stats());
            entry.watch = None;
            entry.live = false;
        }
    }

    /// Every pool ever created, by name.
    pub fn defs(&self) -> BTreeMap<String, PoolDef> {
        self.lock()
            .iter()
            .map(|e| (e.def.name.clone(), e.def.clone()))
            .collect()
    }

    /// Each pool's duplicate-watch stats, in creation order.
    pub fn stats(&self) -> Vec<(String, HandoffStats)> {
        self.lock()
            .iter()
            .map(|e| (e.def.name.clone(), e.stats()))
            .collect()
    }

    /// Records a violation for each pool whose watch saw a job on two live pods.
    fn check_duplicates(&self, soak: &Soak, at: f64) {
        for entry in self.lock().iter() {
            if let Some(failure) = entry.watch.as_ref().and_then(DuplicateWatch::failure) {
                soak.violations.add(
                    &format!("duplicate-{}", entry.def.name),
                    at,
                    format!("pool {}: {failure}", entry.def.name),
                );
            }
        }
    }
}

/// One read of the namespace: pools, pods, ConfigMaps.
pub struct Snapshot {
    pub pools: Vec<Value>,
    pub pods: Vec<Pod>,
    pub config_maps: BTreeMap<String, ConfigMap>,
}

impl Snapshot {
    /// Lists the namespace's pools (those not being deleted), pods and ConfigMaps.
    pub async fn read(client: &kube::Client) -> Result<Snapshot, String> {
        let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
        let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        let lp = ListParams::default();
        let (pools, pods, config_maps) =
            tokio::try_join!(pools.list(&lp), pods.list(&lp), config_maps.list(&lp))
                .map_err(|e| format!("read the namespace: {e}"))?;
        Ok(Snapshot {
            pools: pools
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| serde_json::to_value(p).unwrap_or_default())
                .collect(),
            pods: pods.items,
            config_maps: config_maps
                .items
                .into_iter()
                .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), cm))
                .collect(),
        })
    }

    fn config_map_of(&self, pool: &Value) -> Option<&ConfigMap> {
        self.config_maps.get(&config_map_name(pool))
    }

    /// Why `pool` is not settled (phase Balanced on its current spec and config version).
    pub fn settled(&self, pool: &Value) -> Result<(), String> {
        let name = pool_name(pool);
        let phase = pool.pointer("/status/phase").and_then(Value::as_str);
        if phase != Some("Balanced") {
            let message = pool.pointer("/status/message").and_then(Value::as_str);
            return Err(format!("{name}: phase {phase:?} ({message:?})"));
        }
        let generation = pool.pointer("/metadata/generation").and_then(Value::as_u64);
        let observed = pool
            .pointer("/status/observedGeneration")
            .and_then(Value::as_u64);
        if generation != observed {
            return Err(format!(
                "{name}: observedGeneration {observed:?} of {generation:?}"
            ));
        }
        let version = self.config_map_of(pool).and_then(config_version);
        let status_version = pool.pointer("/status/version").and_then(Value::as_u64);
        if version != status_version {
            return Err(format!(
                "{name}: status.version {status_version:?}, ConfigMap version {version:?}"
            ));
        }
        Ok(())
    }

    /// The live worker pods of `pool` (its workload's `app` label; not terminating, not
    /// finished).
    pub fn live_pods(&self, pool: &Value) -> Vec<&Pod> {
        let app = pool
            .pointer("/spec/selector/matchLabels/app")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.pods
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .map(String::as_str)
                    == Some(app)
            })
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !finished(p))
            .collect()
    }
}

fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

/// `metadata.name` of a pool.
pub fn pool_name(pool: &Value) -> String {
    pool.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn config_map_name(pool: &Value) -> String {
    pool.pointer("/spec/configMap")
        .and_then(Value::as_str)
        .map_or_else(|| format!("{}-config", pool_name(pool)), str::to_owned)
}

fn spec_jobs(pool: &Value) -> Vec<String> {
    pool.pointer("/spec/jobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|j| j.as_str().map(str::to_owned))
        .collect()
}

/// Samples the namespace every second until the soak ends: duplicates, the Balanced claim
/// over gone pods, and the moments every pool is settled.
pub async fn watch_status(soak: &Soak) {
    // (pool, pod) -> seconds (outside faults) it has been gone while listed with jobs.
    let mut gone: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut last = soak.clock.now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = soak.clock.now();
        soak.pools.check_duplicates(soak, now);
        let Ok(snapshot) = Snapshot::read(&soak.cluster.client).await else {
            continue;
        };
        crate::repair::check(soak, &snapshot.pods).await;
        let now = soak.clock.now();
        let dt = if soak.faults.active() {
            0.0
        } else {
            (now - last).min(2.0)
        };
        last = now;
        if snapshot.pools.iter().all(|p| snapshot.settled(p).is_ok()) {
            soak.faults.all_settled(now);
        }
        let present: BTreeMap<&str, &Pod> = snapshot
            .pods
            .iter()
            .filter(|p| !finished(p))
            .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
            .collect();
        let mut still_gone = BTreeMap::new();
        for pool in &snapshot.pools {
            let name = pool_name(pool);
            let Some(config) = snapshot
                .config_map_of(pool)
                .and_then(|cm| cm.data.as_ref()?.get("config.yml").cloned())
                .and_then(|text| WorkerConfig::parse(&text).ok())
            else {
                continue;
            };
            let balanced =
                pool.pointer("/status/phase").and_then(Value::as_str) == Some("Balanced");
            for (pod, workload) in &config.workloads {
                if workload.jobs.is_empty() || present.contains_key(pod.as_str()) {
                    continue;
                }
                let key = (name.clone(), pod.clone());
                let seconds = gone.get(&key).copied().unwrap_or(0.0) + dt;
                if balanced && seconds > GONE_LIMIT {
                    soak.violations.add(
                        &format!("gone-{name}-{pod}"),
                        now,
                        format!(
                            "pool {name}: status Balanced while config.yml (version {}) gives {} jobs to pod {pod}, gone for {seconds:.0} s outside faults",
                            config.version,
                            workload.jobs.len()
                        ),
                    );
                }
                still_gone.insert(key, seconds);
            }
        }
        gone = still_gone;
    }
}

/// Job -> the live pod instances that run it, for the pool of `kind` whose ConfigMap is
/// `config_map` (derived from the API's history, as the duplicate watches see it).
async fn holders(
    soak: &Soak,
    kind: Workload,
    config_map: &str,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    match kind {
        Workload::StatefulSet => {
            for pod in soak.inspector.try_mounts().await? {
                let Some(mounted) = pod.config_maps.get(config_map) else {
                    continue;
                };
                let config = mounted
                    .data
                    .get("config.yml")
                    .and_then(|t| WorkerConfig::parse(t).ok());
                let jobs = config
                    .as_ref()
                    .and_then(|c| c.workload(&pod.pod))
                    .map(|w| w.jobs.clone())
                    .unwrap_or_default();
                for job in jobs {
                    held.entry(job).or_default().push(pod.pod.clone());
                }
            }
        }
        Workload::Deployment => {
            for instance in soak.mounts.ever_listed(config_map) {
                for job in instance.jobs {
                    held.entry(job).or_default().push(instance.pod.clone());
                }
            }
        }
    }
    Ok(held)
}

/// The end state of one pool once everything settled.
#[derive(Clone, Debug, Default)]
pub struct FinalPool {
    pub name: String,
    pub jobs: usize,
    pub unheld: usize,
    pub held_twice: usize,
}

/// Why the pools are not settled for good yet: each Balanced on its current config, the
/// status agreeing with the ConfigMap and the pods, and every job held exactly once.
pub async fn final_state(soak: &Soak) -> Result<Vec<FinalPool>, String> {
    let snapshot = Snapshot::read(&soak.cluster.client).await?;
    let mut problems = Vec::new();
    let mut finals = Vec::new();
    for pool in &snapshot.pools {
        let name = pool_name(pool);
        if let Err(e) = snapshot.settled(pool) {
            problems.push(e);
            continue;
        }
        let live = snapshot.live_pods(pool).len() as u64;
        let workers = pool.pointer("/status/workers").and_then(Value::as_u64);
        if workers != Some(live) {
            problems.push(format!(
                "{name}: status.workers {workers:?}, {live} live pods"
            ));
        }
        for field in ["unassignedJobs", "jobsInTransit"] {
            let n = pool
                .pointer(&format!("/status/{field}"))
                .and_then(Value::as_u64);
            if n.unwrap_or(0) != 0 {
                problems.push(format!("{name}: status.{field} {n:?}"));
            }
        }
        let kind = match pool.pointer("/spec/workloadKind").and_then(Value::as_str) {
            Some("Deployment") => Workload::Deployment,
            _ => Workload::StatefulSet,
        };
        let held = holders(soak, kind, &config_map_name(pool)).await?;
        let jobs = spec_jobs(pool);
        let count = |job: &String| held.get(job).map_or(0, Vec::len);
        let unheld: Vec<&String> = jobs.iter().filter(|j| count(j) == 0).collect();
        let twice: Vec<&String> = jobs.iter().filter(|j| count(j) > 1).collect();
        if !unheld.is_empty() || !twice.is_empty() {
            problems.push(format!(
                "{name}: {} jobs unheld ({unheld:?}), {} on several pods ({:?})",
                unheld.len(),
                twice.len(),
                twice.iter().map(|j| (j, &held[*j])).collect::<Vec<_>>()
            ));
        }
        finals.push(FinalPool {
            name,
            jobs: jobs.len(),
            unheld: unheld.len(),
            held_twice: twice.len(),
        });
    }
    if problems.is_empty() {
        Ok(finals)
    } else {
        Err(problems.join("; "))
    }
}

/// The pools' end state from the last look, settled or not (for the report).
pub async fn final_counts(soak: &Soak) -> Vec<FinalPool> {
    let Ok(snapshot) = Snapshot::read(&soak.cluster.client).await else {
        return Vec::new();
    };
    let mut finals = Vec::new();
    for pool in &snapshot.pools {
        let kind = match pool.pointer("/spec/workloadKind").and_then(Value::as_str) {
            Some("Deployment") => Workload::Deployment,
            _ => Workload::StatefulSet,
        };
        let held = holders(soak, kind, &config_map_name(pool))
            .await
            .unwrap_or_default();
        let jobs = spec_jobs(pool);
        let count = |job: &String| held.get(job).map_or(0, Vec::len);
        finals.push(FinalPool {
            name: pool_name(pool),
            jobs: jobs.len(),
            unheld: jobs.iter().filter(|j| count(j) == 0).count(),
            held_twice: jobs.iter().filter(|j| count(j) > 1).count(),
        });
    }
    finals
}
