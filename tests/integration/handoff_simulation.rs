//! A deterministic simulation of the operator's decisions, in the spirit of FoundationDB's
//! simulation testing: the real pure planner, driven the way the controller drives it
//! (`swarm_operator::drive`), against a model cluster (StatefulSet or Deployment controller,
//! pods that start late and terminate slowly, the ConfigMaps), under random schedules of faults
//! and user changes:
//!
//! - the operator's pod cache lags behind, loses events until a relist, or is fresh;
//! - the operator crashes after any of its writes and restarts with empty memory;
//! - pods are deleted by hand, vanish with their node, or restart their worker process;
//! - the workload is scaled and jobs are added, removed and re-added, also mid-handoff;
//! - for a Deployment pool: rollout restarts, pods replaced under new names, and workers that
//!   wait for their entry and read it again when the kubelet refreshes the mounted file.
//!
//! Under `rollout.policy: Acknowledge` every pod runs a worker process in real time, to the
//! millisecond (`events`), with the worker library's own fence (`swarm_worker::fence::Fence`):
//!
//! - each process and the operator run their monotonic clock at a rate of their own within
//!   ρ = `CLOCK_RATE_BOUND` (2 %) of real time, half of them at an extreme of it;
//! - a fence read is sent at `s` on the worker's clock, takes effect on the API server (shows
//!   the worker's ConfigMap as it is then) after a delay and is answered after another, each
//!   drawn from the schedule's seed (up to 300 ms, under faults one in eight up to 12 s); it
//!   times out after F/2; its permit runs from the send. The worker reads every F/2, retries
//!   failures 1 s apart doubling to F/8, reads at once when its watch delivers; it writes its
//!   Lease at start and to acknowledge, each write taking effect after its own delay;
//! - the operator's writes take effect and are answered at the instant of its reconcile: the
//!   revoke wait starts as early as it can, the case least favourable to the protocol;
//! - each pod's kubelet probes its worker's `/readyz` (the library's rule: the last good read
//!   sent less than 3F/5 ago) every 5 s with failureThreshold 1 and writes the pod's Ready
//!   condition only when it changes, with its lastTransitionTime; it restarts a crashed
//!   container in the same pod (same uid; the new process starts fenced) and renews its node's
//!   Lease every 10 s; pods are spread over three nodes;
//! - under faults: processes paused (SIGSTOP: the clock runs on, each permit is checked on
//!   SIGCONT before any job works), workers cut off from the API server (requests refused, or
//!   hanging until their timeout), nodes cut off (no node Lease renewal, no probe or status
//!   write; with or without their workers' own API access), the API server cut from etcd
//!   (every request hangs until it heals; the operator's reconciles fail), the operator's
//!   Lease watches stalled, and failovers to another operator replica (empty revoke log, its
//!   own clock). Up to 25 s pass in one step, so permits, probes, waits and node silences
//!   interleave at any point.
//!
//! Checks after every event of real time: under `Exclusive` no job does work (holds a valid
//! permit, in a process not stopped) on two pod instances at once: 0 duplicated milliseconds;
//! after every step: the config version never goes down and no pod instance is deleted twice.
//! Liveness: once the faults end, the pool settles (every job held by exactly one running
//! worker, exactly its entry) within 80 steps (150 s under `Acknowledge`); and under faults a
//! failover probe follows: on the settled pool one worker is paused, cut off (refused or
//! hanging) or loses its node, and its jobs must run on another member within the bound of
//! docs/worker-protocol.md's failover table (44 s, 60 s, 55 s; one more second for the
//! simulated operator's reconcile cadence); then the pool settles again.
//!
//! Planted bugs, switched on through what the simulation models or feeds the operator (never in
//! `src/`), show that the checks have teeth: each test asserts the simulation finds a
//! duplicate, or misses the failover bound, within a given number of schedules.
//!
//! Schedules come from proptest with a fixed seed, so every run is the same; a failure prints
//! the seed and the shortest schedule proptest finds. `SWARM_SIM_SCHEDULES=N` runs N schedules
//! per mode (default 2000; 500 for the two modes under faults, whose schedules are longer and
//! each end with a failover probe), `SWARM_SIM_SEED=<u64>` another seed; `SWARM_SIM_TRACE=1`
//! prints every settling step of the schedules run. Each of the ten modes runs its number, so
//! `SWARM_SIM_SCHEDULES=2000` runs 20,000 schedules.

#[path = "handoff_simulation/cluster.rs"]
mod cluster;
#[path = "handoff_simulation/events.rs"]
mod events;
#[path = "handoff_simulation/operator.rs"]
mod operator;
#[path = "handoff_simulation/process.rs"]
mod process;
#[path = "handoff_simulation/run.rs"]
mod run;
#[path = "handoff_simulation/schedule.rs"]
mod schedule;

use std::cell::Cell;
use std::time::{Duration, Instant};
use swarm_assign::Qos;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use swarm_operator::api::crd::Handoff;

use cluster::Kind;
use operator::OperatorBugs;
use process::WorkerBugs;
use run::{Acknowledging, Stats};
use schedule::{Probe, Schedule, Step, job};

/// A deliberately wrong worker or operator, planted in the model: each must be caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// (a) A worker renews its permit from its watch's cache, not a quorum read.
    CachedRead,
    /// (b) A worker counts a read's permit from its answer, not its send.
    PermitFromAnswer,
    /// (c) The operator's revoke waits run on a clock fed three times too fast.
    ShortRevokeWait,
    /// (d) A new operator process counts each wait from before its own start.
    TakeoverKeepsWaits,
    /// (e) A worker answers ready while fenced: its pod never leaves the pool.
    ReadyWhileFenced,
    /// The operator grants on the acknowledgement of the version before the revoke.
    OlderAck,
}

impl Bug {
    fn planted(self, mut a: Acknowledging) -> Acknowledging {
        match self {
            Bug::CachedRead => a.workers.cached_read = true,
            Bug::PermitFromAnswer => a.workers.permit_from_answer = true,
            Bug::ReadyWhileFenced => a.workers.ready_while_fenced = true,
            Bug::ShortRevokeWait => a.operator.short_revoke_wait = true,
            Bug::TakeoverKeepsWaits => a.operator.takeover_keeps_waits = true,
            Bug::OlderAck => a.operator.ack_skew = 1,
        }
        a
    }
}

const ACKNOWLEDGING: Acknowledging = Acknowledging {
    faults: false,
    workers: WorkerBugs {
        cached_read: false,
        permit_from_answer: false,
        ready_while_fenced: false,
    },
    operator: OperatorBugs {
        ack_skew: 0,
        short_revoke_wait: false,
        takeover_keeps_waits: false,
    },
};

const FAULTS: Acknowledging = Acknowledging {
    faults: true,
    ..ACKNOWLEDGING
};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A runner over the configured number of schedules (`default` unless `SWARM_SIM_SCHEDULES`
/// says, at least `min_cases`) and seed: every run is the same.
fn runner(default: u64, min_cases: u32, shrink: u32) -> (TestRunner, u32, u64) {
    let cases = (env_number("SWARM_SIM_SCHEDULES", default) as u32).max(min_cases);
    let seed = env_number("SWARM_SIM_SEED", 0x5eed_0007);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: shrink,
        max_shrink_time: 120_000,
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
    runs: Cell<usize>,
    first_failure: Cell<Option<usize>>,
    settle_max: Cell<usize>,
    restarts: Cell<usize>,
    unavailable: Cell<usize>,
    unsettled: Cell<usize>,
    /// The slowest failover of each probe: pause, cut off, node.
    failover: [Cell<Option<Duration>>; 3],
}

impl Totals {
    fn add(&self, stats: &Result<Stats, String>) {
        self.runs.set(self.runs.get() + 1);
        let Ok(stats) = stats else {
            if self.first_failure.get().is_none() {
                self.first_failure.set(Some(self.runs.get()));
            }
            return;
        };
        self.settle_max.set(self.settle_max.get().max(stats.settle));
        self.restarts.set(self.restarts.get() + stats.restarts);
        self.unavailable
            .set(self.unavailable.get() + stats.unavailable);
        self.unsettled.set(self.unsettled.get() + stats.unsettled);
        if let Some((probe, took)) = stats.failover {
            let slot = &self.failover[match probe {
                Probe::Pause => 0,
                Probe::Cut(_) => 1,
                Probe::Node => 2,
            }];
            slot.set(Some(slot.get().map_or(took, |t| t.max(took))));
        }
    }

    fn summary(&self) -> String {
        let failover: Vec<String> = ["pause", "cut off", "node"]
            .iter()
            .zip(&self.failover)
            .filter_map(|(name, t)| Some(format!("{name} {:.1}s", t.get()?.as_secs_f64())))
            .collect();
        format!(
            "settled within {} steps; {} pod deletions; {} reconciles found a worker out of the pool; {} reconciles did not settle within their rounds; slowest failover: [{}]",
            self.settle_max.get(),
            self.restarts.get(),
            self.unavailable.get(),
            self.unsettled.get(),
            failover.join(", "),
        )
    }
}

/// How a simulation runs: its name, how many schedules by default (at least how many), and
/// how hard proptest shrinks a failure.
struct Plan<'a> {
    label: &'a str,
    default: u64,
    min_cases: u32,
    shrink: u32,
}

/// Runs `schedules` through `run_one`; the error carries the seed, the number of the first
/// failing schedule and the shortest failing schedule.
fn simulate_with<S: Strategy>(
    plan: Plan,
    schedules: S,
    run_one: impl Fn(&S::Value) -> Result<Stats, String>,
) -> Result<String, String>
where
    S::Value: std::fmt::Debug,
{
    let (mut runner, cases, seed) = runner(plan.default, plan.min_cases, plan.shrink);
    let started = Instant::now();
    let totals = Totals::default();
    let result = runner.run(&schedules, |schedule| {
        let stats = run_one(&schedule);
        totals.add(&stats);
        stats.map(drop).map_err(TestCaseError::fail)
    });
    let label = plan.label;
    let elapsed = started.elapsed().as_secs_f64();
    match result {
        Ok(()) => Ok(format!(
            "{label}: {cases} schedules in {elapsed:.1}s, seed {seed}; {}",
            totals.summary()
        )),
        Err(TestError::Fail(reason, schedule)) => Err(format!(
            "{label}: schedule {} of {cases} fails (SWARM_SIM_SEED={seed}, {elapsed:.1}s): {reason}\nshortest failing schedule: {schedule:#?}",
            totals.first_failure.get().unwrap_or(0)
        )),
        Err(TestError::Abort(reason)) => Err(format!("{label}: aborted: {reason}")),
    }
}

fn run(schedule: &Schedule, kind: Kind, mode: Handoff, exclusive: bool) -> Result<Stats, String> {
    run::run(schedule, kind, None, &[], mode, exclusive, None)
}

/// Runs the schedules of one mode over a StatefulSet, checking exclusivity if `exclusive`.
fn simulate(mode: Handoff, exclusive: bool) -> Result<String, String> {
    let label = format!("{mode:?}");
    simulate_with(plan(&label, 2000), schedule::schedule(), |s| {
        run(s, Kind::StatefulSet, mode, exclusive)
    })
}

fn plan(label: &str, default: u64) -> Plan<'_> {
    Plan {
        label,
        default,
        min_cases: 0,
        shrink: 20_000,
    }
}

/// Runs schedules of a pool with dedicated and weighted jobs under the `Exclusive` handoff,
/// checking exclusivity.
fn simulate_qos() -> Result<String, String> {
    simulate_with(
        plan("Exclusive with qos", 2000),
        schedule::qos_schedule(),
        |s| {
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
            let kind = Kind::StatefulSet;
            run::run(
                &s.schedule,
                kind,
                Some(qos),
                &s.edits,
                Handoff::Exclusive,
                true,
                None,
            )
        },
    )
}

/// Runs schedules of a Deployment pool (rollout restarts, pods replaced under new names,
/// waiting workers) under the handoff `mode`, checking exclusivity if `exclusive`.
fn simulate_deployment(mode: Handoff, exclusive: bool) -> Result<String, String> {
    let label = format!("{mode:?} over a Deployment");
    simulate_with(plan(&label, 2000), schedule::deployment_schedule(), |s| {
        run(s, Kind::Deployment, mode, exclusive)
    })
}

/// Runs schedules of a pool of `kind` under `rollout.policy: Acknowledge` and the handoff
/// `mode`, checking exclusivity if `exclusive`; under faults, fewer by default (each is longer
/// and ends with a failover probe).
fn simulate_acknowledging(
    kind: Kind,
    mode: Handoff,
    exclusive: bool,
    acknowledging: Acknowledging,
) -> Result<String, String> {
    let default = if acknowledging.faults { 500 } else { 2000 };
    let label = label(kind, mode, acknowledging);
    simulate_acknowledging_with(plan(&label, default), kind, mode, exclusive, acknowledging)
}

fn label(kind: Kind, mode: Handoff, acknowledging: Acknowledging) -> String {
    let faults = if acknowledging.faults {
        " with faults"
    } else {
        ""
    };
    format!("{mode:?} under Acknowledge{faults} over a {kind:?}")
}

fn simulate_acknowledging_with(
    plan: Plan,
    kind: Kind,
    mode: Handoff,
    exclusive: bool,
    acknowledging: Acknowledging,
) -> Result<String, String> {
    let schedules = if acknowledging.faults {
        schedule::fault_schedule(kind)
    } else {
        schedule::acknowledging_schedule(kind)
    };
    simulate_with(plan, schedules, |s| {
        run::run(s, kind, None, &[], mode, exclusive, Some(acknowledging))
    })
}

/// Runs schedules under faults with `bug` planted, looking through at least `min` of them
/// (stopping at the first failure, shrinking it briefly); returns the failure.
fn catch(bug: Bug, min: u32) -> String {
    let label = format!("planted {bug:?}");
    let plan = Plan {
        label: &label,
        default: 0,
        min_cases: min,
        shrink: 64,
    };
    let (kind, mode) = (Kind::StatefulSet, Handoff::Exclusive);
    let failure = simulate_acknowledging_with(plan, kind, mode, true, bug.planted(FAULTS))
        .expect_err("the planted bug is caught");
    eprintln!("{}", failure.lines().next().unwrap_or_default());
    failure
}

fn pass(result: Result<String, String>) {
    match result {
        Ok(summary) => eprintln!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn acknowledged_handoff_holds_with_drifting_clocks_paused_workers_partitions_and_failovers() {
    pass(simulate_acknowledging(
        Kind::StatefulSet,
        Handoff::Exclusive,
        true,
        FAULTS,
    ));
}

#[test]
fn acknowledged_handoff_holds_over_a_deployment_with_drifting_clocks_paused_workers_and_partitions()
{
    pass(simulate_acknowledging(
        Kind::Deployment,
        Handoff::Exclusive,
        true,
        FAULTS,
    ));
}

#[test]
fn acknowledged_handoff_never_runs_a_job_twice_and_settles_under_random_schedules() {
    let (kind, mode) = (Kind::StatefulSet, Handoff::Exclusive);
    pass(simulate_acknowledging(kind, mode, true, ACKNOWLEDGING));
}

#[test]
fn acknowledged_handoff_holds_over_a_deployments_slots_under_random_schedules() {
    let (kind, mode) = (Kind::Deployment, Handoff::Exclusive);
    pass(simulate_acknowledging(kind, mode, true, ACKNOWLEDGING));
}

#[test]
fn overlap_under_acknowledge_settles_under_random_schedules() {
    let (kind, mode) = (Kind::StatefulSet, Handoff::Overlap);
    pass(simulate_acknowledging(kind, mode, false, ACKNOWLEDGING));
}

/// (a) A worker whose permit is renewed by its watch's cache keeps running, cut off, the jobs
/// the operator revoked and, after the wait, granted elsewhere; or, its reads never failing,
/// answers ready and keeps jobs it cannot see moved.
#[test]
fn the_simulation_catches_a_worker_fenced_by_its_cache_instead_of_a_quorum_read() {
    let failure = catch(Bug::CachedRead, 500);
    let caught = failure.contains("live pods") || failure.contains("ran nowhere else");
    assert!(caught, "{failure}");
}

/// (b) A permit counted from a slow answer outlasts the operator's wait.
#[test]
fn the_simulation_catches_a_permit_counted_from_the_answer() {
    let failure = catch(Bug::PermitFromAnswer, 2000);
    assert!(failure.contains("live pods"), "{failure}");
}

/// (c) A revoke wait a third as long as the protocol's grants before the permits lapse.
#[test]
fn the_simulation_catches_a_grant_before_the_revoke_wait() {
    let failure = catch(Bug::ShortRevokeWait, 500);
    assert!(failure.contains("live pods"), "{failure}");
}

/// Schedules the takeover test looks through: the default seed's 634th catches it (the
/// revoke, the crash and the grant must all fall within one of the holder's read intervals).
const TAKEOVER_SCHEDULES: u32 = 2000;

/// (d) An operator that takes over and counts a pending wait from before its start grants
/// while the holder's permit holds.
#[test]
fn the_simulation_catches_a_takeover_that_forgets_a_pending_wait() {
    let failure = catch(Bug::TakeoverKeepsWaits, TAKEOVER_SCHEDULES);
    assert!(failure.contains("live pods"), "{failure}");
}

/// (e) A worker that answers ready while fenced keeps its pod in the pool: its jobs, fenced,
/// run nowhere, and the failover bound catches it.
#[test]
fn the_simulation_catches_readiness_that_stays_ready_while_fenced() {
    let failure = catch(Bug::ReadyWhileFenced, 500);
    assert!(failure.contains("ran nowhere else"), "{failure}");
}

/// An operator that grants on the acknowledgement of the version before the revoke runs moved
/// jobs twice.
#[test]
fn the_simulation_catches_grants_on_the_acknowledgement_of_an_older_version() {
    let failure = catch(Bug::OlderAck, 500);
    assert!(failure.contains("live pods"), "{failure}");
}

#[test]
fn exclusive_handoff_holds_over_a_deployments_slots_under_random_schedules() {
    pass(simulate_deployment(Handoff::Exclusive, true));
}

#[test]
fn overlap_handoff_settles_over_a_deployments_slots_under_random_schedules() {
    pass(simulate_deployment(Handoff::Overlap, false));
}

#[test]
fn exclusive_handoff_never_runs_a_job_twice_and_settles_under_random_schedules() {
    pass(simulate(Handoff::Exclusive, true));
}

#[test]
fn exclusive_handoff_holds_for_dedicated_and_weighted_jobs_under_random_schedules() {
    pass(simulate_qos());
}

#[test]
fn overlap_handoff_settles_without_double_deletes_under_random_schedules() {
    pass(simulate(Handoff::Overlap, false));
}

/// The exclusivity check has teeth: the make-before-break handoff runs moved jobs twice, and
/// the simulation finds a short schedule that shows it.
#[test]
fn the_simulation_catches_the_duplicates_of_the_overlap_handoff() {
    let failure = simulate(Handoff::Overlap, true).expect_err("Overlap runs moved jobs twice");
    assert!(failure.contains("live pods"), "{failure}");
    eprintln!("{failure}");
}

/// A worker process that crashes is restarted in its pod (same uid): the new process runs
/// nothing before its first fence read, then takes its entry back at once; its jobs never
/// move (its container has just started, so NotReady does not take it out of the pool).
#[test]
fn a_restarted_worker_process_runs_nothing_before_its_first_read_and_keeps_its_jobs() {
    use Step::*;
    let mut steps = vec![Tick, Tick, Reconcile(None)];
    // A new worker is Ready only after its first read and the kubelet's next probe, and its
    // jobs come to it only once revoked from the worker that took them meanwhile: 12 s.
    for _ in 0..6 {
        steps.extend([Sync(255), Elapse(2_000), Relist, Reconcile(None)]);
    }
    let schedule = Schedule {
        replicas: 2,
        jobs: 4,
        max_unavailable: 1,
        steps,
        seed: 7,
        probe: (Probe::Pause, 0),
    };
    let mut world = run::Run::start(&schedule, Kind::StatefulSet, ACKNOWLEDGING);
    world.steps(&schedule.steps).expect("0 duplicates");
    let version = world.version();
    let entry = world.entry("w-0");
    assert_eq!(world.running("w-0"), entry, "w-0 runs its entry");
    assert!(!entry.is_empty());
    world.steps(&[RestartContainer(0)]).unwrap();
    assert!(
        world.running("w-0").is_empty(),
        "a new process starts fenced"
    );
    world.steps(&[Elapse(1_000)]).unwrap();
    assert_eq!(
        world.running("w-0"),
        entry,
        "its first read gives it its entry back"
    );
    for _ in 0..10 {
        world
            .steps(&[Elapse(5_000), Relist, Reconcile(None)])
            .unwrap();
    }
    assert_eq!(world.version(), version, "nothing moved");
    assert_eq!(world.running("w-0"), entry);
}
