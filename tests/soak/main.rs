//! A seeded fault soak of the operator on a real control plane (`scripts/soak.sh`).
//!
//! Two operator replicas run out of cluster with leader election, each through its own
//! toxiproxy proxy and as its own ServiceAccount, over several pools at once. A plan drawn
//! from the seed interleaves a user's changes (scales, job edits, rollout restarts, a pool
//! created and deleted) with faults (the API server and etcd killed or frozen, etcd
//! compactions, API Priority and Fairness rejecting the operator, one replica's connection
//! slowed, reset or cut, the leader killed or frozen, worker pods deleted). The guarantees
//! are checked all along and once everything has settled; the report goes to standard
//! output, and the exit code is 1 when a guarantee failed.
//!
//! Without `SWARM_SOAK_CLUSTER` (the directory of `scripts/real-cluster.sh up`) it prints a
//! note and exits 0, so `cargo test --workspace` stays quick.

#[path = "../e2e/harness/mod.rs"]
#[allow(dead_code, unused_imports, unused_macros)]
mod harness;

mod audit;
mod checks;
mod clock;
mod cluster;
mod faults;
mod history;
mod load;
mod pools;
mod repair;
mod replicas;
mod report;
mod schedule;
mod toxiproxy;
mod violations;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::derived_mounts::DerivedMounts;
use harness::inspect::Inspector;

use checks::{PoolEntry, Pools, Snapshot};
use clock::Clock;
use cluster::Cluster;
use faults::FaultLog;
use history::History;
use replicas::Replica;
use schedule::Schedule;
use toxiproxy::Toxiproxy;
use violations::Violations;

/// The replicas' identities, also their ServiceAccounts' names.
const REPLICAS: [&str; 2] = ["swarm-operator-a", "swarm-operator-b"];
/// How long the pools get to settle for good once the plan is over.
const FINAL_SETTLE: Duration = Duration::from_secs(120);
/// Exits of a replica that neither the soak caused nor a fault explains, beyond which the
/// replicas are crash-looping.
const CRASH_LOOP_EXITS: usize = 3;
/// Seconds after a fault within which a replica's exit counts as the fault's doing (it lost
/// its lease, or could not reach the API server at start).
pub const FAULT_GRACE: f64 = 30.0;

/// Everything the soak's tasks share.
pub struct Soak {
    pub clock: Clock,
    pub cluster: Cluster,
    pub violations: Violations,
    pub history: History,
    pub faults: FaultLog,
    pub pools: Pools,
    pub replicas: Vec<Replica>,
    pub toxiproxy: Toxiproxy,
    pub mounts: DerivedMounts,
    pub inspector: Inspector,
    /// Load actions by kind: (done, failed).
    pub loads: Mutex<BTreeMap<&'static str, (u32, u32)>>,
    /// etcd compactions: (done, failed).
    pub compactions: Mutex<(u32, u32)>,
    /// Restarts of the control plane's helpers that got stuck (see [`repair`]).
    pub repairs: Mutex<repair::Repairs>,
}

fn main() -> ExitCode {
    let Some(dir) = std::env::var_os("SWARM_SOAK_CLUSTER").filter(|d| !d.is_empty()) else {
        println!(
            "soak: SWARM_SOAK_CLUSTER is not set; nothing to do (scripts/soak.sh runs the soak)"
        );
        return ExitCode::SUCCESS;
    };
    let number = |var: &str, default: u64| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let minutes = number("SWARM_SOAK_MINUTES", 3);
    let seed = number("SWARM_SOAK_SEED", 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    match runtime.block_on(run(PathBuf::from(dir), minutes, seed)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            println!("soak: could not run: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: PathBuf, minutes: u64, seed: u64) -> Result<bool, String> {
    let clock = Clock::start();
    let cluster = Cluster::open(&dir).await?;
    cluster.install(&REPLICAS).await?;
    let toxiproxy_bin = std::env::var_os("SWARM_SOAK_TOXIPROXY")
        .map(PathBuf::from)
        .ok_or("SWARM_SOAK_TOXIPROXY must name toxiproxy-server")?;
    let toxiproxy =
        Toxiproxy::start(&toxiproxy_bin, &cluster.scratch.join("toxiproxy.log")).await?;
    let upstream = cluster.apiserver()?;
    let violations = Violations::default();
    let history = History::start(cluster.client.clone(), clock, violations.clone());
    let mut replicas = Vec::new();
    for name in REPLICAS {
        let listen = toxiproxy.proxy(name, &upstream).await?;
        let kubeconfig = cluster.replica_kubeconfig(name, &listen).await?;
        replicas.push(Replica::supervise(
            name,
            name,
            &kubeconfig,
            format!("127.0.0.1:{}", toxiproxy::free_port()),
            cluster.scratch.join(format!("operator-{name}.log")),
            clock,
        ));
    }
    let mounts = DerivedMounts::start(cluster.client.clone(), pools::NAMESPACE);
    let inspector = Inspector::real(cluster.real.clone(), None, mounts.clone());
    let soak = Arc::new(Soak {
        clock,
        cluster,
        violations,
        history,
        faults: FaultLog::default(),
        pools: Pools::default(),
        replicas,
        toxiproxy,
        mounts,
        inspector,
        loads: Mutex::default(),
        compactions: Mutex::default(),
        repairs: Mutex::default(),
    });
    let outcome = soak_with(&soak, minutes, seed).await;
    for replica in &soak.replicas {
        replica.shutdown().await;
    }
    outcome
}

/// The soak proper: the standing pools, the plan's three tracks side by side, the final
/// settle, the checks at the end and the report. Whether no guarantee failed.
async fn soak_with(soak: &Arc<Soak>, minutes: u64, seed: u64) -> Result<bool, String> {
    let standing = start_standing_pools(soak).await?;
    let total = Duration::from_secs(minutes * 60);
    let shapes: Vec<_> = standing.iter().map(|d| d.shape()).collect();
    let schedule = Schedule::generate(seed, total, &shapes, replicas::LEASE);
    let start = soak.clock.now();
    eprintln!(
        "soak: t={start:.1}s setup done; {} faults and {} load actions planned for {minutes} min (seed {seed})",
        schedule.steps.len(),
        schedule.loads.len()
    );
    let status = tokio::spawn({
        let soak = soak.clone();
        async move { checks::watch_status(&soak).await }
    });
    let compactor = tokio::spawn(compact_etcd(soak.clone(), schedule.compactions.clone()));
    let loads = tokio::spawn(perform_loads(soak.clone(), schedule.loads.clone()));
    inject_faults(soak, &schedule, start + total.as_secs_f64()).await;
    // A load action cut short may leave a kubectl half-done; what it did is what a user's
    // interrupted command would have done.
    loads.abort();
    compactor.abort();
    let schedule_end = soak.clock.now();
    let cleanup_errors = faults::clear_all(soak).await;
    eprintln!("soak: t={schedule_end:.1}s schedule over; waiting for the pools to settle");

    let settled = final_settle(soak, schedule_end).await;
    let settled_at = soak.clock.now();
    soak.faults.all_settled(settled_at);
    status.abort();
    let finals = match settled {
        Ok(finals) => finals,
        Err(last) => {
            dump_state(soak).await;
            soak.violations.add(
                "final-settle",
                settled_at,
                format!(
                    "the pools did not settle within {} s after the schedule: {last}",
                    FINAL_SETTLE.as_secs()
                ),
            );
            checks::final_counts(soak).await
        }
    };
    check_duplicates(soak, settled_at);
    check_crash_loop(soak);
    let audit = analyse_audit(soak);
    let report = report::Report {
        seed,
        minutes,
        soak,
        finals: &finals,
        audit: &audit,
        final_settle: settled_at - schedule_end,
        cleanup_errors: &cleanup_errors,
    };
    print!("{}", report.render());
    eprintln!("soak: t={:.1}s report done", soak.clock.now());
    Ok(soak.violations.all().is_empty())
}

/// Once both replicas are ready, creates the standing pools and waits for them to settle.
async fn start_standing_pools(soak: &Arc<Soak>) -> Result<Vec<pools::PoolDef>, String> {
    wait_replicas_ready(soak).await?;
    let standing = pools::standing();
    for def in &standing {
        soak.cluster
            .apply(&format!("{}.yaml", def.name), &def.manifests())
            .await?;
        soak.pools.add(PoolEntry::watch(soak, def.clone(), false));
    }
    wait_settled(soak, standing.len()).await?;
    Ok(standing)
}

/// The compaction track: compacts etcd after each of `gaps`, counting what worked.
async fn compact_etcd(soak: Arc<Soak>, gaps: Vec<Duration>) {
    for gap in gaps {
        tokio::time::sleep(gap).await;
        let ok = soak.cluster.compact_etcd().await.is_ok();
        let mut counts = soak.compactions.lock().unwrap_or_else(|p| p.into_inner());
        if ok { counts.0 += 1 } else { counts.1 += 1 }
    }
}

/// The load track: a user's changes, each after its pause, counted by kind.
async fn perform_loads(soak: Arc<Soak>, actions: Vec<(Duration, schedule::Load)>) {
    for (gap, action) in actions {
        tokio::time::sleep(gap).await;
        let (kind, result) = load::perform(&soak, &action).await;
        eprintln!(
            "soak: t={:.1}s load {kind}: {}",
            soak.clock.now(),
            result
                .as_ref()
                .map_or_else(|e| format!("FAILED: {e}"), String::clone)
        );
        let mut loads = soak.loads.lock().unwrap_or_else(|p| p.into_inner());
        let entry = loads.entry(kind).or_default();
        if result.is_ok() {
            entry.0 += 1
        } else {
            entry.1 += 1
        }
    }
}

/// The fault track: each step's fault between its pauses, none started after `deadline`.
async fn inject_faults(soak: &Soak, schedule: &Schedule, deadline: f64) {
    for step in &schedule.steps {
        if soak.clock.now() >= deadline {
            break;
        }
        tokio::time::sleep(step.before_fault).await;
        faults::inject(soak, &step.fault).await;
        tokio::time::sleep(step.after_fault).await;
    }
}

/// The pools' final state once they have settled for good, within [`FINAL_SETTLE`] of
/// `schedule_end`; else what was last wrong.
async fn final_settle(soak: &Soak, schedule_end: f64) -> Result<Vec<checks::FinalPool>, String> {
    let mut last = String::new();
    while soak.clock.now() < schedule_end + FINAL_SETTLE.as_secs_f64() {
        match checks::final_state(soak).await {
            Ok(pools) => return Ok(pools),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last)
}

/// A duplicate seen since the last status sample, or on a pool deleted since.
fn check_duplicates(soak: &Soak, settled_at: f64) {
    for (pool, stats) in soak.pools.stats() {
        if let (Some(first), false) = (&stats.first_duplicate, stats.overlap) {
            soak.violations.add(
                &format!("duplicate-{pool}"),
                settled_at,
                format!("pool {pool}: a job ran on two live pods; first seen: {first}"),
            );
        }
    }
}

/// The API server's audit log of the soak, read against the pools' workloads.
fn analyse_audit(soak: &Soak) -> audit::Audit {
    let workloads: BTreeMap<String, String> = soak
        .pools
        .defs()
        .into_values()
        .map(|d| (d.workload_name, d.config_map))
        .collect();
    audit::analyse(
        &soak.cluster.dir.join("logs/audit.log"),
        &soak.clock,
        &soak.history,
        &workloads,
        &soak.violations,
    )
}

/// Saves what the pools, pods and ConfigMaps look like, for a look after a failure.
async fn dump_state(soak: &Soak) {
    let out = soak
        .cluster
        .kubectl
        .run(&[
            "-n",
            pools::NAMESPACE,
            "get",
            "swarmpools,pods,configmaps",
            "-o",
            "yaml",
        ])
        .await;
    let path = soak.cluster.scratch.join("final-state.yaml");
    if std::fs::write(&path, out.stdout).is_ok() {
        eprintln!("soak: the final state is in {}", path.display());
    }
}

/// Both replicas answer `/readyz` (one leads, the other stands by).
async fn wait_replicas_ready(soak: &Soak) -> Result<(), String> {
    for _ in 0..120 {
        let mut ready = 0;
        for replica in &soak.replicas {
            if replica.ready(&soak.cluster.http).await {
                ready += 1;
            }
        }
        if ready == soak.replicas.len() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "the replicas did not report ready within 60 s; logs: {}",
        soak.replicas
            .iter()
            .map(|r| r.log.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Every one of `count` pools settled, before the plan starts.
async fn wait_settled(soak: &Soak, count: usize) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..180 {
        match Snapshot::read(&soak.cluster.client).await {
            Ok(snapshot) if snapshot.pools.len() == count => {
                let problems: Vec<String> = snapshot
                    .pools
                    .iter()
                    .filter_map(|p| snapshot.settled(p).err())
                    .collect();
                if problems.is_empty() {
                    return Ok(());
                }
                last = problems.join("; ");
            }
            Ok(snapshot) => last = format!("{} pools of {count}", snapshot.pools.len()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("the pools did not settle before the soak: {last}"))
}

/// A replica that keeps exiting on its own, away from any fault, is crash-looping.
fn check_crash_loop(soak: &Soak) {
    let unexplained: Vec<replicas::Exit> = soak
        .replicas
        .iter()
        .flat_map(Replica::exits)
        .filter(|e| !e.killed_by_soak && !soak.faults.near_fault(e.at, FAULT_GRACE))
        .collect();
    if unexplained.len() > CRASH_LOOP_EXITS {
        soak.violations.add(
            "crash-loop",
            unexplained[CRASH_LOOP_EXITS].at,
            format!(
                "crash loop: {} exits away from any fault: {}",
                unexplained.len(),
                unexplained
                    .iter()
                    .map(|e| format!("{} at {:.0}s ({})", e.replica, e.at, e.status))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
}
