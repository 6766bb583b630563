//! Schedules: the steps of one run (faults, user changes, time passing) and the proptest
//! strategies that draw them, one per mode.

use proptest::prelude::*;
use swarm_assign::Qos;
use swarm_operator::api::crd::{Handoff, RolloutSpec, SwarmPool, SwarmPoolSpec};

use super::cluster::{Kind, Link, NS, labels};
use crate::fixtures;

/// Jobs a schedule can name: the pool starts with the first few.
pub const JOB_NAMES: usize = 8;

/// One step of a schedule.
#[derive(Clone, Debug)]
pub enum Step {
    /// One second passes: pods start, grace periods run down, the workload's controller acts.
    Tick,
    /// The operator reconciles; with `Some(k)` it crashes after its k-th write.
    Reconcile(Option<usize>),
    /// The watch delivers the pending events of the pods whose ordinal is in the mask.
    Deliver(u8),
    /// The watch relists: the cache is fresh.
    Relist,
    /// `kubectl scale --replicas`.
    Scale(usize),
    /// A job of [`JOB_NAMES`] is added to the spec (if absent).
    AddJob(usize),
    /// A job is removed from the spec (if present).
    RemoveJob(usize),
    /// `kubectl delete pod` of an ordinal.
    DeletePod(usize),
    /// A pod vanishes with its node.
    LosePod(usize),
    /// A worker process crashes and the kubelet restarts it in its pod.
    RestartContainer(usize),
    /// `kubectl rollout restart` of a Deployment.
    RolloutRestart,
    /// The kubelet refreshes the mounted file of the pods in the mask (a Deployment's waiting
    /// workers read their entry again).
    RefreshMounts(u8),
    /// Under `Acknowledge`: the ConfigMap watches of the workers in the mask deliver (each
    /// worker reads at once).
    Sync(u8),
    /// Under `Acknowledge`: this many milliseconds pass.
    Elapse(u64),
    /// SIGSTOP of the worker process of a pod.
    Pause(usize),
    /// SIGCONT of the worker process of a pod.
    Resume(usize),
    /// The worker of a pod loses the API server: its requests are refused, or hang.
    Cut(usize, Link),
    /// It reaches the API server again.
    Reconnect(usize),
    /// A node is cut off: its kubelet stops renewing the node's Lease and writing pod status;
    /// with `true` its workers lose the API server too.
    CutNode(usize, bool),
    /// The node is back.
    HealNode(usize),
    /// The API server loses etcd: every request hangs.
    EtcdDown,
    /// It reaches etcd again.
    EtcdUp,
    /// The operator's Lease watches stall (until the next relist).
    StallLeaseWatch,
    /// Another operator replica takes over, with empty memory and a clock of its own.
    Failover,
}

/// The single fault of the failover probe run after a schedule under faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// SIGSTOP.
    Pause,
    /// Its requests are refused, or hang.
    Cut(Link),
    /// Its node, and the workers on it, are cut off.
    Node,
}

/// A whole schedule: the starting pool, the steps, the seed of request delays and clock rates,
/// and the failover probe's fault and victim.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub replicas: usize,
    pub jobs: usize,
    pub max_unavailable: u8,
    pub steps: Vec<Step>,
    pub seed: u64,
    pub probe: (Probe, usize),
}

pub fn step() -> impl Strategy<Value = Step> {
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

/// The steps of a Deployment pool's schedule: those of a StatefulSet's, rollout restarts and
/// mount refreshes.
pub fn deployment_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => step(),
        1 => Just(Step::RolloutRestart),
        3 => any::<u8>().prop_map(Step::RefreshMounts),
    ]
}

fn kind_step(kind: Kind) -> BoxedStrategy<Step> {
    match kind {
        Kind::StatefulSet => step().boxed(),
        Kind::Deployment => deployment_step().boxed(),
    }
}

/// The steps of an acknowledging pool's schedule: those of its kind, watches that deliver,
/// and up to 5 s passing at once.
pub fn acknowledging_step(kind: Kind) -> impl Strategy<Value = Step> + 'static {
    prop_oneof![
        8 => kind_step(kind),
        3 => any::<u8>().prop_map(Step::Sync),
        3 => (1..5_000u64).prop_map(Step::Elapse),
    ]
}

/// The steps of a schedule under faults: those of an acknowledging pool, up to 25 s passing at
/// once, paused and cut off workers, cut off nodes, etcd out of reach, stalled Lease watches
/// and operator failovers.
pub fn fault_step(kind: Kind) -> impl Strategy<Value = Step> + 'static {
    let link = prop_oneof![Just(Link::Fail), Just(Link::Hang)];
    prop_oneof![
        14 => acknowledging_step(kind),
        4 => (1..25_000u64).prop_map(Step::Elapse),
        2 => (0..5usize).prop_map(Step::Pause),
        1 => (0..5usize).prop_map(Step::Resume),
        2 => ((0..5usize), link).prop_map(|(i, l)| Step::Cut(i, l)),
        1 => (0..5usize).prop_map(Step::Reconnect),
        1 => ((0..3usize), any::<bool>()).prop_map(|(n, p)| Step::CutNode(n, p)),
        1 => (0..3usize).prop_map(Step::HealNode),
        1 => Just(Step::EtcdDown),
        1 => Just(Step::EtcdUp),
        1 => Just(Step::StallLeaseWatch),
        1 => Just(Step::Failover),
    ]
}

fn probe() -> impl Strategy<Value = (Probe, usize)> {
    let fault = prop_oneof![
        Just(Probe::Pause),
        Just(Probe::Cut(Link::Fail)),
        Just(Probe::Cut(Link::Hang)),
        Just(Probe::Node),
    ];
    (fault, 0..5usize)
}

/// Schedules of `steps`, at most `len` long.
pub fn schedule_of(
    steps: impl Strategy<Value = Step> + 'static,
    len: usize,
) -> BoxedStrategy<Schedule> {
    (
        (1..5usize, 1..=JOB_NAMES, 1..3u8),
        prop::collection::vec(steps, 0..len),
        any::<u64>(),
        probe(),
    )
        .prop_map(
            |((replicas, jobs, max_unavailable), steps, seed, probe)| Schedule {
                replicas,
                jobs,
                max_unavailable,
                steps,
                seed,
                probe,
            },
        )
        .boxed()
}

pub fn schedule() -> BoxedStrategy<Schedule> {
    schedule_of(step(), 40)
}

pub fn deployment_schedule() -> BoxedStrategy<Schedule> {
    schedule_of(deployment_step(), 40)
}

pub fn acknowledging_schedule(kind: Kind) -> BoxedStrategy<Schedule> {
    schedule_of(acknowledging_step(kind), 48)
}

pub fn fault_schedule(kind: Kind) -> BoxedStrategy<Schedule> {
    schedule_of(fault_step(kind), 96)
}

/// A change to `spec.qos` between two steps.
#[derive(Clone, Debug)]
pub enum QosEdit {
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
pub struct QosSchedule {
    pub schedule: Schedule,
    pub dedicated: Vec<usize>,
    pub weights: Vec<(usize, u64)>,
    pub edits: Vec<(usize, QosEdit)>,
}

fn qos_edit() -> impl Strategy<Value = QosEdit> {
    prop_oneof![
        2 => (0..JOB_NAMES, 1..6u64).prop_map(|(job, weight)| QosEdit::Weigh(job, weight)),
        1 => (0..JOB_NAMES).prop_map(QosEdit::Dedicate),
        1 => (0..JOB_NAMES).prop_map(QosEdit::Share),
    ]
}

pub fn qos_schedule() -> impl Strategy<Value = QosSchedule> {
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
pub fn edit_qos(edit: &QosEdit, pool: &mut SwarmPool) {
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
pub fn prune_qos(pool: &mut SwarmPool) {
    let jobs = pool.spec.jobs.clone();
    if let Some(qos) = pool.spec.qos.as_mut() {
        qos.dedicated.retain(|j| jobs.contains(j));
        qos.weights.retain(|j, _| jobs.contains(j));
    }
}

pub fn job(index: usize) -> String {
    format!("stream:{index}")
}

pub fn pool(jobs: usize, mode: Handoff, max_unavailable: u8) -> SwarmPool {
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

pub fn bump_generation(pool: &mut SwarmPool) {
    let generation = pool.metadata.generation.unwrap_or(1);
    pool.metadata.generation = Some(generation + 1);
}
