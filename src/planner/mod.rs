//! Pure reconcile planning: the observed state of one pool in, the next step of its round out.
//!
//! No client, no clock, no I/O: [`next_step`] takes [`Observed`] and returns a [`Step`] (write
//! the ConfigMap, list pods live, or done with deletes, status and events); [`crate::drive`]
//! carries it out and asks again on the fresher state. Every decision the operator makes is
//! taken here, so the tests of this module are the tests of the operator's behaviour.
//!
//! [`decide`] is a pipeline of named steps, each in its own module or function:
//! 1. `validate`: the selector, the StatefulSet, the jobs, the rollout settings, ownership;
//!    then `read_written` (the config last written and the workers' own ConfigMaps) and
//!    `Membership::of` (under `Acknowledge`: the workers out of the pool, terminating or not
//!    ready for jobs);
//! 2. `assign_jobs`: where the strategy wants every job ([`swarm_assign::assign`]);
//! 3. `hand_off`: what each worker may run now, and which jobs wait in transit ([`handoff`]),
//!    published as the next config; then `lay_out_slices`, the workers' own ConfigMaps;
//! 4. `roll_out`: the ConfigMap to write, the stale workers, the pods to delete ([`rollout`]);
//! 5. `report::decision`: status, conditions and events.

pub mod acknowledge;
mod by_job;
pub mod handoff;
pub mod membership;
mod report;
pub use report::{FAILOVER, coalesce_acknowledgements};
pub mod rollout;
pub mod target;
pub(crate) mod validate;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_assign::{Placed, Qos};

use crate::api::crd::{RolloutPolicy, SwarmPool, SwarmPoolStatus};
use crate::api::failure::Failure;
use crate::state::cached::CachedPod;
use crate::state::config_map::{self, Previous};
use crate::state::jobs_source::Unresolved;
use crate::state::lease::Acks;
use crate::state::node_leases::NodeLeases;
use crate::state::records::{AwaitingAcks, PendingRefresh};
use crate::state::revokes::RevokeWaits;
use crate::state::slice_summary::SliceSummary;
use crate::state::worker_slices::{self, SliceWrites};
use acknowledge::AckProgress;
use handoff::{HandoffInput, HandoffOutcome, PodIndex, Revokes};
use membership::Membership;
use rollout::{PodDelete, Priorities};
use target::Target;
use validate::{Facts, Valid};

pub use validate::selects;

/// How long a worker pod may be not Ready before the pool counts as Degraded rather than
/// starting up (the role of a Deployment's progress deadline).
pub const STARTUP_GRACE: SignedDuration = SignedDuration::from_mins(5);
/// Safety-net requeue when nothing is in flight.
pub const REQUEUE_IDLE: Duration = Duration::from_secs(300);
/// Requeue while a rollout waits on pods (watch events normally come first).
pub const REQUEUE_ROLLING: Duration = Duration::from_secs(15);
/// How long after a revoke wait, a grace or a start window ends the pool is looked at again,
/// so it is past it.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(200);
/// Requeue for a ConfigMap conflict, whose resolution (deleting the other ConfigMap) is not
/// watched.
pub const REQUEUE_CONFLICT: Duration = Duration::from_secs(60);

/// Everything the planner looks at for one pool.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The pool, its `spec.jobs` the combined jobs once `spec.jobsFrom` is resolved
    /// ([`crate::state::jobs_source::resolve`]).
    pub pool: &'a SwarmPool,
    /// Why the pool's `spec.jobsFrom` could not be resolved, if it could not: the pool then
    /// decides nothing and keeps its config.
    pub jobs_unresolved: Option<&'a Unresolved>,
    /// StatefulSets of the pool's namespace (others are ignored); the selector is applied here.
    pub statefulsets: Vec<&'a StatefulSet>,
    /// Deployments of the pool's namespace, for a pool with `workloadKind: Deployment`.
    pub deployments: Vec<&'a Deployment>,
    /// ReplicaSets of the pool's namespace: a Deployment's workers are the pods of the
    /// ReplicaSets it controls.
    pub replica_sets: Vec<&'a ReplicaSet>,
    /// Pods of the pool's namespace (only those controlled by the matched workload are workers;
    /// any pod may be a holder of jobs in transit).
    pub pods: Vec<&'a CachedPod>,
    /// The other SwarmPools of the namespace: of several pools selecting one StatefulSet, only
    /// the oldest manages it.
    pub other_pools: Vec<&'a SwarmPool>,
    /// Whether `pods` was listed from the API server after the last ConfigMap write that
    /// recorded unresolved stale workers or holders (rather than read from the watch cache).
    pub pods_are_live: bool,
    /// The ConfigMap named by the pool, if it exists.
    pub config_map: Option<&'a ConfigMap>,
    /// The workers' own ConfigMaps labelled with the pool (the per-worker layout; others are
    /// ignored, see [`worker_slices::Observed::of`]).
    pub worker_config_maps: Vec<&'a SliceSummary>,
    /// Whether `worker_config_maps` was listed from the API server (rather than the cache)
    /// since the last write.
    pub slices_are_live: bool,
    /// Uids of pods this operator already asked to delete (terminating, whatever the cache says).
    pub deleting: &'a BTreeSet<String>,
    /// What the workers' Leases acknowledge (read under `rollout.policy: Acknowledge` only).
    pub acks: &'a Acks,
    /// Since when each worker's ConfigMap has shown each version, on the operator's monotonic
    /// clock: where each revoke wait starts (`Acknowledge`).
    pub revokes: &'a RevokeWaits,
    /// When the kubelets of the workers' nodes last renewed their node Leases (`Acknowledge`).
    pub node_leases: &'a NodeLeases,
    /// The current time.
    pub now: Timestamp,
}

/// What the controller should do for one pool.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The ConfigMap to server-side apply (only when it differs from the observed one).
    pub apply: Option<ConfigMap>,
    /// The workers' own ConfigMaps to write after it (the per-worker layout).
    pub slices: SliceWrites,
    /// The workers' ConfigMaps in the cache do not match the index: list them live and plan
    /// again.
    pub needs_live_slices: bool,
    /// The rollout bookkeeping must be checked against pods listed live (the cache may lag
    /// behind pods created, replaced or gone around a ConfigMap write): list the pods named in
    /// `live_pods` and plan again.
    pub needs_live_pods: bool,
    /// When `needs_live_pods`: every pod this plan looks up, by name (the workers, and the pods
    /// the ConfigMap names: in its config, as holders, as stale workers). Pods are only ever
    /// looked up by name, so a live list of these is as good as one of the whole namespace.
    pub live_pods: BTreeSet<String>,
    /// Stale pods to delete now, each with a uid precondition.
    pub deletes: Vec<PodDelete>,
    /// The status to report (patched only when it differs from the pool's).
    pub status: SwarmPoolStatus,
    /// Events to publish about the pool.
    pub events: Vec<PlannedEvent>,
    /// Seconds each job granted by `apply` spent in transit, for the handoff histogram.
    pub granted_after_seconds: Vec<f64>,
    /// When to reconcile again if nothing else triggers it.
    pub requeue_after: Duration,
}

/// The next step of one reconcile round. The order of a round's actions is in the type: a
/// ConfigMap write comes before any live list, and deletes, status and events come last, once
/// nothing is left to write or list (see [`crate::drive`]).
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per round, moved on at once"
)]
pub enum Step {
    /// Write this ConfigMap, fenced by the copy it was planned on, then plan again.
    Write(Write),
    /// List the workers' own ConfigMaps from the API server, then plan again.
    ListSlices,
    /// List these pods (by name) from the API server, not the cache, then plan again.
    ListLive(BTreeSet<String>),
    /// Nothing left to write or list: delete, then report.
    Done(Outcome),
}

/// A ConfigMap write and what it does.
#[derive(Clone, Debug, PartialEq)]
pub struct Write {
    /// The pool's ConfigMap to server-side apply, if it changes.
    pub config_map: Option<ConfigMap>,
    /// Then the workers' own ConfigMaps, in their order.
    pub slices: SliceWrites,
    /// Events to publish once it is written.
    pub events: Vec<PlannedEvent>,
    /// Seconds each job this write grants spent in transit, for the handoff histogram.
    pub granted_after_seconds: Vec<f64>,
}

/// The end of a reconcile: the pods to delete, then the status and events to report.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Stale pods to delete, each with a uid precondition.
    pub deletes: Vec<PodDelete>,
    /// The status to report (patched only when it differs from the pool's).
    pub status: SwarmPoolStatus,
    /// Events to publish; one about a pod (`related_pod`) only once that pod's delete went
    /// through.
    pub events: Vec<PlannedEvent>,
    /// When to reconcile again if nothing else triggers it.
    pub requeue_after: Duration,
}

impl Decision {
    /// The step this plan asks for: its write, else its live list (unless `pods_are_live`
    /// already), else its outcome.
    pub fn into_step(self, pods_are_live: bool) -> Step {
        if self.apply.is_some() || !self.slices.is_empty() {
            return Step::Write(Write {
                config_map: self.apply,
                slices: self.slices,
                events: self.events,
                granted_after_seconds: self.granted_after_seconds,
            });
        }
        if self.needs_live_slices {
            return Step::ListSlices;
        }
        if self.needs_live_pods && !pods_are_live {
            return Step::ListLive(self.live_pods);
        }
        Step::Done(Outcome {
            deletes: self.deletes,
            status: self.status,
            events: self.events,
            requeue_after: self.requeue_after,
        })
    }
}

/// The next step of one reconcile round of `observed.pool`.
pub fn next_step(observed: &Observed) -> Step {
    decide(observed).into_step(observed.pods_are_live)
}

/// An event about the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: &'static str,
    /// What the operator did or tried.
    pub action: &'static str,
    /// Human-readable note.
    pub note: String,
    /// The pod the event is about besides the pool (name, uid), if any.
    pub related_pod: Option<(String, String)>,
}

/// Plans one reconcile of `observed.pool`.
pub fn decide(observed: &Observed) -> Decision {
    let mut facts = Facts::default();
    match decide_valid(observed, &mut facts) {
        Ok(plan) => plan,
        Err(failure) => report::failure(observed, &facts, failure),
    }
}

/// The pipeline for a pool that may pass validation, one named step per line.
fn decide_valid(o: &Observed, facts: &mut Facts) -> Result<Decision, Failure> {
    let valid = validate::validate(o, facts)?;
    let (previous, slices) = read_written(o, &valid);
    if !previous.unsettled.is_empty() {
        return settle_slices(o, &valid, &previous, &slices);
    }
    let looked_up = pods_looked_up(&valid, &previous);
    let members = Membership::of(o, &valid);
    let placed = assign_jobs(o.pool, &valid, &previous, &members.out);
    let (mut publication, mut handoff) =
        hand_off(o, &valid, &previous, &members, &looked_up, placed.owners);
    let slice_writes = lay_out_slices(
        o,
        &valid,
        &previous,
        &slices,
        &mut publication,
        &mut handoff,
    )?;
    let rollout = roll_out(o, &valid, &previous, slice_writes, &publication, &handoff)?;
    let mut plan = report::decision(report::Planned {
        observed: o,
        valid: &valid,
        previous: &previous,
        publication: &publication,
        handoff: &handoff,
        members: &members,
        dedicated_unmet: &placed.dedicated_unmet,
        rollout,
    });
    if plan.needs_live_pods {
        plan.live_pods = looked_up;
    }
    Ok(plan)
}

/// Step 1b: the config last written, and the workers' own ConfigMaps laid out from it.
fn read_written<'a>(o: &Observed<'a>, valid: &Valid) -> (Previous, worker_slices::Observed<'a>) {
    let mut slices =
        worker_slices::Observed::of(&valid.config_map_name, o.worker_config_maps.iter().copied());
    let previous = Previous::read(o.config_map, &mut slices);
    (previous, slices)
}

/// Step 3: what each worker may run now and which jobs wait in transit, as the next config.
fn hand_off(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    members: &Membership,
    looked_up: &BTreeSet<String>,
    owners: swarm_assign::Owners,
) -> (swarm_assign::Publication, HandoffOutcome<'static>) {
    // The handoff reads the target as a `u32` per job: the strategy's owners go before the
    // handoff builds its own tables.
    let target = Target::from_owners(&owners);
    drop(owners);
    let pods = index_pods(o, looked_up);
    let grace = o
        .pool
        .spec
        .rollout
        .lease_grace_seconds
        .max(0)
        .unsigned_abs();
    let revokes = Revokes {
        acks: o.acks,
        waits: o.revokes,
        grace: Duration::from_secs(grace),
    };
    let (held, handoff) = handoff::hand_off(&HandoffInput {
        mode: o.pool.spec.rollout.handoff,
        roster: &valid.roster,
        jobs: &o.pool.spec.jobs,
        target: &target,
        previous: previous.config.as_ref(),
        holders: previous.holders.as_ref(),
        pods: &pods,
        revokes: members.acknowledge.then_some(&revokes),
        terminating: &members.terminating,
        unready: &members.unready,
        pods_are_live: o.pods_are_live,
        now: o.now,
    })
    .take_held();
    // The jobs are copied once they are all decided.
    let held = held
        .into_iter()
        .map(|jobs| jobs.into_iter().map(str::to_owned).collect())
        .collect();
    let publication = swarm_assign::publish(
        &valid.roster,
        previous.config.as_ref(),
        held,
        handoff.transit.clone(),
    );
    (publication, handoff)
}

/// Step 3b: the workers' own ConfigMaps to write, and the index of them (`Acknowledge`).
fn lay_out_slices(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    slices: &worker_slices::Observed,
    publication: &mut swarm_assign::Publication,
    handoff: &mut HandoffOutcome<'static>,
) -> Result<(Option<swarm_protocol::slices::Index>, SliceWrites), Failure> {
    // Under `Acknowledge` each worker reads a ConfigMap of its own; a pool that left that
    // policy has its workers' ConfigMaps deleted.
    if o.pool.spec.rollout.policy != RolloutPolicy::Acknowledge {
        let deletes = slices.iter().map(|(_, cm)| cm.clone()).collect();
        let writes = SliceWrites {
            deletes,
            ..SliceWrites::default()
        };
        return Ok((None, writes));
    }
    // Slices are rewritten at a new version even if their content stays when unsettled, or
    // when a holder waits for the acknowledgement of a version its slice never got.
    let mut rewrite = previous.unsettled.clone();
    rewrite.extend(worker_slices::lagging(&handoff.holders, slices));
    let next = publication.config.version + u64::from(!publication.changed);
    let (mut index, writes) = worker_slices::desired(
        o.pool,
        &valid.config_map_name,
        &publication.config,
        (slices, previous.assembled()),
        &rewrite,
        next,
    )?;
    if !writes.first.is_empty() || !writes.then.is_empty() {
        publication.config.version = next;
    }
    index.version = publication.config.version;
    handoff.holders.stamp_version(publication.config.version);
    Ok((Some(index), writes))
}

/// The plan while some worker's slice does not show what the index records: list the slices
/// live (the cache may only lag), and if they still do not, fence them before anything else
/// is decided on them.
fn settle_slices(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    slices: &worker_slices::Observed,
) -> Result<Decision, Failure> {
    let fences = match (&previous.index, o.slices_are_live) {
        (Some(index), true) => worker_slices::fences(
            o.pool,
            &valid.config_map_name,
            index,
            (slices, previous.assembled()),
            &previous.unsettled,
        )?,
        _ => SliceWrites::default(),
    };
    Ok(Decision {
        apply: None,
        slices: fences,
        needs_live_slices: !o.slices_are_live,
        needs_live_pods: false,
        live_pods: BTreeSet::new(),
        deletes: Vec::new(),
        status: o.pool.status.clone().unwrap_or_default(),
        events: Vec::new(),
        granted_after_seconds: Vec::new(),
        requeue_after: REQUEUE_ROLLING,
    })
}

/// The uids of the pods of the pool's namespace named in `names`: the namespace may hold many
/// other pools' pods, which this plan never looks at. A finished pod runs nothing, so it is
/// left out: to the handoff it is gone.
fn index_pods(o: &Observed, names: &BTreeSet<String>) -> PodIndex {
    PodIndex::new(
        o.pods
            .iter()
            .filter(|p| o.pool.metadata.namespace.as_deref() == Some(&*p.namespace) && !p.finished)
            .filter(|p| names.contains(&*p.name))
            .map(|p| (&*p.name, &*p.uid)),
    )
}

/// Every pod a plan of this pool may look up by name.
fn pods_looked_up(valid: &Valid, previous: &Previous) -> BTreeSet<String> {
    let workers = valid
        .workers
        .iter()
        .map(|(name, _)| name)
        .chain(valid.roster.idle().iter().map(String::as_str));
    let configured = previous
        .config
        .iter()
        .flat_map(|c| c.workloads().map(|(pod, _)| pod));
    let holders = previous
        .holders
        .iter()
        .flat_map(|h| h.entries().keys().map(String::as_str));
    let stale = previous.pending.entries().keys().map(String::as_str);
    workers
        .chain(configured)
        .chain(holders)
        .chain(stale)
        .map(str::to_owned)
        .collect()
}

/// Step 2: where the strategy wants every job, starting from what the workers hold now (see
/// [`swarm_assign::current_assignment`] for the jobs in transit; a Deployment pool's slots
/// count them for the slot whose pods they were revoked from, see [`swarm_assign::Rebound`]).
/// Both the holdings and the result are by job position, borrowing the job names: a pool of
/// 100,000 jobs would otherwise copy every name twice on each plan.
fn assign_jobs(
    pool: &SwarmPool,
    valid: &Valid,
    previous: &Previous,
    absent: &BTreeSet<usize>,
) -> Placed {
    let neutral = Qos::default();
    let qos = pool.spec.qos.as_ref().unwrap_or(&neutral);
    let current = previous
        .config
        .as_ref()
        .and_then(|config| match &valid.slots {
            Some(slots) => Some(slots.held(config)),
            None => swarm_assign::current_holders(config, &valid.workload_name, qos),
        });
    swarm_assign::place_over_members(
        pool.spec.strategy,
        &pool.spec.jobs,
        valid.workers.len(),
        absent,
        current.as_ref(),
        qos,
    )
}

/// Whether `pod` had jobs in the previous config. A Deployment's pod starts before the operator
/// can list it, so a worker whose entry is missing or empty waits for its jobs and reads them
/// when they come (see the worker contract in docs/worker-protocol.md): only a pod that ran jobs
/// is stale when its job set changes.
fn ran_jobs(previous: &Previous, pod: &str) -> bool {
    previous
        .config
        .as_ref()
        .and_then(|config| config.workload(pod))
        .is_some_and(|workload| !workload.jobs.is_empty())
}

/// What the roll-out step decided.
struct Rollout {
    /// The ConfigMap to write, if it differs from the observed one (and the pool is not paused).
    apply: Option<ConfigMap>,
    /// The workers' own ConfigMaps to write after it.
    slices: SliceWrites,
    /// Whether the written config differs from the observed one at all.
    outdated: bool,
    /// The stale-worker records after this plan.
    pending: PendingRefresh,
    /// The workers that owe an acknowledgement after this plan (`Acknowledge`).
    awaiting: AwaitingAcks,
    /// Acknowledgements and timeouts this plan saw.
    acks: AckProgress,
    needs_live_pods: bool,
    deletes: Vec<PodDelete>,
}

/// Step 4: the ConfigMap to write, the stale-worker records, and the pods to delete now.
fn roll_out(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    (index, slices): (Option<swarm_protocol::slices::Index>, SliceWrites),
    publication: &swarm_assign::Publication,
    handoff: &HandoffOutcome,
) -> Result<Rollout, Failure> {
    let spec = &o.pool.spec;
    let workers = &valid.workers;
    let Stale {
        pending,
        awaiting,
        acks,
        mut needs_live_pods,
    } = track_stale_workers(o, valid, previous, publication);
    needs_live_pods |= handoff.needs_live_pods;
    // A slot remembers the pods it took over from while their jobs are in transit.
    let slots = valid.slots.as_ref().map(|rebound| {
        let mut table = rebound.table.clone();
        table.prune(|pod| handoff.transit.contains_key(pod));
        table
    });
    let desired = config_map::desired(
        o.pool,
        &valid.config_map_name,
        &publication.config,
        index.as_ref(),
        &pending,
        &handoff.holders,
        (spec.rollout.policy == RolloutPolicy::Acknowledge).then_some(&awaiting),
        slots.as_ref(),
    )?;
    let main_outdated = o
        .config_map
        .is_none_or(|cm| !config_map::is_current(cm, &desired));
    let outdated = main_outdated || !slices.is_empty();
    let paused = spec.paused;
    let apply = (main_outdated && !paused).then_some(desired);
    let slices = if paused {
        SliceWrites::default()
    } else {
        slices
    };
    if paused {
        needs_live_pods = false;
    }
    let deletes = if paused
        || apply.is_some()
        || !slices.is_empty()
        || needs_live_pods
        || spec.rollout.policy == RolloutPolicy::None
    {
        Vec::new()
    } else {
        rollout::deletes(
            &pending,
            workers,
            valid.max_unavailable,
            &Priorities {
                first: &handoff.holder_pods,
                hold_back: &handoff.awaiting_grants,
            },
        )
    };
    Ok(Rollout {
        apply,
        slices,
        outdated,
        pending,
        awaiting,
        acks,
        needs_live_pods,
        deletes,
    })
}

/// The stale workers after a decision.
struct Stale {
    /// Workers whose pods are to be deleted and re-created.
    pending: PendingRefresh,
    /// Workers that owe an acknowledgement.
    awaiting: AwaitingAcks,
    /// Acknowledgements and timeouts seen.
    acks: AckProgress,
    /// Whether `pending` must be checked against pods listed live.
    needs_live_pods: bool,
}

/// The stale-worker records after this decision, and whether they must be checked against pods
/// listed live: under `DeletePods` every running worker whose entry this write changes must
/// restart once; under `Acknowledge` it must acknowledge the new version, and is restarted like
/// that only when it does not in time; under `None` workers reload by themselves and nothing is
/// tracked.
fn track_stale_workers(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    publication: &swarm_assign::Publication,
) -> Stale {
    let workers = &valid.workers;
    let rollout = &o.pool.spec.rollout;
    let mut stale = Stale {
        pending: previous.pending.clone(),
        awaiting: AwaitingAcks::default(),
        acks: AckProgress::default(),
        needs_live_pods: false,
    };
    stale.pending.retain_workers(workers);
    if rollout.policy == RolloutPolicy::None {
        stale.pending = PendingRefresh::default();
        return stale;
    }
    if o.pods_are_live {
        stale.pending.resolve(workers);
        stale.pending.drop_replaced(workers);
    } else if stale.pending.has_unresolved() || !stale.pending.replaced(workers).is_empty() {
        stale.needs_live_pods = true;
    }
    let touched = publication
        .touched
        .iter()
        .map(String::as_str)
        .filter(|pod| workers.contains(pod));
    if rollout.policy == RolloutPolicy::Acknowledge {
        stale.awaiting = previous.awaiting.clone();
        let touched = touched.filter(|_| publication.changed);
        let timeout = SignedDuration::from_secs(rollout.ack_timeout_seconds.max(1));
        stale.acks = stale.awaiting.step(
            previous.config.as_ref(),
            touched,
            &publication.config,
            workers,
            o.acks,
            o.now,
            timeout,
        );
        // A worker that did not acknowledge in time is refreshed as under DeletePods.
        stale
            .pending
            .mark_unresolved(stale.acks.timed_out.iter().map(|(pod, _)| pod.as_str()));
    } else if publication.changed {
        stale
            .pending
            .mark_unresolved(touched.filter(|pod| !valid.has_slots() || ran_jobs(previous, pod)));
    }
    stale
}
