//! Criterion benchmark of one reconcile of a large `Acknowledge` pool, through the operator's
//! own round protocol and planner over a cluster in memory ([`WhatIf`]): the planning,
//! assignment and encoding the operator does before its first write, without the API server.
//!
//! - first config: a pool of 1,000 workers and 100,000 jobs with no ConfigMap yet;
//! - scale: the settled pool scaled to 1,100 workers (the write that revokes what moves);
//! - no change: the settled pool, reconciled again (nothing to write).
//!
//! `cargo bench --bench plan`; the heap the same reconciles take: `cargo bench --bench
//! plan-memory`.
//!
//! [`WhatIf`]: swarm_operator::drive::whatif::WhatIf

mod big_pool;

use std::hint::black_box;
use std::time::Duration;

use big_pool::{JOBS, SCALED, WORKERS};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

fn reconcile(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("Acknowledge pool, {WORKERS} workers x {JOBS} jobs"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("first config", |b| {
        b.iter_batched(
            big_pool::fresh,
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            BatchSize::LargeInput,
        )
    });
    let settled = big_pool::settled();
    group.bench_function(format!("scale to {SCALED} workers"), |b| {
        b.iter_batched(
            || big_pool::scaled(&settled),
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("no change", |b| {
        b.iter_batched(
            || settled.clone(),
            |mut whatif| black_box(whatif.reconcile().expect("a reconcile")),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, reconcile);
criterion_main!(benches);
