//! The worker under test and what it is checked through: the application that records its
//! calls, the config it is given, its report and its Lease.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use swarm_protocol::config::{WorkerConfig, Workload};
use swarm_protocol::lease::acked_version;
use swarm_worker::{Jobs, Permit, WorkerBuilder};
use tokio::sync::Semaphore;

pub const POD: &str = "w-0";
pub const CONFIG_MAP: &str = "pool-config";
/// The ConfigMap the worker of `POD` reads: its own slice of the pool's config.
const OWN_CONFIG_MAP: &str = "pool-config.w-0";

/// The application: records every call; each stop waits for a permit, so the test decides when
/// a stop has finished.
#[derive(Clone)]
pub struct Recorder {
    calls: Arc<Mutex<Vec<String>>>,
    /// One for each stop that may finish.
    pub stop_permits: Arc<Semaphore>,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            calls: Arc::default(),
            stop_permits: Arc::new(Semaphore::new(0)),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl Jobs for Recorder {
    async fn start(&mut self, job: &str, permit: Permit) {
        // A job starts only within the permit of a fence read that listed it.
        assert!(permit.holds(), "{job} started without a permit");
        self.record(format!("start {job}"));
    }

    async fn stop(&mut self, job: &str) {
        self.record(format!("stopping {job}"));
        self.stop_permits.acquire().await.unwrap().forget();
        self.record(format!("stopped {job}"));
    }
}

/// `config.yml` at `version` with `jobs` for this pod and `others` for another.
pub fn config(version: u64, jobs: &[&str], others: &[&str]) -> ConfigMap {
    let workload = |jobs: &[&str]| Workload {
        version,
        jobs: jobs.iter().map(|job| job.to_string()).collect(),
    };
    let text = WorkerConfig::new(
        version,
        [
            (POD.to_string(), workload(jobs)),
            ("w-1".to_string(), workload(others)),
        ],
    )
    .render();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(OWN_CONFIG_MAP.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("config.yml".to_string(), text)])),
        ..ConfigMap::default()
    }
}

pub async fn write_config(api: &Api<ConfigMap>, desired: ConfigMap) {
    let mut current = api.get(OWN_CONFIG_MAP).await.unwrap();
    current.data = desired.data;
    api.replace(OWN_CONFIG_MAP, &PostParams::default(), &current)
        .await
        .unwrap();
}

/// Polls `check` every 20 ms for up to 10 s.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn spec(lease: &Lease) -> &LeaseSpec {
    lease.spec.as_ref().unwrap()
}

pub fn report_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// What the report says the worker ran, a line per change: the lines a fence read adds (the same
/// jobs, a later `until`) are left out once checked.
pub fn reported(path: &Path) -> Vec<(Option<u64>, Vec<String>)> {
    let mut changes: Vec<(Option<u64>, Vec<String>)> = Vec::new();
    let mut until = None;
    for line in report_lines(path) {
        let running: Vec<String> = line["running"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| job.as_str().unwrap().to_string())
            .collect();
        let this = (line["version"].as_u64(), running);
        let this_until = line["until"].as_str().map(str::to_owned);
        if changes.last() == Some(&this) {
            assert!(
                this_until > until,
                "a repeated line extends the permit: {line}"
            );
        } else {
            changes.push(this);
        }
        until = this_until;
    }
    changes
}

pub fn strings(jobs: &[&str]) -> Vec<String> {
    jobs.iter().map(|job| job.to_string()).collect()
}

/// The status `/readyz` answers on the worker's health address.
pub async fn readyz(addr: SocketAddr) -> u16 {
    let url = format!("http://{addr}/readyz");
    reqwest::get(url).await.unwrap().status().as_u16()
}

/// Waits until the Lease acknowledges `version`, and returns it.
pub async fn acknowledged(leases: &Api<Lease>, version: u64) -> Lease {
    eventually(&format!("version {version} acknowledged"), async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(version)).then_some(lease)
    })
    .await
}

/// The worker of `POD` in namespace `default`, for pod instance `uid`, in pool `pool` (whose
/// ConfigMap is `CONFIG_MAP`), on `client`, serving readiness on a free port; each test adds
/// its timing and shutdown.
pub fn worker_of(uid: &str, client: Client) -> WorkerBuilder {
    WorkerBuilder::empty()
        .health_addr("127.0.0.1:0".parse().unwrap())
        .pod_name(POD)
        .namespace("default")
        .pod_uid(uid)
        .pool("pool")
        .config_map(CONFIG_MAP)
        .client(client)
}

/// Aborts a task when the test ends, even on a failed assertion.
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
