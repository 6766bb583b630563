//! The pseudo-cell `costs`: what the control plane spends on one fence read (the current
//! protocol's only request at rest) against one Lease renewal (the renewing protocol's), side
//! by side on the same cluster: `TASKS` tasks for `PHASE` each, first quorum GETs of `OBJECTS`
//! small ConfigMaps, then read-modify-write PUTs of `OBJECTS` Leases as the renewing workers
//! sent them (the object from the last write with a new `renewTime`, re-read on a conflict).
//! CPU is the API server's and etcd's own `process_cpu_seconds_total`, less what they spent
//! over `BASELINE` of nothing just before.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use swarm_protocol::names::{
    ACKED_VERSION_ANNOTATION, POOL_LABEL, VERSION_ANNOTATION, WORKER_LABEL,
};

use crate::apiserver::{self, Window};
use crate::cluster::Cluster;

/// Client tasks, each with one request in flight.
const TASKS: usize = 4;
/// How long each kind of request is sent.
const PHASE: Duration = Duration::from_secs(30);
/// ConfigMaps read, and Leases renewed.
const OBJECTS: usize = 200;
/// The quiet time whose CPU is subtracted as the control plane's own.
const BASELINE: Duration = Duration::from_secs(15);

/// One kind of request sent for `PHASE`.
struct Phase {
    requests: u64,
    /// Conflicts answered (each followed by a GET, counted in `requests`).
    conflicts: u64,
    took: Duration,
    window: Option<Window>,
}

/// Runs the pseudo-cell on kube-sim or on the cluster of `real`, and prints what it measured.
pub async fn run(real: Option<PathBuf>, index: usize) {
    let dir = tempfile::tempdir().expect("scratch directory");
    let cluster = Cluster::start(dir.path(), real.as_deref(), &format!("bench-{index}")).await;
    let config_maps = cluster.config_maps();
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    for i in 0..OBJECTS {
        create(&config_maps, config_map(i)).await;
        create(&leases, lease(i)).await;
    }
    let etcd = cluster.etcd_url.as_deref();
    let before = apiserver::sample(&cluster.client, etcd).await;
    let began = Instant::now();
    tokio::time::sleep(BASELINE).await;
    let after = apiserver::sample(&cluster.client, etcd).await;
    let baseline = before
        .zip(after)
        .map(|(b, a)| (a.since(&b), began.elapsed()));

    let reads = measure(&cluster, |task| read(config_maps.clone(), task)).await;
    let renewals = measure(&cluster, |task| renew(leases.clone(), task)).await;
    println!("\ncosts on {}", cluster.name());
    report(
        "fence read (quorum GET of a small ConfigMap)",
        &reads,
        &baseline,
    );
    report(
        "Lease renewal (read-modify-write PUT; counted with each Lease's first GET)",
        &renewals,
        &baseline,
    );
    cluster.finish().await;
}

/// Sends what `task` sends from `TASKS` tasks at once for `PHASE`, between two samples.
async fn measure<F, Fut>(cluster: &Cluster, task: F) -> Phase
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = (u64, u64)> + Send + 'static,
{
    let etcd = cluster.etcd_url.as_deref();
    let before = apiserver::sample(&cluster.client, etcd).await;
    let began = Instant::now();
    let tasks: Vec<_> = (0..TASKS).map(|k| tokio::spawn(task(k))).collect();
    let (mut requests, mut conflicts) = (0, 0);
    for done in tasks {
        let (sent, clashed) = done.await.expect("a client task");
        requests += sent;
        conflicts += clashed;
    }
    let took = began.elapsed();
    let after = apiserver::sample(&cluster.client, etcd).await;
    Phase {
        requests,
        conflicts,
        took,
        window: before.zip(after).map(|(b, a)| a.since(&b)),
    }
}

/// Quorum GETs (no resourceVersion) of task `k`'s share of the ConfigMaps until `PHASE` ends.
async fn read(api: Api<ConfigMap>, k: usize) -> (u64, u64) {
    let began = Instant::now();
    let mut sent = 0;
    for i in (k..OBJECTS).step_by(TASKS).cycle() {
        if began.elapsed() >= PHASE {
            break;
        }
        api.get(&config_map_name(i))
            .await
            .unwrap_or_else(|e| panic!("read ConfigMap {i}: {e}"));
        sent += 1;
    }
    (sent, 0)
}

/// Renewals of task `k`'s share of the Leases until `PHASE` ends: each PUTs the object its last
/// write returned with a new `renewTime`; a conflict re-reads it.
async fn renew(api: Api<Lease>, k: usize) -> (u64, u64) {
    let began = Instant::now();
    let mut held: Vec<Option<Lease>> = vec![None; OBJECTS];
    let (mut sent, mut conflicts) = (0, 0);
    for i in (k..OBJECTS).step_by(TASKS).cycle() {
        if began.elapsed() >= PHASE {
            break;
        }
        let name = lease_name(i);
        let mut lease = match held[i].take() {
            Some(lease) => lease,
            None => {
                sent += 1;
                api.get(&name)
                    .await
                    .unwrap_or_else(|e| panic!("read Lease {name}: {e}"))
            }
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        sent += 1;
        match api.replace(&name, &PostParams::default(), &lease).await {
            Ok(stored) => held[i] = Some(stored),
            Err(kube::Error::Api(status)) if status.is_conflict() => conflicts += 1,
            Err(e) => panic!("renew Lease {name}: {e}"),
        }
    }
    (sent, conflicts)
}

/// Prints requests a second and, where the control plane serves its metrics, the CPU per
/// request of the API server and etcd, raw and less the baseline.
fn report(what: &str, phase: &Phase, baseline: &Option<(Window, Duration)>) {
    let seconds = phase.took.as_secs_f64();
    let n = phase.requests.max(1) as f64;
    println!(
        "  {what}: {} requests in {seconds:.1} s ({:.0}/s) from {TASKS} tasks over {OBJECTS} objects, {} conflicts",
        phase.requests,
        phase.requests as f64 / seconds,
        phase.conflicts,
    );
    let Some(window) = &phase.window else {
        println!("    CPU: the control plane serves no metrics");
        return;
    };
    let rate = |cpu: Option<f64>| {
        cpu.zip(baseline.as_ref())
            .map(|(c, (_, t))| c / t.as_secs_f64())
    };
    let per_request = |cpu: f64, idle: Option<f64>| {
        let net = idle.map_or(cpu, |rate| cpu - rate * seconds);
        format!(
            "{:.2} ms per request ({:.2} ms before the baseline's {:.3} cores were taken off), {:.2} cores",
            net * 1000.0 / n,
            cpu * 1000.0 / n,
            idle.unwrap_or(0.0),
            cpu / seconds
        )
    };
    let api_idle = rate(baseline.as_ref().map(|(w, _)| w.cpu_seconds));
    println!(
        "    kube-apiserver: {}",
        per_request(window.cpu_seconds, api_idle)
    );
    match window.etcd_cpu_seconds {
        Some(cpu) => {
            let etcd_idle = rate(baseline.as_ref().and_then(|(w, _)| w.etcd_cpu_seconds));
            println!("    etcd: {}", per_request(cpu, etcd_idle));
        }
        None => println!("    etcd: its metrics were not read"),
    }
}

async fn create<K>(api: &Api<K>, object: K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(e) => panic!("create an object of the costs cell: {e}"),
    }
}

fn config_map_name(i: usize) -> String {
    format!("costs-config.costs-{i:03}")
}

fn lease_name(i: usize) -> String {
    format!("costs-{i:03}")
}

/// A worker's own ConfigMap as the operator writes it: one small entry (about 300 bytes).
fn config_map(i: usize) -> ConfigMap {
    let config = format!(
        "version: 7\nworkloads:\n  costs-{i:03}:\n    jobs:\n    - stream:p000-cam{:05}\n    - stream:p000-cam{:05}\n    - stream:p000-cam{:05}\n",
        3 * i,
        3 * i + 1,
        3 * i + 2
    );
    serde_json::from_value(json!({
        "metadata": {
            "name": config_map_name(i),
            "labels": {POOL_LABEL: "costs", WORKER_LABEL: lease_name(i)},
            "annotations": {VERSION_ANNOTATION: "7"},
        },
        "data": {"config.yml": config},
    }))
    .expect("ConfigMap")
}

/// A worker's Lease as the renewing protocol wrote it (its owner reference left out: no pod
/// backs it, and the garbage collector would delete it).
fn lease(i: usize) -> Lease {
    let now = MicroTime(Timestamp::now());
    serde_json::from_value(json!({
        "metadata": {
            "name": lease_name(i),
            "labels": {POOL_LABEL: "costs"},
            "annotations": {ACKED_VERSION_ANNOTATION: "7"},
        },
        "spec": {
            "holderIdentity": format!("00000000-0000-0000-0000-{i:012}"),
            "leaseDurationSeconds": 40,
            "acquireTime": now,
            "renewTime": now,
        },
    }))
    .expect("Lease")
}
