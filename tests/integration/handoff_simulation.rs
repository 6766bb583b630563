//! A deterministic simulation of the operator's decisions, in the spirit of FoundationDB's
//! simulation testing: the real pure planner, driven the way the controller drives it, against
//! a model cluster (StatefulSet controller, pods that start late and terminate slowly, the
//! ConfigMap), under random schedules of faults and user changes:
//!
//! - the operator's pod cache lags behind, loses events until a relist, or is fresh;
//! - the operator crashes after any of its writes and restarts with empty memory;
//! - pods are deleted by hand, vanish with their node, or restart their worker process (which
//!   re-reads the mounted file);
//! - the StatefulSet is scaled and jobs are added, removed and re-added, also mid-handoff;
//! - for a Deployment pool: rollout restarts, pods replaced under new names, and workers that
//!   wait for their entry and read it again when the kubelet refreshes the mounted file;
//! - under `rollout.policy: Acknowledge`: workers whose ConfigMap watch delivers late, that write
//!   their Lease late, for a version older than the config's, or never (a 6 s ackTimeoutSeconds,
//!   168 s under Lease faults, then deletes their pod), and terminating workers that keep
//!   running what their entry still lists;
//! - under Lease faults, with the default timings (a 40 s Lease, fenced 32 s after the worker
//!   sent its last renewal, expired after 42 s on the operator's clock): every worker process
//!   and the operator run on their own clock, each drifting within 10% of real time; workers
//!   renew their Lease and fence themselves with the worker library's own fence; processes are
//!   paused (SIGSTOP) and resumed, and cut off from the API server and reconnected; the
//!   operator's Lease watch stalls without an error; up to 25 s pass between steps, to the
//!   millisecond, so expiries and fences interleave at any point.
//!
//! After every step: under `Exclusive` no job runs on two live pod instances; the config version
//! never goes down; no pod instance is deleted twice. Once the changes stop, the pool settles
//! within a bounded number of steps with every job held by exactly one running worker.
//!
//! Schedules come from proptest with a fixed seed, so every run is the same; a failure prints
//! the seed and the shortest schedule proptest finds. `SWARM_SIM_SCHEDULES=N` runs N schedules
//! per mode (default 2000), `SWARM_SIM_SEED=<u64>` another seed; `SWARM_SIM_TRACE=1` prints
//! every settling step of the schedules run.

#[path = "handoff_simulation/cluster.rs"]
mod cluster;
#[path = "handoff_simulation/operator.rs"]
mod operator;
#[path = "handoff_simulation/process.rs"]
mod process;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::Instant;
use swarm_assign::Qos;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use swarm_operator::api::crd::{
    Handoff, RolloutPolicy, RolloutSpec, SwarmPool, SwarmPoolSpec, WorkloadKind,
};

use cluster::{Cluster, Kind, NS, labels};
use operator::{Operator, Record};

use super::fixtures;

/// Jobs a schedule can name: the pool starts with the first few.
const JOB_NAMES: usize = 8;
/// Steps of fair scheduling (relist, reconcile, time) the pool gets to settle after the last
/// change; each step lets at least one paced refresh happen and one grace period run down.
/// Under Lease faults settling waits for no Lease to expire (42 s) and no acknowledgement to
/// time out: every fault ends before it, and every worker renews, reads and acknowledges each
/// step, so a fenced worker runs again within two steps. Over 2000 schedules per mode pools
/// settle within 18 steps (15 under Lease faults); the bound leaves room for rarer schedules.
const SETTLE_STEPS: usize = 80;

/// One step of a schedule.
#[derive(Clone, Debug)]
enum Step {
    /// One second passes: pods start, grace periods run down, the StatefulSet controller acts.
    Tick,
    /// The operator reconciles; with `Some(k)` it crashes after its k-th write.
    Reconcile(Option<usize>),
    /// The watch delivers the pending events of the pods whose ordinal is in the mask.
    Deliver(u8),
    /// The watch relists: the cache is fresh.
    Relist,
    /// `kubectl scale statefulset --replicas`.
    Scale(usize),
    /// A job of [`JOB_NAMES`] is added to the spec (if absent).
    AddJob(usize),
    /// A job is removed from the spec (if present).
    RemoveJob(usize),
    /// `kubectl delete pod` of an ordinal.
    DeletePod(usize),
    /// A pod vanishes with its node.
    LosePod(usize),
    /// A worker process restarts in its pod and reads the mounted file again.
    RestartContainer(usize),
    /// `kubectl rollout restart` of a Deployment.
    RolloutRestart,
    /// The kubelet refreshes the mounted file of the pods in the mask (a Deployment's waiting
    /// workers read their entry again).
    RefreshMounts(u8),
    /// Under `Acknowledge`: the ConfigMap watch of the workers in the mask delivers; each
    /// applies its entry of the current version.
    Sync(u8),
    /// Under `Acknowledge`: the workers in the mask write their Lease with the version they
    /// run (late, for an older version, or never, as the schedule has it).
    Ack(u8),
    /// Under Lease faults: this many milliseconds pass (each process checks its fence).
    Elapse(u64),
    /// Under Lease faults: SIGSTOP of the worker process of a pod.
    Pause(usize),
    /// Under Lease faults: SIGCONT of the worker process of a pod.
    Resume(usize),
    /// Under Lease faults: the worker process of a pod loses the API server.
    Partition(usize),
    /// Under Lease faults: it reaches the API server again.
    Heal(usize),
    /// Under Lease faults: the operator's Lease watch stalls (until the next relist).
    StallLeaseWatch,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Tick),
        4 => prop::option::weighted(0.2, 0..4usize).prop_map(Step::Reconcile),
        2 => any::<u8>().prop_map(Step::Deliver),
        1 => Just(Step::Relist),
        1 => (0..6usize).prop_map(Step::Scale),
        1 => (0..JOB_NAMES).prop_map(Step::AddJob),
        1 => (0..JOB_NAMES).prop_map(Step::RemoveJob),
        1 => (0..5usize).prop_map(Step::DeletePod),
        1 => (0..5usize).prop_map(Step::LosePod),
        1 => (0..5usize).prop_map(Step::RestartContainer),
    ]
}

/// The steps of an acknowledging pool's schedule: those of `steps`, and workers that read the
/// ConfigMap and write their Lease, each when the mask says.
fn acknowledging_step(steps: impl Strategy<Value = Step>) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => steps,
        3 => any::<u8>().prop_map(Step::Sync),
        3 => any::<u8>().prop_map(Step::Ack),
    ]
}

/// The steps of a Deployment pool's schedule: those of a StatefulSet's, rollout restarts and
/// mount refreshes.
fn deployment_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => step(),
        1 => Just(Step::RolloutRestart),
        3 => any::<u8>().prop_map(Step::RefreshMounts),
    ]
}

fn deployment_schedule() -> impl Strategy<Value = Schedule> {
    (
        1..5usize,
        1..=JOB_NAMES,
        1..3u8,
        prop::collection::vec(deployment_step(), 0..40),
    )
        .prop_map(|(replicas, jobs, max_unavailable, steps)| Schedule {
            replicas,
            jobs,
            max_unavailable,
            steps,
        })
}

/// A whole schedule: the starting pool and the steps.
#[derive(Clone, Debug)]
struct Schedule {
    replicas: usize,
    jobs: usize,
    max_unavailable: u8,
    steps: Vec<Step>,
}

/// The steps of a schedule under Lease faults: those of an acknowledging pool, time passing
/// between ticks, paused and partitioned workers, and a stalling Lease watch.
fn lease_fault_step(kind: Kind) -> impl Strategy<Value = Step> {
    let steps = match kind {
        Kind::StatefulSet => acknowledging_step(step()).boxed(),
        Kind::Deployment => acknowledging_step(deployment_step()).boxed(),
    };
    prop_oneof![
        12 => steps,
        4 => (1..25_000u64).prop_map(Step::Elapse),
        2 => (0..5usize).prop_map(Step::Pause),
        1 => (0..5usize).prop_map(Step::Resume),
        1 => (0..5usize).prop_map(Step::Partition),
        1 => (0..5usize).prop_map(Step::Heal),
        2 => Just(Step::StallLeaseWatch),
    ]
}

fn lease_fault_schedule(kind: Kind) -> impl Strategy<Value = Schedule> {
    (
        1..5usize,
        1..=JOB_NAMES,
        1..3u8,
        prop::collection::vec(lease_fault_step(kind), 0..96),
    )
        .prop_map(|(replicas, jobs, max_unavailable, steps)| Schedule {
            replicas,
            jobs,
            max_unavailable,
            steps,
        })
}

fn acknowledging_schedule(kind: Kind) -> impl Strategy<Value = Schedule> {
    let steps = match kind {
        Kind::StatefulSet => acknowledging_step(step()).boxed(),
        Kind::Deployment => acknowledging_step(deployment_step()).boxed(),
    };
    (
        1..5usize,
        1..=JOB_NAMES,
        1..3u8,
        prop::collection::vec(steps, 0..48),
    )
        .prop_map(|(replicas, jobs, max_unavailable, steps)| Schedule {
            replicas,
            jobs,
            max_unavailable,
            steps,
        })
}

fn schedule() -> impl Strategy<Value = Schedule> {
    (
        1..5usize,
        1..=JOB_NAMES,
        1..3u8,
        prop::collection::vec(step(), 0..40),
    )
        .prop_map(|(replicas, jobs, max_unavailable, steps)| Schedule {
            replicas,
            jobs,
            max_unavailable,
            steps,
        })
}

/// A change to `spec.qos` between two steps.
#[derive(Clone, Debug)]
enum QosEdit {
    /// Gives a job of [`JOB_NAMES`] a weight (if the job is in the spec).
    Weigh(usize, u64),
    /// Makes a job dedicated, last in the list (if in the spec and not yet dedicated).
    Dedicate(usize),
    /// Makes a dedicated job shared again.
    Share(usize),
}

/// A schedule for a pool with `spec.qos`: its starting dedicated jobs and weights, and the qos
/// edits made before given steps.
#[derive(Clone, Debug)]
struct QosSchedule {
    schedule: Schedule,
    dedicated: Vec<usize>,
    weights: Vec<(usize, u64)>,
    edits: Vec<(usize, QosEdit)>,
}

fn qos_edit() -> impl Strategy<Value = QosEdit> {
    prop_oneof![
        2 => (0..JOB_NAMES, 1..6u64).prop_map(|(job, weight)| QosEdit::Weigh(job, weight)),
        1 => (0..JOB_NAMES).prop_map(QosEdit::Dedicate),
        1 => (0..JOB_NAMES).prop_map(QosEdit::Share),
    ]
}

fn qos_schedule() -> impl Strategy<Value = QosSchedule> {
    (
        schedule(),
        prop::collection::vec(0..JOB_NAMES, 0..3),
        prop::collection::vec((0..JOB_NAMES, 1..6u64), 0..5),
        prop::collection::vec((0..40usize, qos_edit()), 0..6),
    )
        .prop_map(|(schedule, dedicated, weights, edits)| QosSchedule {
            schedule,
            dedicated,
            weights,
            edits,
        })
}

/// Applies a qos edit to the pool; edits naming jobs outside the spec do nothing.
fn edit_qos(edit: &QosEdit, pool: &mut SwarmPool) {
    let listed = |index: usize| pool.spec.jobs.contains(&job(index));
    let qos = pool.spec.qos.get_or_insert_with(Qos::default);
    match *edit {
        QosEdit::Weigh(index, weight) if listed(index) => {
            qos.weights.insert(job(index), weight);
        }
        QosEdit::Dedicate(index) if listed(index) && !qos.dedicated.contains(&job(index)) => {
            qos.dedicated.push(job(index));
        }
        QosEdit::Share(index) => qos.dedicated.retain(|j| *j != job(index)),
        _ => return,
    }
    bump_generation(pool);
}

/// Drops qos entries of jobs no longer in the spec, as a user removing a job would.
fn prune_qos(pool: &mut SwarmPool) {
    let jobs = pool.spec.jobs.clone();
    if let Some(qos) = pool.spec.qos.as_mut() {
        qos.dedicated.retain(|j| jobs.contains(j));
        qos.weights.retain(|j, _| jobs.contains(j));
    }
}

fn job(index: usize) -> String {
    format!("stream:{index}")
}

fn pool(jobs: usize, mode: Handoff, max_unavailable: u8) -> SwarmPool {
    let spec = SwarmPoolSpec {
        rollout: RolloutSpec {
            handoff: mode,
            max_unavailable: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(
                max_unavailable.into(),
            ),
            ..RolloutSpec::default()
        },
        ..fixtures::pool_spec(labels(), (0..jobs).map(job).collect(), "pool-config")
    };
    fixtures::pool(NS, "pool", spec)
}

/// Runs one schedule, checking the invariants after every step: with `exclusive`, that no job
/// runs on two live pods.
fn run(schedule: &Schedule, mode: Handoff, exclusive: bool) -> Result<Stats, String> {
    run_with_qos(
        schedule,
        Kind::StatefulSet,
        None,
        &[],
        mode,
        exclusive,
        None,
    )
}

/// A pool under `rollout.policy: Acknowledge`.
#[derive(Clone, Copy, Debug, Default)]
struct Acknowledging {
    /// Added to every acknowledged version the operator reads (0: the real protocol).
    ack_skew: u64,
    /// Lease faults: drifting clocks, expiry, fencing, pauses, partitions (see [`Step`]).
    lease_faults: bool,
    /// Under Lease faults, a deliberately wrong worker that never fences itself.
    unfenced: bool,
    /// Under Lease faults, a deliberately wrong worker process whose start counts as a renewal:
    /// it runs its entry before its first Lease write.
    starts_live: bool,
    /// Under Lease faults, a deliberately wrong operator whose live Lease reads return its
    /// cache.
    trusts_lease_cache: bool,
}

/// `spec.rollout.ackTimeoutSeconds` of the simulated pools: short, so that schedules where
/// workers rarely acknowledge exercise the fallback deletes.
const ACK_TIMEOUT_SECONDS: i64 = 6;

/// `spec.rollout.ackTimeoutSeconds` under Lease faults: four times a Lease's expiry (168 s), so
/// that a worker that stops acknowledging has its Lease expire long before its pod is deleted
/// for it (with 24 s, ten times as many pods were deleted and fewer Leases expired), while
/// schedules that run long still see the fallback deletes. Settling needs neither: every worker renews every step.
const LEASE_FAULT_ACK_TIMEOUT_SECONDS: i64 =
    4 * (process::LEASE_DURATION.as_secs() as i64 + process::LEASE_GRACE_SECONDS);

/// [`run`] for a pool that starts with `qos` and gets the qos `edits` before the given steps.
fn run_with_qos(
    schedule: &Schedule,
    kind: Kind,
    qos: Option<Qos>,
    edits: &[(usize, QosEdit)],
    mode: Handoff,
    exclusive: bool,
    acknowledging: Option<Acknowledging>,
) -> Result<Stats, String> {
    let mut cluster = Cluster::of(kind, schedule.replicas);
    let mut pool = pool(schedule.jobs, mode, schedule.max_unavailable);
    if kind == Kind::Deployment {
        pool.spec.workload_kind = WorkloadKind::Deployment;
    }
    pool.spec.qos = qos;
    prune_qos(&mut pool);
    if let Some(a) = acknowledging {
        pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
        // Under Lease faults, the pods of workers that fail to acknowledge are deleted less
        // often, so their Leases live long enough to expire.
        pool.spec.rollout.ack_timeout_seconds = if a.lease_faults {
            LEASE_FAULT_ACK_TIMEOUT_SECONDS
        } else {
            ACK_TIMEOUT_SECONDS
        };
        pool.spec.rollout.lease_grace_seconds = process::LEASE_GRACE_SECONDS;
        cluster.acknowledge = true;
        cluster.lease_faults = a.lease_faults;
        cluster.fencing = !a.unfenced;
        cluster.starts_live = a.starts_live;
    }
    let mut operator = Operator::start(pool, &cluster);
    let acknowledging = acknowledging.unwrap_or_default();
    operator.ack_skew = acknowledging.ack_skew;
    operator.trusts_lease_cache = acknowledging.trusts_lease_cache;
    // The operator's clock drifts too: how far, the schedule's length picks.
    operator.clock_rate = process::rate(schedule.steps.len() as u64);
    let mut record = Record::default();
    let mut stats = Stats::default();
    for (i, step) in schedule.steps.iter().enumerate() {
        for (_, edit) in edits.iter().filter(|(at, _)| *at == i) {
            edit_qos(edit, &mut operator.pool);
        }
        apply(step, &mut cluster, &mut operator, &mut record);
        prune_qos(&mut operator.pool);
        check(&cluster, &record, exclusive)
            .map_err(|e| format!("after step {i} ({step:?}): {e}"))?;
    }
    cluster.heal();
    check(&cluster, &record, exclusive).map_err(|e| format!("healing: {e}"))?;
    for settle in 0..SETTLE_STEPS {
        operator.relist(&cluster);
        let phase = operator.reconcile(&mut cluster, &mut record, None);
        check(&cluster, &record, exclusive).map_err(|e| format!("settling, step {settle}: {e}"))?;
        // Without replicas the pool settles Degraded, every job unassigned; so it does while
        // dedicated jobs wait for workers.
        let unmet = operator.pool.spec.qos.as_ref().is_some_and(|qos| {
            qos.dedicated.len() > dedicated_room(&operator.pool, cluster.replicas)
        });
        let at_rest = if cluster.replicas == 0 || unmet {
            "Degraded"
        } else {
            "Balanced"
        };
        if std::env::var_os("SWARM_SIM_TRACE").is_some() {
            eprintln!("settle {settle}: {phase:?} leases {:?}", cluster.leases);
            for p in &cluster.pods {
                eprintln!(
                    "  {} {} runs {:?} applied {:?} fence live {:?} gone {:?}",
                    p.name(),
                    p.uid,
                    p.runs,
                    p.applied,
                    p.process.as_ref().map(|p| p.fence.is_live()),
                    p.gone_at
                );
            }
        }
        if phase.as_deref() == Some(at_rest) && settled(&cluster, &operator).is_ok() {
            stats.settle_steps = settle;
            stats.restarts = record.deletes.values().sum();
            stats.expiries = record.expiries;
            stats.unsettled = record.unsettled;
            return Ok(stats);
        }
        cluster.tick();
        cluster.refresh_all_mounts();
        cluster.sync_and_ack_all();
        check(&cluster, &record, exclusive).map_err(|e| format!("settling, step {settle}: {e}"))?;
    }
    let status = operator.pool.status.as_ref();
    Err(format!(
        "not settled {SETTLE_STEPS} steps after the last change: {}; status: {:?}",
        settled(&cluster, &operator)
            .err()
            .unwrap_or_else(|| "status not Balanced".into()),
        status.map(|s| (
            &s.phase,
            &s.stale_workers,
            &s.expired_workers,
            &s.conditions
        )),
    ))
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    settle_steps: usize,
    restarts: usize,
    expiries: usize,
    unsettled: usize,
}

fn apply(step: &Step, cluster: &mut Cluster, operator: &mut Operator, record: &mut Record) {
    let jobs = &mut operator.pool.spec.jobs;
    match *step {
        Step::Tick => cluster.tick(),
        Step::Reconcile(crash_after) => {
            operator.reconcile(cluster, record, crash_after);
        }
        Step::Deliver(mask) => operator.deliver(cluster, mask),
        Step::Relist => operator.relist(cluster),
        Step::Scale(replicas) => cluster.replicas = replicas,
        Step::AddJob(index) => {
            if !jobs.contains(&job(index)) {
                jobs.push(job(index));
                bump_generation(&mut operator.pool);
            }
        }
        Step::RemoveJob(index) => {
            if jobs.contains(&job(index)) {
                jobs.retain(|j| *j != job(index));
                bump_generation(&mut operator.pool);
            }
        }
        Step::DeletePod(index) => {
            if let Some(uid) = cluster.pod_at(index).map(|p| p.uid.clone()) {
                cluster.delete(&uid);
            }
        }
        Step::LosePod(index) => cluster.lose(index),
        Step::RestartContainer(index) => cluster.restart_container(index),
        Step::RolloutRestart => cluster.rollout_restart(),
        Step::RefreshMounts(mask) => cluster.refresh_mounts(mask),
        Step::Sync(mask) => cluster.sync(mask),
        Step::Ack(mask) => cluster.ack(mask),
        Step::Elapse(ms) => cluster.elapse(ms),
        Step::Pause(index) => cluster.pause(index),
        Step::Resume(index) => cluster.resume(index),
        Step::Partition(index) => cluster.partition(index, true),
        Step::Heal(index) => cluster.partition(index, false),
        Step::StallLeaseWatch => operator.leases_stalled = true,
    }
}

fn bump_generation(pool: &mut SwarmPool) {
    let generation = pool.metadata.generation.unwrap_or(1);
    pool.metadata.generation = Some(generation + 1);
}

/// The invariants that hold after every step.
fn check(cluster: &Cluster, record: &Record, exclusive: bool) -> Result<(), String> {
    if exclusive {
        for (job, pods) in cluster.holders() {
            if pods.len() > 1 {
                let who: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{} ({})", p.name(), p.uid))
                    .collect();
                return Err(format!(
                    "job {job} runs on {} live pods: {}",
                    pods.len(),
                    who.join(", ")
                ));
            }
        }
    }
    if let Some(uid) = record
        .deletes
        .iter()
        .find(|(_, n)| **n > 1)
        .map(|(uid, _)| uid)
    {
        return Err(format!(
            "pod instance {uid} deleted {} times",
            record.deletes[uid]
        ));
    }
    if let Some(pair) = record.versions.windows(2).find(|w| w[1] < w[0]) {
        return Err(format!(
            "config version went down: {} -> {}",
            pair[0], pair[1]
        ));
    }
    Ok(())
}

/// Whether the pool has settled: the ConfigMap gives every job to exactly one of the N workers
/// with nothing in transit, and exactly the N workers run, each exactly its entry; every
/// dedicated job that has room runs alone.
fn settled(cluster: &Cluster, operator: &Operator) -> Result<(), String> {
    let config = cluster.config().ok_or("no config")?;
    if let Some(qos) = &operator.pool.spec.qos {
        let room = dedicated_room(&operator.pool, cluster.replicas);
        for dedicated in qos.dedicated.iter().take(room) {
            let alone = config
                .workloads()
                .any(|(_, w)| w.jobs.as_slice() == std::slice::from_ref(dedicated));
            if !alone {
                return Err(format!("dedicated job {dedicated} does not run alone"));
            }
        }
    }
    if config.transit().count() > 0 {
        return Err("jobs still in transit".into());
    }
    let workers: Vec<String> = match cluster.kind {
        Kind::StatefulSet => (0..cluster.replicas)
            .map(|i| format!("{}-{i}", cluster::STS))
            .collect(),
        // Every live pod of the Deployment, in the config's (name) order.
        Kind::Deployment => {
            let mut live: Vec<String> = cluster.pods.iter().map(|p| p.name()).collect();
            live.sort();
            live
        }
    };
    let mut pods: Vec<&str> = config.workloads().map(|(pod, _)| pod).collect();
    pods.sort_unstable();
    if pods != workers {
        return Err(format!("config names {pods:?}, want {workers:?}"));
    }
    if cluster.kind == Kind::Deployment && cluster.replicas > 0 {
        let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
        let (min, max) = (loads.iter().min(), loads.iter().max());
        if operator.pool.spec.qos.is_none() && max.zip(min).is_some_and(|(max, min)| max - min > 1)
        {
            return Err(format!("unbalanced over the slots: {loads:?}"));
        }
    }
    let mut held: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    held.sort();
    let mut spec: Vec<&String> = operator.pool.spec.jobs.iter().collect();
    spec.sort();
    if cluster.replicas == 0 {
        spec.clear();
    }
    if held != spec {
        return Err(format!("config holds {held:?}, spec has {spec:?}"));
    }
    if cluster.pods.len() != cluster.replicas {
        return Err(format!(
            "{} pods for {} replicas",
            cluster.pods.len(),
            cluster.replicas
        ));
    }
    for pod in &cluster.pods {
        let want: BTreeSet<String> = config
            .workload(&pod.name())
            .map(|w| w.jobs.iter().cloned().collect())
            .unwrap_or_default();
        if pod.gone_at.is_some() || pod.runs.as_ref() != Some(&want) {
            return Err(format!(
                "{} runs {:?}, its entry says {want:?}",
                pod.name(),
                pod.runs
            ));
        }
    }
    Ok(())
}

/// How many dedicated jobs get a worker of their own: one worker stays shared while some job,
/// dedicated or not, has to be shared.
fn dedicated_room(pool: &SwarmPool, replicas: usize) -> usize {
    let dedicated = pool.spec.qos.as_ref().map_or(0, |qos| qos.dedicated.len());
    let shared = pool.spec.jobs.len() - dedicated;
    if shared == 0 && dedicated <= replicas {
        dedicated
    } else {
        replicas.saturating_sub(1)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A runner with the configured number of schedules (at least `min_cases`) and seed: every run
/// is the same.
fn runner(min_cases: u32) -> (TestRunner, u32, u64) {
    let cases = (env_number("SWARM_SIM_SCHEDULES", 2000) as u32).max(min_cases);
    let seed = env_number("SWARM_SIM_SEED", 0x5eed_0007);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..Config::default()
    };
    let runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    (runner, cases, seed)
}

/// Statistics over the schedules of one simulation.
#[derive(Default)]
struct Totals {
    settle_max: Cell<usize>,
    restarts: Cell<usize>,
    expiries: Cell<usize>,
    unsettled: Cell<usize>,
}

impl Totals {
    fn add(&self, stats: Stats) {
        self.settle_max
            .set(self.settle_max.get().max(stats.settle_steps));
        self.restarts.set(self.restarts.get() + stats.restarts);
        self.expiries.set(self.expiries.get() + stats.expiries);
        self.unsettled.set(self.unsettled.get() + stats.unsettled);
    }
}

/// Runs `schedules` through `run_one`; the error carries the seed and the shortest failing
/// schedule.
fn simulate_with<S: Strategy>(
    label: &str,
    schedules: S,
    min_cases: u32,
    run_one: impl Fn(&S::Value) -> Result<Stats, String>,
) -> Result<String, String>
where
    S::Value: std::fmt::Debug,
{
    let (mut runner, cases, seed) = runner(min_cases);
    let started = Instant::now();
    let totals = Totals::default();
    let result = runner.run(&schedules, |schedule| {
        totals.add(run_one(&schedule).map_err(TestCaseError::fail)?);
        Ok(())
    });
    match result {
        Ok(()) => Ok(format!(
            "{label}: {cases} schedules in {:.1}s, seed {seed}; settled within {} steps; {} pod deletions; {} reconciles found a Lease expired; {} reconciles did not settle within their rounds",
            started.elapsed().as_secs_f64(),
            totals.settle_max.get(),
            totals.restarts.get(),
            totals.expiries.get(),
            totals.unsettled.get(),
        )),
        Err(TestError::Fail(reason, schedule)) => Err(format!(
            "{label}: a schedule fails (SWARM_SIM_SEED={seed}, {cases} schedules): {reason}\nshortest failing schedule: {schedule:#?}"
        )),
        Err(TestError::Abort(reason)) => Err(format!("{label}: aborted: {reason}")),
    }
}

/// Runs the schedules of one mode, checking exclusivity if `exclusive`.
fn simulate(mode: Handoff, exclusive: bool) -> Result<String, String> {
    simulate_with(&format!("{mode:?}"), schedule(), 0, |schedule| {
        run(schedule, mode, exclusive)
    })
}

/// Runs schedules of a pool with dedicated and weighted jobs under the `Exclusive` handoff,
/// checking exclusivity.
fn simulate_qos() -> Result<String, String> {
    simulate_with("Exclusive with qos", qos_schedule(), 0, |s| {
        let mut dedicated: Vec<String> = Vec::new();
        for index in &s.dedicated {
            if !dedicated.contains(&job(*index)) {
                dedicated.push(job(*index));
            }
        }
        let qos = Qos {
            dedicated,
            weights: s.weights.iter().map(|&(i, w)| (job(i), w)).collect(),
        };
        run_with_qos(
            &s.schedule,
            Kind::StatefulSet,
            Some(qos),
            &s.edits,
            Handoff::Exclusive,
            true,
            None,
        )
    })
}

/// Runs schedules of a Deployment pool (rollout restarts, pods replaced under new names,
/// waiting workers) under the handoff `mode`, checking exclusivity if `exclusive`.
fn simulate_deployment(mode: Handoff, exclusive: bool) -> Result<String, String> {
    let name = format!("{mode:?} over a Deployment");
    simulate_with(&name, deployment_schedule(), 0, |s| {
        run_with_qos(s, Kind::Deployment, None, &[], mode, exclusive, None)
    })
}

/// Runs schedules of a pool of `kind` under `rollout.policy: Acknowledge` and the handoff
/// `mode`, with workers that read the ConfigMap and acknowledge late, for older versions, or
/// never; checking exclusivity if `exclusive`.
fn simulate_acknowledging(
    kind: Kind,
    mode: Handoff,
    exclusive: bool,
    acknowledging: Acknowledging,
) -> Result<String, String> {
    simulate_acknowledging_at_least(kind, mode, exclusive, acknowledging, 0)
}

/// [`simulate_acknowledging`] over at least `min_schedules` schedules.
fn simulate_acknowledging_at_least(
    kind: Kind,
    mode: Handoff,
    exclusive: bool,
    acknowledging: Acknowledging,
    min_schedules: u32,
) -> Result<String, String> {
    let (name, schedules) = if acknowledging.lease_faults {
        let name = format!("{mode:?} under Acknowledge with Lease faults over a {kind:?}");
        (name, lease_fault_schedule(kind).boxed())
    } else {
        let name = format!("{mode:?} under Acknowledge over a {kind:?}");
        (name, acknowledging_schedule(kind).boxed())
    };
    simulate_with(&name, schedules, min_schedules, |s| {
        run_with_qos(s, kind, None, &[], mode, exclusive, Some(acknowledging))
    })
}

const ACKNOWLEDGING: Acknowledging = Acknowledging {
    ack_skew: 0,
    lease_faults: false,
    unfenced: false,
    starts_live: false,
    trusts_lease_cache: false,
};

const LEASE_FAULTS: Acknowledging = Acknowledging {
    lease_faults: true,
    ..ACKNOWLEDGING
};

#[test]
fn acknowledged_handoff_holds_with_drifting_clocks_paused_workers_and_partitions() {
    match simulate_acknowledging(Kind::StatefulSet, Handoff::Exclusive, true, LEASE_FAULTS) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn acknowledged_handoff_holds_over_a_deployment_with_drifting_clocks_paused_workers_and_partitions()
{
    match simulate_acknowledging(Kind::Deployment, Handoff::Exclusive, true, LEASE_FAULTS) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

/// The simulation has teeth for failover: workers that keep running their jobs past their
/// Lease's expiry run moved jobs twice, and the simulation finds a schedule that shows it (the
/// 507th of the default seed: it looks through at least 2000, whatever `SWARM_SIM_SCHEDULES`
/// says; it stops at the first failure).
#[test]
fn the_simulation_catches_workers_that_do_not_fence_themselves() {
    let wrong = Acknowledging {
        unfenced: true,
        ..LEASE_FAULTS
    };
    let failure =
        simulate_acknowledging_at_least(Kind::StatefulSet, Handoff::Exclusive, true, wrong, 2000)
            .expect_err("unfenced workers run moved jobs twice");
    assert!(failure.contains("live pods"), "{failure}");
    eprintln!("{failure}");
}

/// ... and an operator that takes its Lease cache's word for an expiry (a lagging or stalled
/// watch misses renewals) hands a live worker's jobs to another. Such schedules are rarer, so
/// this looks through more of them (it stops at the first failure).
#[test]
fn the_simulation_catches_an_operator_that_trusts_its_lease_cache_for_expiry() {
    let wrong = Acknowledging {
        trusts_lease_cache: true,
        ..LEASE_FAULTS
    };
    let failure =
        simulate_acknowledging_at_least(Kind::StatefulSet, Handoff::Exclusive, true, wrong, 20_000)
            .expect_err("a stale cache expires live workers");
    assert!(failure.contains("live pods"), "{failure}");
    eprintln!("{failure}");
}

#[test]
fn acknowledged_handoff_never_runs_a_job_twice_and_settles_under_random_schedules() {
    match simulate_acknowledging(Kind::StatefulSet, Handoff::Exclusive, true, ACKNOWLEDGING) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn acknowledged_handoff_holds_over_a_deployments_slots_under_random_schedules() {
    match simulate_acknowledging(Kind::Deployment, Handoff::Exclusive, true, ACKNOWLEDGING) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn overlap_under_acknowledge_settles_under_random_schedules() {
    match simulate_acknowledging(Kind::StatefulSet, Handoff::Overlap, false, ACKNOWLEDGING) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

/// The simulation has teeth for the acknowledged handoff too: an operator that grants on the
/// acknowledgement of the version before the revoke runs moved jobs twice, and the simulation
/// finds a short schedule that shows it.
#[test]
fn the_simulation_catches_grants_on_the_acknowledgement_of_an_older_version() {
    let wrong = Acknowledging {
        ack_skew: 1,
        ..ACKNOWLEDGING
    };
    let failure = simulate_acknowledging(Kind::StatefulSet, Handoff::Exclusive, true, wrong)
        .expect_err("granting on an older acknowledgement runs moved jobs twice");
    assert!(failure.contains("live pods"), "{failure}");
    eprintln!("{failure}");
}

#[test]
fn exclusive_handoff_holds_over_a_deployments_slots_under_random_schedules() {
    match simulate_deployment(Handoff::Exclusive, true) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn overlap_handoff_settles_over_a_deployments_slots_under_random_schedules() {
    match simulate_deployment(Handoff::Overlap, false) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn exclusive_handoff_never_runs_a_job_twice_and_settles_under_random_schedules() {
    match simulate(Handoff::Exclusive, true) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn exclusive_handoff_holds_for_dedicated_and_weighted_jobs_under_random_schedules() {
    match simulate_qos() {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn overlap_handoff_settles_without_double_deletes_under_random_schedules() {
    match simulate(Handoff::Overlap, false) {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

/// The exclusivity check has teeth: the make-before-break handoff runs moved jobs twice, and
/// the simulation finds a short schedule that shows it.
#[test]
fn the_simulation_catches_the_duplicates_of_the_overlap_handoff() {
    let failure = simulate(Handoff::Overlap, true).expect_err("Overlap runs moved jobs twice");
    assert!(failure.contains("live pods"), "{failure}");
    eprintln!("{failure}");
}

/// A worker process that restarts in its pod (same uid) while its Lease is about to expire: the
/// operator cannot tell its start from the old process's last renewal and hands the jobs away.
/// A process that starts fenced runs nothing until it has renewed and read the config again;
/// one that ran its entry at once, its start counting as a renewal, ran a moved job twice.
#[test]
fn a_restarted_worker_process_runs_nothing_before_it_has_renewed_and_read_again() {
    use Step::*;
    let mut steps = vec![Tick, Tick, Reconcile(None), Sync(255), Ack(255), Tick];
    steps.extend([
        Reconcile(None),
        Sync(255),
        Ack(255),
        Relist,
        Reconcile(None),
        Pause(0),
    ]);
    // w-0 is paused for 36 s while w-1 keeps renewing every 9 s; then w-0's container restarts,
    // before the operator can find its Lease expired (42 s on a clock within 10% of real time:
    // no sooner than 38.2 s), and the operator reconciles every 5 s, finding it expired 46 s
    // or 51 s after the pause.
    for _ in 0..4 {
        steps.extend([Elapse(9_000), Ack(0b10), Relist]);
    }
    steps.extend([RestartContainer(0), Resume(0)]);
    for _ in 0..3 {
        steps.extend([
            Elapse(5_000),
            Ack(0b10),
            Relist,
            Reconcile(None),
            Sync(0b10),
        ]);
        steps.extend([
            Ack(0b10),
            Relist,
            Reconcile(None),
            Sync(0b10),
            Reconcile(None),
        ]);
        steps.push(Sync(0b10));
    }
    let schedule = Schedule {
        replicas: 2,
        jobs: 4,
        max_unavailable: 1,
        steps,
    };
    let run = |acknowledging| {
        let kind = Kind::StatefulSet;
        run_with_qos(
            &schedule,
            kind,
            None,
            &[],
            Handoff::Exclusive,
            true,
            Some(acknowledging),
        )
    };
    let stats = run(LEASE_FAULTS).expect("0 duplicates");
    assert!(stats.expiries > 0, "w-0's Lease expired: {stats:?}");
    let starts_live = Acknowledging {
        starts_live: true,
        ..LEASE_FAULTS
    };
    let failure = run(starts_live).expect_err("a process that starts live runs a moved job");
    assert!(failure.contains("live pods"), "{failure}");
}
