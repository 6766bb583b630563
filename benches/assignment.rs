//! Criterion benchmark of the assignment strategies and the predecessor's baseline: from
//! scratch, and for each of the four changes from the previous layout; and of weighted `Sticky`
//! (`spec.qos.weights`) on N -> N+1.
//!
//! `cargo bench --bench assignment`; the tables of docs/performance.md come from
//! `cargo bench --bench assignment-report`.

mod scenario;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use scenario::{Algorithm, Change, STATEFULSET, WEIGHTED_SIZE, jobs, weighted_qos};
use swarm_assign::{ConfigRequest, Strategy, assign_with_qos, next_config};
use swarm_protocol::config::WorkerConfig;

/// (J, N) pairs measured; the full grid is in the report.
const SIZES: [(usize, usize); 3] = [(1_000, 10), (30_000, 100), (100_000, 1_000)];

fn from_scratch(c: &mut Criterion) {
    let mut group = c.benchmark_group("from scratch");
    for (job_count, replicas) in SIZES {
        let jobs = jobs(job_count);
        for algorithm in Algorithm::ALL {
            let id = BenchmarkId::new(algorithm.name(), format!("J={job_count} N={replicas}"));
            group.bench_function(id, |b| {
                b.iter(|| algorithm.run(black_box(&jobs), black_box(replicas), None))
            });
        }
    }
    group.finish();
}

fn sticky_update(c: &mut Criterion) {
    let mut group = c.benchmark_group("Sticky update");
    for (job_count, replicas) in SIZES {
        let jobs = jobs(job_count);
        let sticky = Algorithm::Strategy(Strategy::Sticky);
        let current = sticky.run(&jobs, replicas, None);
        for change in Change::ALL {
            let (next_jobs, next_replicas) = change.apply(&jobs, replicas);
            let id = BenchmarkId::new(change.name(), format!("J={job_count} N={replicas}"));
            group.bench_function(id, |b| {
                b.iter(|| sticky.run(black_box(&next_jobs), next_replicas, Some(&current)))
            });
        }
    }
    group.finish();
}

/// Weighted `Sticky` (weights 1 to 10) from the settled assignment at N to N+1.
fn weighted_update(c: &mut Criterion) {
    let (job_count, replicas) = WEIGHTED_SIZE;
    let jobs = jobs(job_count);
    let qos = weighted_qos(&jobs);
    let current = assign_with_qos(Strategy::Sticky, &jobs, replicas, None, &qos).assignment;
    c.bench_function(
        &format!("weighted Sticky update N -> N+1, J={job_count} N={replicas}"),
        |b| {
            b.iter(|| {
                assign_with_qos(
                    Strategy::Sticky,
                    black_box(&jobs),
                    replicas + 1,
                    Some(&current),
                    &qos,
                )
            })
        },
    );
}

/// The operator's whole step at the ConfigMap size limit (about 35,000 jobs): read the previous
/// `config.yml`, plan one more worker, render the new text.
fn plan_and_render(c: &mut Criterion) {
    let jobs = jobs(30_000);
    let request = |replicas: usize, previous: Option<&WorkerConfig>| {
        let request = ConfigRequest {
            statefulset: STATEFULSET,
            replicas,
            jobs: &jobs,
            strategy: Strategy::Sticky,
            previous,
            qos: None,
        };
        next_config(&request).expect("valid jobs")
    };
    let text = request(100, None).config.render();
    c.bench_function("parse, plan N -> N+1 and render, J=30000 N=100", |b| {
        b.iter(|| {
            let previous = WorkerConfig::parse(black_box(&text)).expect("own output parses");
            request(101, Some(&previous)).config.render()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = from_scratch, sticky_update, weighted_update, plan_and_render
}
criterion_main!(benches);
