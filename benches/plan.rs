//! Criterion benchmark of one reconcile of a large `Acknowledge` pool, through the operator's
//! own round protocol and planner over a cluster in memory ([`WhatIf`]): the planning,
//! assignment and encoding the operator does before its first write, without the API server.
//!
//! - first config: a pool of 1,000 workers and 100,000 jobs with no ConfigMap yet;
//! - scale: the settled pool scaled to 1,100 workers (the write that revokes what moves);
//! - no change: the settled pool, reconciled again (nothing to write).
//!
//! `cargo bench --bench plan`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::jiff::Timestamp;
use swarm_operator::crd::{RolloutPolicy, SwarmPool};
use swarm_operator::drive::whatif::WhatIf;

const WORKERS: usize = 1_000;
const JOBS: usize = 100_000;
const STATEFULSET: &str = "swarm-worker";

fn pool() -> SwarmPool {
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("stream:camera-{i:06}")).collect();
    let mut pool = SwarmPool::new(
        "big",
        serde_json::from_value(serde_json::json!({
            "selector": {"matchLabels": {"app": STATEFULSET}},
            "jobs": jobs,
        }))
        .expect("a valid spec"),
    );
    pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    pool.metadata.namespace = Some("bench".into());
    pool.metadata.uid = Some("big-uid".into());
    pool.metadata.generation = Some(1);
    pool
}

fn running(workers: usize) -> Vec<(String, String)> {
    (0..workers)
        .map(|i| (format!("{STATEFULSET}-{i}"), format!("uid-{i}")))
        .collect()
}

fn fresh() -> WhatIf {
    WhatIf::new(
        pool(),
        STATEFULSET,
        &running(WORKERS),
        None,
        Vec::new(),
        Timestamp::UNIX_EPOCH,
    )
}

fn reconcile(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("Acknowledge pool, {WORKERS} workers x {JOBS} jobs"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("first config", |b| {
        b.iter_batched(
            fresh,
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            criterion::BatchSize::LargeInput,
        )
    });
    let mut settled = fresh();
    settled.settle().expect("the pool settles");
    group.bench_function("scale to 1100 workers", |b| {
        b.iter_batched(
            || {
                let mut whatif = settled.clone();
                whatif.scale(WORKERS + WORKERS / 10);
                whatif
            },
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            criterion::BatchSize::LargeInput,
        )
    });
    group.bench_function("no change", |b| {
        b.iter_batched(
            || settled.clone(),
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, reconcile);
criterion_main!(benches);
