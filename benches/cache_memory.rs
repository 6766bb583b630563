//! The heap the watch caches take per worker: a reflector store of 10,000 pods, 10,000 worker
//! Leases and 10,000 worker ConfigMaps (100 pools of 100 `Acknowledge` workers), each read and
//! trimmed as the operator's watches read them, then kept as the summary itself or in the
//! cached form the operator keeps (`src/state/cached.rs`). Counted with a counting allocator.
//!
//! `cargo bench --bench cache-memory`

use kube::runtime::reflector::{self, Lookup};
use kube::runtime::watcher::Event;
use peak_alloc::PeakAlloc;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use swarm_operator::state::cached::Cacheable;
use swarm_operator::state::lease_summary::LeaseSummary;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_operator::state::trim;
use swarm_protocol::names::{ACKED_VERSION_ANNOTATION, FENCED_AT_ANNOTATION};
use swarm_protocol::names::{POOL_LABEL, WORKER_LABEL};

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

const POOLS: usize = 100;
const WORKERS: usize = 100;

fn uid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

/// A worker pod as a StatefulSet controller and kwok leave it.
fn pod(pool: usize, worker: usize) -> Value {
    let name = format!("pool-{pool}-{worker}");
    let time = "2026-11-27T00:00:00Z";
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": time});
    json!({
        "metadata": {
            "name": name, "generateName": format!("pool-{pool}-"), "namespace": "bench",
            "uid": uid(1, pool * WORKERS + worker), "resourceVersion": "1234567",
            "creationTimestamp": time, "generation": 1,
            "labels": {"app": format!("pool-{pool}"), "apps.kubernetes.io/pod-index": worker.to_string(),
                "controller-revision-hash": format!("pool-{pool}-5d8f7c9b6"),
                "statefulset.kubernetes.io/pod-name": name},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                "name": format!("pool-{pool}"), "uid": uid(2, pool),
                "controller": true, "blockOwnerDeletion": true}],
        },
        "status": {"phase": "Running", "conditions": [condition("Initialized"),
            condition("Ready"), condition("ContainersReady"), condition("PodScheduled")]},
    })
}

/// A worker's Lease as the worker library writes it.
fn lease(pool: usize, worker: usize) -> Value {
    json!({
        "metadata": {
            "name": format!("pool-{pool}-{worker}"), "namespace": "bench",
            "uid": uid(3, pool * WORKERS + worker), "resourceVersion": "1234568",
            "creationTimestamp": "2026-11-27T00:00:00Z",
            "labels": {POOL_LABEL: format!("pool-{pool}")},
            "annotations": {ACKED_VERSION_ANNOTATION: "2"},
        },
        "spec": {"holderIdentity": uid(1, pool * WORKERS + worker),
            "renewTime": "2026-11-27T00:00:05.000000Z", "leaseDurationSeconds": 300},
    })
}

/// A worker's own ConfigMap as the operator writes it: three jobs.
fn slice(pool: usize, worker: usize) -> Value {
    let jobs: String = (0..3)
        .map(|j| format!("  - rtsp://camera-{pool}-{worker}-{j}.example/stream\n"))
        .collect();
    json!({
        "metadata": {
            "name": format!("pool-{pool}-config.pool-{pool}-{worker}"), "namespace": "bench",
            "uid": uid(4, pool * WORKERS + worker), "resourceVersion": "1234569",
            "creationTimestamp": "2026-11-27T00:00:00Z",
            "labels": {POOL_LABEL: format!("pool-{pool}"), WORKER_LABEL: format!("pool-{pool}-{worker}")},
            "annotations": {FENCED_AT_ANNOTATION: "2"},
            "ownerReferences": [{"apiVersion": "swarm.io/v1alpha1", "kind": "SwarmPool",
                "name": format!("pool-{pool}"), "uid": uid(5, pool), "controller": true}],
        },
        "data": {"config.yml": format!("version: 2\njobs:\n{jobs}")},
    })
}

/// The heap a store of every worker's `object` takes, kept as `keep` makes it.
fn store_heap<K, C>(object: fn(usize, usize) -> Value, trim: fn(&mut K), keep: fn(K) -> C) -> f64
where
    K: DeserializeOwned,
    C: Lookup<DynamicType = ()> + Clone + 'static,
{
    let start = HEAP.current_usage();
    let (store, mut writer) = reflector::store::<C>();
    for pool in 0..POOLS {
        for worker in 0..WORKERS {
            let mut read: K = serde_json::from_value(object(pool, worker)).expect("an object");
            trim(&mut read);
            writer.apply_watcher_event(&Event::Apply(keep(read)));
        }
    }
    let bytes = HEAP.current_usage() - start;
    assert_eq!(store.state().len(), POOLS * WORKERS);
    bytes as f64 / (POOLS * WORKERS) as f64
}

fn row<K>(kind: &str, object: fn(usize, usize) -> Value, trim: fn(&mut K))
where
    K: Cacheable + DeserializeOwned + Clone + Send + Sync + 'static,
{
    let whole = store_heap(object, trim, |k: K| k);
    let cached = store_heap(object, trim, |k: K| k.cached());
    println!("| {kind} | {whole:.0} B | {cached:.0} B |");
}

fn main() {
    println!("a watch cache of {POOLS} x {WORKERS} workers' objects: heap per object");
    println!("| object | the summary | its cached form |");
    println!("|---|---|---|");
    row::<PodSummary>("pod", pod, trim::pod);
    row::<LeaseSummary>("worker Lease", lease, trim::lease);
    row::<SliceSummary>("worker ConfigMap", slice, trim::slice);
}
