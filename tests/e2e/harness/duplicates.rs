//! The duplicate watch: samples what every live pod runs, throughout a scenario, and records
//! any job run by two live pods at once.
//!
//! A worker runs the jobs of its own entry in the `config.yml` it mounted at start, until its
//! pod instance is gone (terminating pods still run). On the simulation `GET
//! /kube-sim/v1/mounts` lists exactly the live, started instances with what they mounted, so
//! one request is one consistent sample; on a real cluster the same list is derived from the
//! API's history (see `derived_mounts`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::derived_mounts::DerivedMounts;
use super::inspect::Inspector;
use super::sim_inspect::PodMounts;
use super::worker_config::WorkerConfig;
use super::worker_fleet::Reports;

/// How often the watch samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// How often it re-reads the pool (its jobs, ConfigMap name and handoff mode).
const POOL_EVERY: usize = 10;

/// What the watch has seen so far.
#[derive(Clone, Debug, Default)]
pub struct HandoffStats {
    /// Samples taken.
    pub samples: usize,
    /// The first sample with a job on two live pods: when (since the watch started), and what.
    pub first_duplicate: Option<String>,
    /// Jobs of the spec run by two or more live pods, summed over time (wall seconds).
    pub duplicate_job_seconds: f64,
    /// Jobs of the spec run by no live pod, summed over time (wall seconds).
    pub unheld_job_seconds: f64,
    /// The longest time one job stayed unheld (wall seconds).
    pub longest_unheld_seconds: f64,
    /// Which job that was.
    pub longest_unheld_job: String,
    /// Distinct jobs ever seen on two live pods at once.
    pub duplicated_jobs: BTreeSet<String>,
    /// Whether the pool ever used the Overlap handoff (duplicates are its documented cost).
    pub overlap: bool,
}

#[derive(Default)]
struct State {
    stats: HandoffStats,
    /// Jobs unheld since when.
    unheld_since: BTreeMap<String, Instant>,
    last_sample: Option<Instant>,
}

/// The background sampler of one scenario; stops when dropped.
pub struct DuplicateWatch {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

/// The pool the watch follows, as last read.
#[derive(Clone, Debug, Default)]
struct PoolView {
    jobs: BTreeSet<String>,
    config_map: String,
    overlap: bool,
}

impl DuplicateWatch {
    /// Starts sampling the pods of `namespace` that mount pool `pool`'s ConfigMap.
    pub fn start(
        inspector: Inspector,
        client: kube::Client,
        namespace: String,
        pool: String,
    ) -> DuplicateWatch {
        DuplicateWatch::sample(Source::Mounts(inspector), client, namespace, pool)
    }

    /// Starts sampling the pods of a pool whose workers wait for their entry and read the file
    /// as the kubelet refreshes it (a Deployment pool): each live instance may run any job its
    /// entry listed while it lived, as `mounts` derives from the API's history.
    pub fn start_for_waiting_workers(
        mounts: DerivedMounts,
        client: kube::Client,
        namespace: String,
        pool: String,
    ) -> DuplicateWatch {
        DuplicateWatch::sample(
            Source::EverListed(Box::new(mounts)),
            client,
            namespace,
            pool,
        )
    }

    /// Starts sampling what the worker processes of an acknowledging pool report they run
    /// (see `worker_fleet`): there, a pod's mounted file says nothing about its jobs.
    pub fn start_for_reports(
        reports: Reports,
        client: kube::Client,
        namespace: String,
        pool: String,
    ) -> DuplicateWatch {
        DuplicateWatch::sample(Source::Reports(reports), client, namespace, pool)
    }

    fn sample(
        source: Source,
        client: kube::Client,
        namespace: String,
        pool: String,
    ) -> DuplicateWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
            let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
            let pools: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
            let mut view = PoolView::default();
            let mut parsed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let mut ticker = tokio::time::interval(SAMPLE_EVERY);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for round in 0usize.. {
                ticker.tick().await;
                if round % POOL_EVERY == 0
                    && let Ok(Some(object)) = pools.get_opt(&pool).await
                {
                    view = pool_view(&serde_json::to_value(object).unwrap_or_default());
                }
                if view.config_map.is_empty() {
                    continue;
                }
                let Some(held) = source.held(&namespace, &view.config_map, &mut parsed).await
                else {
                    continue;
                };
                shared
                    .lock()
                    .expect("watch state")
                    .record(Instant::now(), &held, &view);
            }
        });
        DuplicateWatch { state, task }
    }

    /// What the watch has seen so far.
    pub fn stats(&self) -> HandoffStats {
        self.state.lock().expect("watch state").stats.clone()
    }

    /// Measures the longest unheld time from now on: a job unheld now counts from now (the
    /// samples trail the clock a little, so a settled pool may still show jobs unheld).
    pub fn restart_longest_unheld(&self) {
        let mut state = self.state.lock().expect("watch state");
        state.stats.longest_unheld_seconds = 0.0;
        state.stats.longest_unheld_job.clear();
        let now = Instant::now();
        for since in state.unheld_since.values_mut() {
            *since = now;
        }
    }

    /// Why the scenario fails, if a job was ever on two live pods while the pool used the
    /// Exclusive handoff.
    pub fn failure(&self) -> Option<String> {
        let stats = self.stats();
        match (&stats.first_duplicate, stats.overlap) {
            (Some(first), false) => Some(format!(
                "a job ran on two live pods at once ({} jobs, {:.2} duplicate job-seconds over {} samples); first seen: {first}",
                stats.duplicated_jobs.len(),
                stats.duplicate_job_seconds,
                stats.samples
            )),
            _ => None,
        }
    }

    /// Fails if a job was ever on two live pods while the pool used the Exclusive handoff.
    pub fn assert_exclusive(&self) {
        if let Some(failure) = self.failure() {
            panic!("{failure}");
        }
    }
}

impl Drop for DuplicateWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl State {
    fn record(&mut self, now: Instant, held: &BTreeMap<String, Vec<String>>, pool: &PoolView) {
        let dt = self
            .last_sample
            .map_or(0.0, |last| now.duration_since(last).as_secs_f64());
        self.last_sample = Some(now);
        let stats = &mut self.stats;
        stats.samples += 1;
        stats.overlap |= pool.overlap;
        for (job, pods) in held.iter().filter(|(_, pods)| pods.len() > 1) {
            stats.duplicate_job_seconds += dt;
            stats.duplicated_jobs.insert(job.clone());
            if stats.first_duplicate.is_none() {
                stats.first_duplicate = Some(format!(
                    "job {job} on {} at sample {}",
                    pods.join(" and "),
                    stats.samples
                ));
            }
        }
        for job in &pool.jobs {
            if held.get(job).is_some_and(|pods| !pods.is_empty()) {
                self.unheld_since.remove(job);
                continue;
            }
            stats.unheld_job_seconds += dt;
            let since = *self.unheld_since.entry(job.clone()).or_insert(now);
            let unheld = now.duration_since(since).as_secs_f64();
            if unheld > stats.longest_unheld_seconds {
                stats.longest_unheld_seconds = unheld;
                stats.longest_unheld_job.clone_from(job);
            }
        }
        self.unheld_since.retain(|job, _| pool.jobs.contains(job));
    }
}

/// Where a sample of what each live pod runs comes from.
enum Source {
    /// What each instance mounted at start (workers that read their entry once).
    Mounts(Inspector),
    /// Every job each instance's entry listed while it lived (workers that wait for their
    /// entry).
    EverListed(Box<DerivedMounts>),
    /// What each worker process reported it ran (workers that reload and acknowledge).
    Reports(Reports),
}

impl Source {
    /// Job -> the live pod instances that may run it; `None` when no sample could be taken.
    async fn held(
        &self,
        namespace: &str,
        config_map: &str,
        parsed: &mut BTreeMap<String, BTreeSet<String>>,
    ) -> Option<BTreeMap<String, Vec<String>>> {
        match self {
            Source::Mounts(inspector) => {
                let mounts = inspector.try_mounts().await.ok()?;
                Some(holdings(&mounts, namespace, config_map, parsed))
            }
            Source::EverListed(mounts) => {
                let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for instance in mounts.ever_listed(config_map) {
                    for job in instance.jobs {
                        held.entry(job)
                            .or_default()
                            .push(format!("{} ({})", instance.pod, instance.uid));
                    }
                }
                Some(held)
            }
            Source::Reports(reports) => reports.held(),
        }
    }
}

fn pool_view(pool: &Value) -> PoolView {
    let name = pool
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let config_map = pool
        .pointer("/spec/configMap")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map_or_else(|| format!("{name}-config"), str::to_owned);
    PoolView {
        jobs: pool
            .pointer("/spec/jobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|j| j.as_str().map(str::to_owned))
            .collect(),
        config_map,
        overlap: pool
            .pointer("/spec/rollout/handoff")
            .and_then(Value::as_str)
            == Some("Overlap"),
    }
}

/// Job -> the live pod instances that run it (`pod (uid)`), from one mounts sample. Parsed
/// configs are kept by uid and resourceVersion: an instance's mount does not change.
fn holdings(
    mounts: &[PodMounts],
    namespace: &str,
    config_map: &str,
    parsed: &mut BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, Vec<String>> {
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for pod in mounts.iter().filter(|m| m.namespace == namespace) {
        let Some(mounted) = pod.config_maps.get(config_map) else {
            continue;
        };
        let key = format!("{}/{}", pod.uid, mounted.resource_version);
        seen.insert(key.clone());
        let jobs = parsed.entry(key).or_insert_with(|| {
            mounted
                .data
                .get("config.yml")
                .and_then(|text| WorkerConfig::parse(text).ok())
                .and_then(|config| {
                    config
                        .workload(&pod.pod)
                        .map(|w| w.jobs.iter().cloned().collect())
                })
                .unwrap_or_default()
        });
        for job in jobs.iter() {
            held.entry(job.clone())
                .or_default()
                .push(format!("{} ({})", pod.pod, pod.uid));
        }
    }
    parsed.retain(|key, _| seen.contains(key));
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_on_two_pods_is_recorded_with_its_pods_and_time() {
        let pool = PoolView {
            jobs: ["a", "b"].map(str::to_owned).into(),
            config_map: "cm".into(),
            overlap: false,
        };
        let held = |entries: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
            entries
                .iter()
                .map(|(job, pods)| {
                    (
                        job.to_string(),
                        pods.iter().map(|p| p.to_string()).collect(),
                    )
                })
                .collect()
        };
        let mut state = State::default();
        let t0 = Instant::now();
        state.record(t0, &held(&[("a", &["w-0"]), ("b", &["w-1"])]), &pool);
        state.record(
            t0 + Duration::from_secs(1),
            &held(&[("a", &["w-0", "w-2"])]),
            &pool,
        );
        state.record(
            t0 + Duration::from_secs(2),
            &held(&[("a", &["w-2"])]),
            &pool,
        );
        let stats = &state.stats;
        assert_eq!(stats.samples, 3);
        assert_eq!(stats.duplicate_job_seconds, 1.0);
        assert_eq!(stats.duplicated_jobs, BTreeSet::from(["a".to_owned()]));
        assert!(
            stats
                .first_duplicate
                .as_deref()
                .unwrap()
                .contains("w-0 and w-2")
        );
        assert_eq!(
            stats.unheld_job_seconds, 2.0,
            "b unheld for the last two seconds"
        );
        assert_eq!(stats.longest_unheld_seconds, 1.0);
    }
}
