//! The heap one reconcile of a large `Acknowledge` pool takes: the same three reconciles as
//! `cargo bench --bench plan` (1,000 workers x 100,000 jobs, in memory), each measured with a
//! counting allocator for the most it held at once above what it started with (its peak), and
//! what it left behind once its result was dropped.
//!
//! `cargo bench --bench plan-memory`

mod big_pool;

use big_pool::{JOBS, SCALED, WORKERS};
use peak_alloc::PeakAlloc;
use swarm_operator::drive::whatif::WhatIf;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// What one reconcile took: its peak above the start, and what it left allocated.
struct Heap {
    peak: usize,
    retained: isize,
}

fn measure(mut whatif: WhatIf) -> Heap {
    let start = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let result = whatif.reconcile().expect("a reconcile");
    drop(result);
    Heap {
        peak: HEAP.peak_usage() - start,
        retained: HEAP.current_usage() as isize - start as isize,
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

fn main() {
    let before = HEAP.current_usage();
    let settled = big_pool::settled();
    let input = HEAP.current_usage() - before;
    println!("Acknowledge pool, {WORKERS} workers x {JOBS} jobs, one reconcile in memory");
    println!(
        "the settled pool's inputs (spec, pods, Leases, ConfigMaps): {:.1} MiB",
        mib(input as f64)
    );
    println!("| reconcile | heap peak | left allocated |");
    println!("|---|---|---|");
    let cases: [(String, Box<dyn Fn() -> WhatIf>); 3] = [
        ("first config".into(), Box::new(big_pool::fresh)),
        (
            format!("scale to {SCALED} workers"),
            Box::new(|| big_pool::scaled(&settled)),
        ),
        ("no change".into(), Box::new(|| settled.clone())),
    ];
    for (name, input) in cases {
        let heap = measure(input());
        println!(
            "| {name} | {:.1} MiB | {:.1} MiB |",
            mib(heap.peak as f64),
            mib(heap.retained as f64)
        );
    }
}
