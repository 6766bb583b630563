//! A deterministic simulation of the operator's decisions, in the spirit of FoundationDB's
//! simulation testing: the real pure planner, driven the way the controller drives it, against
//! a model cluster (StatefulSet controller, pods that start late and terminate slowly, the
//! ConfigMap), under random schedules of faults and user changes:
//!
//! - the operator's pod cache lags behind, loses events until a relist, or is fresh;
//! - the operator crashes after any of its writes and restarts with empty memory;
//! - pods are deleted by hand, vanish with their node, or restart their worker process (which
//!   re-reads the mounted file);
//! - the StatefulSet is scaled and jobs are added, removed and re-added, also mid-handoff.
//!
//! After every step: under `Exclusive` no job runs on two live pod instances; the config version
//! never goes down; no pod instance is deleted twice. Once the changes stop, the pool settles
//! within a bounded number of steps with every job held by exactly one running worker.
//!
//! Schedules come from proptest with a fixed seed, so every run is the same; a failure prints
//! the seed and the shortest schedule proptest finds. `SWARM_SIM_SCHEDULES=N` runs N schedules
//! per mode (default 2000), `SWARM_SIM_SEED=<u64>` another seed.

#[path = "handoff_simulation/cluster.rs"]
mod cluster;
#[path = "handoff_simulation/operator.rs"]
mod operator;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use swarm_operator::crd::{
    Handoff, RolloutSpec, Strategy as AssignStrategy, SwarmPool, SwarmPoolSpec,
};

use cluster::{Cluster, NS, labels};
use operator::{Operator, Record};

/// Jobs a schedule can name: the pool starts with the first few.
const JOB_NAMES: usize = 8;
/// Steps of fair scheduling (relist, reconcile, time) the pool gets to settle after the last
/// change; each step lets at least one paced refresh happen and one grace period run down.
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

/// A whole schedule: the starting pool and the steps.
#[derive(Clone, Debug)]
struct Schedule {
    replicas: usize,
    jobs: usize,
    max_unavailable: u8,
    steps: Vec<Step>,
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

fn job(index: usize) -> String {
    format!("stream:{index}")
}

fn pool(jobs: usize, mode: Handoff, max_unavailable: u8) -> SwarmPool {
    let mut pool = SwarmPool::new(
        "pool",
        SwarmPoolSpec {
            selector: LabelSelector {
                match_labels: Some(labels()),
                ..LabelSelector::default()
            },
            jobs: (0..jobs).map(job).collect(),
            config_map: Some("pool-config".into()),
            strategy: AssignStrategy::Sticky,
            rollout: RolloutSpec {
                handoff: mode,
                max_unavailable: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(
                    max_unavailable.into(),
                ),
                ..RolloutSpec::default()
            },
            paused: false,
        },
    );
    pool.metadata.namespace = Some(NS.into());
    pool.metadata.uid = Some("pool-uid".into());
    pool.metadata.generation = Some(1);
    pool
}

/// Runs one schedule, checking the invariants after every step: with `exclusive`, that no job
/// runs on two live pods.
fn run(schedule: &Schedule, mode: Handoff, exclusive: bool) -> Result<Stats, String> {
    let mut cluster = Cluster::new(schedule.replicas);
    let mut operator = Operator::start(
        pool(schedule.jobs, mode, schedule.max_unavailable),
        &cluster,
    );
    let mut record = Record::default();
    let mut stats = Stats::default();
    for (i, step) in schedule.steps.iter().enumerate() {
        apply(step, &mut cluster, &mut operator, &mut record);
        check(&cluster, &record, exclusive)
            .map_err(|e| format!("after step {i} ({step:?}): {e}"))?;
    }
    for settle in 0..SETTLE_STEPS {
        operator.relist(&cluster);
        let phase = operator.reconcile(&mut cluster, &mut record, None);
        check(&cluster, &record, exclusive).map_err(|e| format!("settling, step {settle}: {e}"))?;
        // Without replicas the pool settles Degraded, every job unassigned.
        let at_rest = if cluster.replicas == 0 {
            "Degraded"
        } else {
            "Balanced"
        };
        if phase.as_deref() == Some(at_rest) && settled(&cluster, &operator).is_ok() {
            stats.settle_steps = settle;
            stats.restarts = record.deletes.values().sum();
            return Ok(stats);
        }
        cluster.tick();
        check(&cluster, &record, exclusive).map_err(|e| format!("settling, step {settle}: {e}"))?;
    }
    Err(format!(
        "not settled {SETTLE_STEPS} steps after the last change: {}",
        settled(&cluster, &operator)
            .err()
            .unwrap_or_else(|| "status not Balanced".into())
    ))
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    settle_steps: usize,
    restarts: usize,
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
        Step::DeletePod(ordinal) => {
            if let Some(uid) = cluster
                .pods
                .iter()
                .find(|p| p.ordinal == ordinal)
                .map(|p| p.uid.clone())
            {
                cluster.delete(&uid);
            }
        }
        Step::LosePod(ordinal) => cluster.lose(ordinal),
        Step::RestartContainer(ordinal) => cluster.restart_container(ordinal),
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
/// with nothing in transit, and exactly the N workers run, each exactly its entry.
fn settled(cluster: &Cluster, operator: &Operator) -> Result<(), String> {
    let config = cluster.config().ok_or("no config")?;
    if config.transit().count() > 0 {
        return Err("jobs still in transit".into());
    }
    let workers: Vec<String> = (0..cluster.replicas)
        .map(|i| format!("{}-{i}", cluster::STS))
        .collect();
    let pods: Vec<&str> = config.workloads().map(|(pod, _)| pod).collect();
    if pods != workers {
        return Err(format!("config names {pods:?}, want {workers:?}"));
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

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the schedules of one mode, checking exclusivity if `exclusive`; the error carries the
/// seed and the shortest failing schedule.
fn simulate(mode: Handoff, exclusive: bool) -> Result<String, String> {
    let cases = env_number("SWARM_SIM_SCHEDULES", 2000) as u32;
    let seed = env_number("SWARM_SIM_SEED", 0x5eed_0007);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let started = Instant::now();
    let settle_max = Cell::new(0);
    let restarts = Cell::new(0);
    let result = runner.run(&schedule(), |schedule| {
        let stats = run(&schedule, mode, exclusive).map_err(TestCaseError::fail)?;
        settle_max.set(settle_max.get().max(stats.settle_steps));
        restarts.set(restarts.get() + stats.restarts);
        Ok(())
    });
    let (settle_max, restarts) = (settle_max.get(), restarts.get());
    match result {
        Ok(()) => Ok(format!(
            "{mode:?}: {cases} schedules in {:.1}s, seed {seed}; settled within {settle_max} steps; {restarts} pod deletions",
            started.elapsed().as_secs_f64()
        )),
        Err(TestError::Fail(reason, schedule)) => Err(format!(
            "{mode:?}: a schedule fails (SWARM_SIM_SEED={seed}, {cases} schedules): {reason}\nshortest failing schedule: {schedule:#?}"
        )),
        Err(TestError::Abort(reason)) => Err(format!("{mode:?}: aborted: {reason}")),
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
