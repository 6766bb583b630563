//! What a cell measured and how it is printed: a detailed block per cell as it ends, then the
//! table of every cell. The wording stays as it is: runs are compared by their printed lines.

use std::time::Duration;

use crate::Cell;
use crate::apiserver;
use crate::process::{HeapAtPeak, Requests};

/// What one cell measured.
pub struct Measured {
    pub plane: &'static str,
    pub cell: Cell,
    /// From creating the StatefulSets to all their pods Ready: the control plane alone.
    pub pods_created: Duration,
    /// From creating the pools to every pool's first config version written.
    pub first_configs: Duration,
    pub converge: Duration,
    pub rss_converged: f64,
    pub rss_idle: f64,
    pub rss_after_rollout: f64,
    /// The most RSS seen at any time of the cell.
    pub rss_peak: f64,
    /// The most RSS seen in each full rollout (from its start until every pool settled).
    pub rss_peak_full_rollouts: Vec<f64>,
    /// The allocator's figures at each of those peaks.
    pub heap_at_full_rollout_peaks: Vec<Option<HeapAtPeak>>,
    /// The most sockets the operator had open at once.
    pub most_sockets: usize,
    pub cpu_first_rollout: f64,
    pub first_rollout: Requests,
    pub idle: Requests,
    pub idle_seconds: u64,
    pub scale: Requests,
    pub scale_samples: usize,
    pub scale_latency_ms: Vec<f64>,
    pub full_rollout: Duration,
    /// Each further full rollout: how long it took, and the RSS after it (after the idle time).
    pub more_rollouts: Vec<Rollout>,
    pub full_rollout_requests: Requests,
    /// Only for `:ack` cells.
    pub ack: Option<AckMeasured>,
}

/// One further full rollout (a job of every worker renamed).
pub struct Rollout {
    pub took: Duration,
    /// Workers' ConfigMaps it wrote or created (none under `DeletePods`, whose workers share one).
    pub slices_written: usize,
    /// The RSS after it, after the idle time.
    pub rss_after: f64,
}

/// What an `:ack` cell measured besides.
pub struct AckMeasured {
    pub permit_seconds: Option<u64>,
    /// Worker pods in the idle phase.
    pub workers: usize,
    /// How long the idle phase took.
    pub idle_took: Duration,
    /// The load driver's requests in the idle phase as kube-sim's request log shows them.
    pub sim_idle: Option<Requests>,
    /// From the moment the last worker pod was Ready (its worker started) to all pools Balanced.
    pub balanced_after_running: Duration,
    /// How long before the pools were created the last worker pod was Ready.
    pub running_before_pools: Duration,
    /// Per scale sample: from the new pod Ready (its worker started) to its pool settled.
    pub scale_balanced_ms: Vec<f64>,
    /// Pods the operator deleted over the whole cell.
    pub pod_deletes: u64,
    pub workers_started: u64,
    /// ConfigMap watch bytes the API server sent (all watchers, the operator's too) and the
    /// workers' own ConfigMaps written, in the scale phase and in the full rollout.
    pub watch_bytes: Option<(f64, usize, f64, usize)>,
    /// The API server's requests and CPU in the idle phase (steady state: every worker
    /// reading, nothing changing), and over the whole cell, with their wall times; `None` on
    /// kube-sim.
    pub api_idle: Option<(apiserver::Window, Duration)>,
    pub api_cell: Option<(apiserver::Window, Duration)>,
    /// The load driver's requests per phase.
    pub first_rollout: Requests,
    pub idle: Requests,
    pub scale: Requests,
    pub full_rollout: Requests,
}

/// The `q` quantile (0..=1) of `samples`, nearest rank.
fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `n` per pool of `pools`.
fn per_pool(n: u64, pools: usize) -> f64 {
    n as f64 / pools as f64
}

/// Prints one cell's measurements in detail, as the cell ends.
pub fn print_detail(m: &Measured) {
    let pools = m.cell.pools;
    println!("\n{} on {}", m.cell.label(), m.plane);
    println!(
        "  the control plane created the {} worker pods in {:.1} s; every pool's first config written {:.1} s after the pools were created",
        m.cell.pools * m.cell.workers,
        m.pods_created.as_secs_f64(),
        m.first_configs.as_secs_f64(),
    );
    println!(
        "  first rollout: {:.1} s ({:.2}x the pods' creation), operator CPU {:.1} s; requests: {}",
        m.converge.as_secs_f64(),
        m.converge.as_secs_f64() / m.pods_created.as_secs_f64().max(f64::EPSILON),
        m.cpu_first_rollout,
        m.first_rollout.describe()
    );
    println!(
        "  idle {} s: {} requests ({})",
        m.idle_seconds,
        m.idle.calls(),
        m.idle.describe()
    );
    println!(
        "  scale (+1 worker) x {}: latency ms {:?}; requests: {}",
        m.scale_samples,
        m.scale_latency_ms
            .iter()
            .map(|ms| ms.round() as u64)
            .collect::<Vec<_>>(),
        m.scale.describe()
    );
    println!(
        "  full rollout (a job more per worker): {:.1} s; writes per pool {:.1}; requests: {}",
        m.full_rollout.as_secs_f64(),
        per_pool(m.full_rollout_requests.writes(), pools),
        m.full_rollout_requests.describe()
    );
    println!(
        "  operator RSS MiB: converged {:.1}, after idle {:.1}, after full rollout {:.1}, peak {:.1}",
        m.rss_converged, m.rss_idle, m.rss_after_rollout, m.rss_peak
    );
    for (i, rollout) in m.more_rollouts.iter().enumerate() {
        println!(
            "  full rollout {} (a job of every worker renamed): {:.1} s; {} workers' ConfigMaps written; operator RSS after it {:.1} MiB",
            i + 2,
            rollout.took.as_secs_f64(),
            rollout.slices_written,
            rollout.rss_after,
        );
    }
    let peaks: Vec<String> = m
        .rss_peak_full_rollouts
        .iter()
        .map(|p| format!("{p:.1}"))
        .collect();
    println!(
        "  operator RSS peak MiB in each full rollout: {}",
        peaks.join(" / ")
    );
    let heaps: Vec<String> = m
        .heap_at_full_rollout_peaks
        .iter()
        .map(|heap| {
            heap.map_or_else(
                || "-".to_owned(),
                |h| format!("{:.1} / {:.1} / {:.1}", h.allocated, h.active, h.resident),
            )
        })
        .collect();
    println!(
        "  allocator at each of those peaks, allocated / active / resident MiB: {}",
        heaps.join("; ")
    );
    println!(
        "  operator sockets open at most: {} (a connection per request in flight, the watches and the /metrics scrapes)",
        m.most_sockets
    );
    if let Some(ack) = &m.ack {
        print_ack_detail(ack);
    }
}

/// The lines an `:ack` cell adds to its detail.
fn print_ack_detail(ack: &AckMeasured) {
    println!(
        "  Acknowledge: Balanced {:.1} s after all worker pods were running (the last was Ready {:.1} s before the pools were created); scale, new pod Ready -> Balanced ms {:?}",
        ack.balanced_after_running.as_secs_f64(),
        ack.running_before_pools.as_secs_f64(),
        ack.scale_balanced_ms
            .iter()
            .map(|ms| ms.round() as u64)
            .collect::<Vec<_>>(),
    );
    println!(
        "  pods deleted by the operator: {}; load driver: {} workers started, permit {}",
        ack.pod_deletes,
        ack.workers_started,
        ack.permit_seconds.map_or(
            "the library's default (30 s, a read every 15 s)".to_owned(),
            |s| { format!("{s} s (SWARM_BENCH_PERMIT_SECONDS)") }
        ),
    );
    match ack.watch_bytes {
        Some((scale, scale_written, rollout, rollout_written)) => println!(
            "  ConfigMap watch bytes sent (API server metric, all watchers): scale {:.0} KiB for {scale_written} workers' ConfigMaps written ({:.1} KiB each); full rollout {:.0} KiB for {rollout_written} ({:.1} KiB each)",
            scale / 1024.0,
            scale / 1024.0 / scale_written.max(1) as f64,
            rollout / 1024.0,
            rollout / 1024.0 / rollout_written.max(1) as f64,
        ),
        None => println!("  ConfigMap watch bytes: the control plane serves no metrics"),
    }
    for (what, window) in [("idle", &ack.api_idle), ("whole cell", &ack.api_cell)] {
        if let Some((window, took)) = window {
            println!("  {}", window.describe(what, took.as_secs_f64()));
        }
    }
    print_at_rest(ack);
    for (phase, requests) in [
        ("first rollout", &ack.first_rollout),
        ("idle", &ack.idle),
        ("scale", &ack.scale),
        ("full rollout", &ack.full_rollout),
    ] {
        println!("  load driver requests, {phase}: {}", requests.describe());
    }
}

/// The workers' cost at rest: the idle phase's requests per worker and 10 s, by verb and
/// resource, as each source saw them, with the control plane's CPU over it.
fn print_at_rest(ack: &AckMeasured) {
    let seconds = ack.idle_took.as_secs_f64();
    let rate = |r: &Requests| per_worker_per_10s(r, ack.workers, seconds);
    println!(
        "  at rest, {:.0} s idle, {} workers; per worker per 10 s:",
        seconds, ack.workers
    );
    println!("    load driver's own count: {}", rate(&ack.idle));
    if let Some(served) = &ack.sim_idle {
        println!(
            "    kube-sim's request log (the driver's user agent): {}",
            rate(served)
        );
    }
    if let Some((window, took)) = &ack.api_idle {
        let cores = |cpu: f64| cpu / took.as_secs_f64().max(1e-9);
        println!(
            "    API server's apiserver_request_total (every client): {}",
            per_worker_per_10s(&window.requests, ack.workers, took.as_secs_f64())
        );
        println!(
            "    CPU over the idle phase: kube-apiserver {:.3} cores, etcd {}",
            cores(window.cpu_seconds),
            window
                .etcd_cpu_seconds
                .map_or("not read".to_owned(), |cpu| format!(
                    "{:.3} cores",
                    cores(cpu)
                )),
        );
    }
}

/// `verb resource: rate` of `requests` per worker per 10 s over `seconds`, watches apart
/// (they stay open), then the writes.
fn per_worker_per_10s(requests: &Requests, workers: usize, seconds: f64) -> String {
    let per = |n: u64| n as f64 / workers.max(1) as f64 / seconds.max(1e-9) * 10.0;
    let mut parts: Vec<String> = requests
        .0
        .iter()
        .map(|((verb, resource), n)| format!("{verb} {resource} {:.3} ({n})", per(*n)))
        .collect();
    if parts.is_empty() {
        parts.push("none".to_owned());
    }
    format!(
        "{}; writes {:.4} ({} in all)",
        parts.join(", "),
        per(requests.writes()),
        requests.writes()
    )
}

/// Prints every cell as a row of the table in docs/performance.md.
pub fn print_table(results: &[Measured]) {
    println!();
    println!(
        "| control plane | pools x workers x jobs | converge | operator RSS: idle / after full rollout / peak | CPU to converge | requests per pool (writes: ConfigMap, status, pod deletes, events) | writes per pool per scale | scale -> ConfigMap write p50 / p99 | idle requests |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in results {
        let pools = m.cell.pools;
        let r = &m.first_rollout;
        let writes_of = |resource: &str| {
            per_pool(
                r.of("patch", resource) + r.of("create", resource) + r.of("update", resource),
                pools,
            )
        };
        println!(
            "| {} | {} | {:.1} s | {:.1} / {:.1} / {:.1} MiB | {:.1} s | {:.1} ({:.1}, {:.1}, {:.1}, {:.1}) | {:.1} | {:.0} / {:.0} ms | {} in {} s |",
            m.plane,
            m.cell.label(),
            m.converge.as_secs_f64(),
            m.rss_idle,
            m.rss_after_rollout,
            m.rss_peak,
            m.cpu_first_rollout,
            per_pool(r.calls(), pools),
            writes_of("configmaps"),
            writes_of("swarmpools/status"),
            per_pool(r.of("delete", "pods"), pools),
            writes_of("events"),
            per_pool(m.scale.writes(), m.scale_samples),
            quantile(&m.scale_latency_ms, 0.5),
            quantile(&m.scale_latency_ms, 0.99),
            m.idle.calls(),
            m.idle_seconds,
        );
    }
}
