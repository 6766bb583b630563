//! What the assertions look at: one consistent-enough read of the pool, its ConfigMap and its
//! worker pods, the states scenarios wait for, and the invariants every settled pool keeps.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::Value;

use super::Env;
use super::manifests::jobs_of;
use super::poll::eventually;
use super::sim_inspect::RequestRecord;
use super::worker_config::WorkerConfig;

/// The ConfigMap key the workers read.
pub const CONFIG_KEY: &str = "config.yml";

/// One worker pod instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    /// Pod name `<sts>-<ordinal>`.
    pub name: String,
    /// The instance.
    pub uid: String,
    /// Condition Ready is True.
    pub ready: bool,
    /// deletionTimestamp is set.
    pub terminating: bool,
}

/// A read of everything one pool's user looks at.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The SwarmPool as served.
    pub pool: Value,
    /// Its ConfigMap, if it exists.
    pub config_map: Option<ConfigMap>,
    /// `config.yml` of that ConfigMap, parsed.
    pub config: Option<WorkerConfig>,
    /// Pods controlled by the example StatefulSet, by name.
    pub pods: BTreeMap<String, PodState>,
}

impl Observed {
    /// `status.phase` ("" when unset).
    pub fn phase(&self) -> &str {
        self.status_str("phase").unwrap_or("")
    }

    /// A string field of the status.
    pub fn status_str(&self, field: &str) -> Option<&str> {
        self.pool.pointer(&format!("/status/{field}"))?.as_str()
    }

    /// An integer field of the status.
    pub fn status_u64(&self, field: &str) -> Option<u64> {
        self.pool.pointer(&format!("/status/{field}"))?.as_u64()
    }

    /// `status.staleWorkers` (empty when unset).
    pub fn stale_workers(&self) -> Vec<String> {
        self.pool
            .pointer("/status/staleWorkers")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Value> {
        self.pool
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
    }

    /// The parsed `config.yml`; fails the test when there is none.
    pub fn config(&self) -> &WorkerConfig {
        self.config
            .as_ref()
            .expect("the pool's ConfigMap with a config.yml")
    }

    /// Pod uids by name.
    pub fn uids(&self) -> BTreeMap<String, String> {
        self.pods
            .iter()
            .map(|(name, pod)| (name.clone(), pod.uid.clone()))
            .collect()
    }

    /// The ConfigMap's resourceVersion ("" when it does not exist).
    pub fn config_map_resource_version(&self) -> String {
        self.config_map
            .as_ref()
            .and_then(|cm| cm.metadata.resource_version.clone())
            .unwrap_or_default()
    }

    /// The pool's resourceVersion.
    pub fn pool_resource_version(&self) -> String {
        self.pool["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The jobs in the pool's spec.
    pub fn spec_jobs(&self) -> Vec<String> {
        jobs_of(&self.pool)
    }
}

/// Reads the example pool, its ConfigMap and the example StatefulSet's pods. `Err` explains
/// what is missing, so it can drive [`eventually`].
pub async fn observe(env: &Env) -> Result<Observed, String> {
    let pool = env.pool().await.ok_or("the SwarmPool does not exist")?;
    let config_map_name = pool
        .pointer("/spec/configMap")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| env.example.config_map_name());
    let config_map = env.config_map(&config_map_name).await;
    let pool_name = pool["metadata"]["name"].as_str().unwrap_or_default();
    let config = env
        .pool_config(pool_name, &config_map_name, config_map.as_ref())
        .await?;
    let pods = worker_pods(&env.pods().await, &env.example.statefulset_name());
    Ok(Observed {
        pool,
        config_map,
        config,
        pods,
    })
}

/// `config.yml` of a ConfigMap, if present.
pub fn config_text(cm: &ConfigMap) -> Option<String> {
    cm.data.as_ref()?.get(CONFIG_KEY).cloned()
}

/// The pods a StatefulSet named `statefulset` controls, by name.
pub fn worker_pods(pods: &[Pod], statefulset: &str) -> BTreeMap<String, PodState> {
    pods.iter()
        .filter(|pod| {
            pod.metadata.owner_references.iter().flatten().any(|o| {
                o.controller == Some(true) && o.kind == "StatefulSet" && o.name == statefulset
            })
        })
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let state = PodState {
                name: name.clone(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                ready,
                terminating: pod.metadata.deletion_timestamp.is_some(),
            };
            (name, state)
        })
        .collect()
}

/// Polls until `check` accepts an observation, and returns that observation.
pub async fn wait_for<F>(env: &Env, what: &str, check: F) -> Observed
where
    F: Fn(&Observed) -> Result<(), String>,
{
    let check = &check;
    eventually(what, move || async move {
        let observed = observe(env).await?;
        check(&observed).map_err(|why| format!("{why} (phase {:?})", observed.phase()))?;
        Ok(observed)
    })
    .await
}

/// Waits until the pool is Balanced over `replicas` workers: status current, no stale
/// worker, the ConfigMap naming exactly the ordinals `0..replicas`, and exactly those pods,
/// all Ready and none terminating.
pub async fn wait_balanced(env: &Env, replicas: usize) -> Observed {
    wait_for(
        env,
        &format!("phase Balanced with {replicas} workers"),
        |o| balanced(o, replicas, &env.example.statefulset_name()),
    )
    .await
}

/// The predicate of [`wait_balanced`].
pub fn balanced(o: &Observed, replicas: usize, statefulset: &str) -> Result<(), String> {
    if o.phase() != "Balanced" {
        return Err("not Balanced".into());
    }
    status_current(o)?;
    if o.status_u64("workers") != Some(replicas as u64) {
        return Err(format!("status.workers {:?}", o.status_u64("workers")));
    }
    if !o.stale_workers().is_empty() {
        return Err(format!("stale workers {:?}", o.stale_workers()));
    }
    let config = o.config.as_ref().ok_or("no ConfigMap yet")?;
    let ordinals: Vec<String> = (0..replicas)
        .map(|i| format!("{statefulset}-{i}"))
        .collect();
    if config.pods() != ordinals {
        return Err(format!("ConfigMap names workers {:?}", config.pods()));
    }
    status_of_config(o)?;
    pods_settled(o, &ordinals)
}

/// The status describes the current spec (`observedGeneration == generation`).
pub fn status_current(o: &Observed) -> Result<(), String> {
    let generation = o
        .pool
        .pointer("/metadata/generation")
        .and_then(Value::as_u64);
    let observed = o.status_u64("observedGeneration");
    if generation.is_none() || observed != generation {
        return Err(format!(
            "observedGeneration {observed:?}, generation {generation:?}"
        ));
    }
    Ok(())
}

/// The status describes the ConfigMap observed with it (`status.version` is its version).
/// [`observe`] reads the pool before the ConfigMap, and the operator writes the status after
/// the ConfigMap: without this a check may pair a new config with the status of the old one.
pub fn status_of_config(o: &Observed) -> Result<(), String> {
    let written = o.config.as_ref().ok_or("no ConfigMap yet")?.version;
    match o.status_u64("version") {
        Some(version) if version == written => Ok(()),
        version => Err(format!(
            "the status describes config version {version:?}, the ConfigMap holds {written}"
        )),
    }
}

/// Exactly the pods `names` exist, all Ready, none terminating.
pub fn pods_settled(o: &Observed, names: &[String]) -> Result<(), String> {
    let present: Vec<&String> = o.pods.keys().collect();
    if present.iter().copied().ne(names.iter()) {
        return Err(format!("pods {present:?}, expected {names:?}"));
    }
    match o.pods.values().find(|p| !p.ready || p.terminating) {
        Some(p) => Err(format!("pod {} not settled: {p:?}", p.name)),
        None => Ok(()),
    }
}

/// Asserts everything a settled, Balanced pool promises its users: the assignment (every job
/// exactly once, balanced), the ConfigMap's ownership and metadata, a status that matches,
/// Ready=True, and on the simulation that every live worker mounted exactly its current jobs.
pub async fn assert_invariants(env: &Env, o: &Observed) {
    let statefulset = env.example.statefulset_name();
    let pool_name = env.example.pool_name();
    let replicas = o.status_u64("workers").expect("status.workers") as usize;
    let config = o.config();
    let jobs = o.spec_jobs();

    if let Err(e) = config.check_exactly_once(&statefulset, replicas, &jobs) {
        panic!("assignment broken: {e}\n{config:#?}");
    }
    let strategy = o
        .pool
        .pointer("/spec/strategy")
        .and_then(Value::as_str)
        .unwrap_or("Sticky");
    if let (true, Err(e)) = (strategy != "Consistent", config.check_balanced()) {
        panic!("{strategy} assignment not balanced: {e}");
    }
    for (pod, workload) in &config.workloads {
        assert!(
            workload.version <= config.version && workload.version >= 1,
            "{pod} has version {} outside 1..={}",
            workload.version,
            config.version
        );
    }

    assert_config_map_metadata(o, &pool_name);

    let status = |f: &str| o.status_u64(f);
    assert_eq!(
        o.status_str("statefulSet"),
        Some(statefulset.as_str()),
        "status.statefulSet"
    );
    assert_eq!(
        status("readyWorkers"),
        Some(replicas as u64),
        "status.readyWorkers"
    );
    assert_eq!(
        o.status_str("ready"),
        Some(format!("{replicas}/{replicas}").as_str()),
        "status.ready"
    );
    assert_eq!(status("jobs"), Some(jobs.len() as u64), "status.jobs");
    assert_eq!(status("unassignedJobs"), Some(0), "status.unassignedJobs");
    assert_eq!(status("version"), Some(config.version), "status.version");
    assert_condition(o, "Ready", "True");
    assert_ne!(
        o.condition("Degraded").map(|c| c["status"].clone()),
        Some(Value::from("True")),
        "a Balanced pool reports Degraded=True"
    );

    // Workers that acknowledge read their entry through the API, not the mounted file; their
    // scenarios check the Leases and what the worker processes report instead. Workers in real
    // containers report what they run, which their scenarios check: a real kubelet refreshes
    // the file, which the API's history cannot show.
    let acknowledging = o
        .pool
        .pointer("/spec/rollout/policy")
        .and_then(Value::as_str)
        == Some("Acknowledge");
    if !acknowledging && !env.reads_container_reports() {
        assert_mounted_current_jobs(env, o).await;
    }
}

/// Asserts that the ConfigMap is the operator's: labels, version annotation, and a single
/// controller reference to the pool.
pub fn assert_config_map_metadata(o: &Observed, pool_name: &str) {
    let cm = o.config_map.as_ref().expect("the pool's ConfigMap");
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("swarm-operator"),
        "ConfigMap label app.kubernetes.io/managed-by: {labels:?}"
    );
    assert_eq!(
        labels.get("swarm.io/pool").map(String::as_str),
        Some(pool_name),
        "ConfigMap label swarm.io/pool: {labels:?}"
    );
    let annotations = cm.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("swarm.io/version").cloned(),
        Some(o.config().version.to_string()),
        "ConfigMap annotation swarm.io/version must equal config.yml's version"
    );
    let owners: Vec<_> = cm
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.controller == Some(true))
        .collect();
    assert_eq!(owners.len(), 1, "ConfigMap controllers: {owners:?}");
    let owner = owners[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("SwarmPool", pool_name),
        "ConfigMap controller"
    );
    assert_eq!(
        Some(owner.uid.as_str()),
        o.pool["metadata"]["uid"].as_str(),
        "ConfigMap controller uid must be the pool's"
    );
}

/// Asserts a status condition.
pub fn assert_condition(o: &Observed, type_: &str, status: &str) {
    let condition = o
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {}", o.pool["status"]));
    assert_eq!(
        condition["status"], status,
        "condition {type_}: {condition}"
    );
}

/// Every live worker pod instance started with exactly its current entry
/// of `config.yml` (same jobs, same per-worker version).
pub async fn assert_mounted_current_jobs(env: &Env, o: &Observed) {
    let live: Vec<String> = o
        .pods
        .values()
        .filter(|p| !p.terminating)
        .map(|p| p.uid.clone())
        .collect();
    let mounts = env.mounts_of(&live).await;
    let config_map = env.example.config_map_name();
    let namespace = env.example.namespace();
    let config = o.config();
    for pod in o.pods.values().filter(|p| !p.terminating) {
        let mount = mounts
            .iter()
            .find(|m| m.namespace == namespace && m.uid == pod.uid)
            .unwrap_or_else(|| panic!("no mount record for live pod {} ({})", pod.name, pod.uid));
        assert_eq!(mount.pod, pod.name);
        let mounted_cm = mount.config_maps.get(&config_map);
        let text = mounted_cm
            .and_then(|cm| cm.data.get(CONFIG_KEY))
            .unwrap_or_else(|| {
                panic!(
                    "{} ({}) started without {config_map}/{CONFIG_KEY} and was never refreshed",
                    pod.name, pod.uid
                )
            });
        let mounted = WorkerConfig::parse(text)
            .unwrap_or_else(|e| panic!("{} mounted an unreadable config: {e}", pod.name));
        assert_eq!(
            mounted.workload(&pod.name),
            config.workload(&pod.name),
            "{} ({}) runs with the jobs of config version {} (ConfigMap resourceVersion {}) but \
             the ConfigMap is at version {}",
            pod.name,
            pod.uid,
            mounted.version,
            mounted_cm.map_or("?", |cm| cm.resource_version.as_str()),
            config.version
        );
    }
}

/// Pod deletions the operator requested after `mark`, counted by pod name. A delete the API
/// server answered with a 5xx is not counted: on a real cluster a replica killed mid-request
/// leaves a 504 in the audit log for a delete that never took effect.
pub async fn operator_pod_deletes(env: &Env, mark: usize) -> Option<BTreeMap<String, usize>> {
    let requests = env.operator_requests_since(mark).await?;
    let mut counts = BTreeMap::new();
    for r in &requests {
        if r.method != "DELETE" || r.status >= 500 {
            continue;
        }
        if let Some(target) = r.target().filter(|t| t.resource == "pods") {
            *counts.entry(target.name.unwrap_or_default()).or_insert(0) += 1;
        }
    }
    Some(counts)
}

/// Asserts that after `mark` the operator neither wrote any ConfigMap nor deleted any pod.
pub async fn assert_no_config_map_write_or_pod_delete(env: &Env, mark: usize) {
    let Some(requests) = env.operator_requests_since(mark).await else {
        env.note_skipped("the operator's request log");
        return;
    };
    let offending: Vec<String> = requests
        .iter()
        .filter(|r| {
            r.is_write()
                && r.target().is_some_and(|t| {
                    t.resource == "configmaps" || (t.resource == "pods" && r.method == "DELETE")
                })
        })
        .map(RequestRecord::describe)
        .collect();
    assert!(
        offending.is_empty(),
        "the operator wrote a ConfigMap or deleted a pod: {offending:#?}"
    );
}

/// An events.k8s.io/v1 Event about the pool, flattened.
#[derive(Clone, Debug)]
pub struct PoolEvent {
    /// Normal or Warning.
    pub type_: String,
    /// PascalCase reason.
    pub reason: String,
    /// Human-readable note.
    pub note: String,
    /// Occurrences (series count, 1 without a series).
    pub count: i32,
    /// Name of the related (secondary) object, if any.
    pub related: Option<String>,
}

impl PoolEvent {
    /// Whether the event concerns the pod `name`: its related object, or named in its note
    /// (as a whole name: `w-1` is not mentioned by `w-10`).
    pub fn mentions(&self, name: &str) -> bool {
        if let Some(related) = &self.related {
            return related == name;
        }
        self.note
            .match_indices(name)
            .any(|(at, _)| !self.note[at + name.len()..].starts_with(|c: char| c.is_ascii_digit()))
    }
}

/// How many rollouts the pool's events record: Normal `Rebalanced` events (one per new
/// version) and Normal `RefreshingWorker` events per pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutEvents {
    /// Rebalanced events.
    pub rebalanced: i32,
    /// RefreshingWorker events by pod name.
    pub refreshed: BTreeMap<String, i32>,
}

/// Counts the example pool's rollout events for the pods `pods`.
pub async fn rollout_events(env: &Env, pods: &[String]) -> RolloutEvents {
    let events = pool_events(env, &env.example.pool_name()).await;
    fn normal<'a>(events: &'a [PoolEvent], reason: &'a str) -> impl Iterator<Item = &'a PoolEvent> {
        events
            .iter()
            .filter(move |e| e.type_ == "Normal" && e.reason == reason)
    }
    RolloutEvents {
        rebalanced: normal(&events, "Rebalanced").map(|e| e.count).sum(),
        refreshed: pods
            .iter()
            .map(|pod| {
                let n = normal(&events, "RefreshingWorker")
                    .filter(|e| e.mentions(pod))
                    .map(|e| e.count)
                    .sum();
                (pod.clone(), n)
            })
            .collect(),
    }
}

/// Waits until the events record exactly `versions` more Rebalanced events than `before`
/// and, for each pod of `before`, one more RefreshingWorker event if it is in `refreshed`
/// and none otherwise.
pub async fn wait_rollout_events(
    env: &Env,
    before: &RolloutEvents,
    versions: i32,
    refreshed: &BTreeSet<String>,
) {
    let pods: Vec<String> = before.refreshed.keys().cloned().collect();
    let expected = RolloutEvents {
        rebalanced: before.rebalanced + versions,
        refreshed: before
            .refreshed
            .iter()
            .map(|(pod, n)| (pod.clone(), n + i32::from(refreshed.contains(pod))))
            .collect(),
    };
    let pods = &pods;
    let expected_ref = &expected;
    eventually(
        "the Rebalanced and RefreshingWorker events of the rollout",
        move || async move {
            let now = rollout_events(env, pods).await;
            if now == *expected_ref {
                Ok(())
            } else {
                Err(format!("events {now:?}, expected {expected_ref:?}"))
            }
        },
    )
    .await;
}

/// Events whose `regarding` is the SwarmPool `pool`.
pub async fn pool_events(env: &Env, pool: &str) -> Vec<PoolEvent> {
    env.events()
        .await
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("SwarmPool") && r.name.as_deref() == Some(pool)
            })
        })
        .map(|e| PoolEvent {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            note: e.note.unwrap_or_default(),
            count: e.series.map(|s| s.count).unwrap_or(1),
            related: e.related.and_then(|r| r.name),
        })
        .collect()
}

/// Waits until an event of `type_` and `reason` about `pool` exists, and returns them all.
pub async fn wait_event(env: &Env, pool: &str, type_: &str, reason: &str) -> Vec<PoolEvent> {
    eventually(
        &format!("a {type_} {reason} event about {pool}"),
        || async {
            let events = pool_events(env, pool).await;
            let matching: Vec<PoolEvent> = events
                .iter()
                .filter(|e| e.type_ == type_ && e.reason == reason)
                .cloned()
                .collect();
            if matching.is_empty() {
                let seen: BTreeSet<String> = events
                    .iter()
                    .map(|e| format!("{} {}", e.type_, e.reason))
                    .collect();
                Err(format!("events so far: {seen:?}"))
            } else {
                Ok(matching)
            }
        },
    )
    .await
}
