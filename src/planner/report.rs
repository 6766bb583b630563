//! Step 5 of the pipeline: the status, its conditions and the events.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use swarm_assign::Publication;
use swarm_protocol::config::WorkerConfig;

use super::acknowledge::{self, AckProgress};
use super::by_job::{ByJob, Positions};
use super::config_map::Previous;
use super::handoff::HandoffOutcome;
use super::membership::Membership;
use super::validate::{Facts, Valid};
use super::{
    Decision, EXPIRY_SLACK, Observed, PlannedEvent, REQUEUE_CONFLICT, REQUEUE_IDLE,
    REQUEUE_ROLLING, Rollout, STARTUP_GRACE,
};
use crate::api::conditions::{self, Verdict, reason};
use crate::api::crd::{
    Phase, RolloutPolicy, SwarmPool, SwarmPoolStatus, UnavailableReason, UnavailableWorker,
    WorkloadKind,
};
use crate::api::failure::Failure;
use crate::planner::rollout::{PodDelete, Workers};
use crate::state::node_leases::NODE_SILENCE;
use crate::state::records::{AwaitingAcks, PendingRefresh};
use crate::state::worker_slices::{self, SliceWrites};

/// What the pipeline planned for a valid pool, to report.
pub(super) struct Planned<'a> {
    /// What the plan was made from.
    pub observed: &'a Observed<'a>,
    /// The pool as validated.
    pub valid: &'a Valid,
    /// The config last written.
    pub previous: &'a Previous,
    /// The config to write.
    pub publication: &'a Publication,
    /// What the handoff revoked, granted and holds in transit.
    pub handoff: &'a HandoffOutcome<'static>,
    /// Which workers take part, and why the others do not.
    pub members: &'a Membership,
    /// Dedicated jobs that run as shared jobs for want of workers.
    pub dedicated_unmet: &'a [String],
    /// The roll-out step's writes, records and deletes.
    pub rollout: Rollout,
}

/// The plan of a valid pool: what the roll-out step does, reported.
pub(super) fn decision(planned: Planned) -> Decision {
    let Planned {
        observed: o,
        valid,
        previous,
        publication,
        handoff,
        members,
        dedicated_unmet,
        rollout,
    } = planned;
    let pool = o.pool;
    let spec = &pool.spec;
    let workers = &valid.workers;
    let Rollout {
        apply,
        slices,
        outdated,
        pending,
        awaiting,
        acks,
        needs_live_pods,
        deletes,
    } = rollout;
    let version = publication.config.version;

    let mut events = if apply.is_some() {
        write_events(valid, previous, publication, handoff, spec.jobs.len())
    } else {
        Vec::new()
    };
    let dedicated = spec.qos.as_ref().map_or(0, |qos| qos.dedicated.len());
    let unmet = dedicated_unmet;
    let unmet_note = (!unmet.is_empty() && !workers.is_empty())
        .then(|| not_enough_workers_note(unmet, dedicated, spec.jobs.len(), workers.len()));
    events.extend(not_enough_workers_event(pool, unmet, unmet_note.as_ref()));
    events.extend(deletes.iter().map(|d| refreshing_worker_event(d, version)));
    events.extend(ack_events(&acks, spec.rollout.ack_timeout_seconds));
    events.extend(availability_events(pool, previous, &members.unavailable));

    let reported = reported(
        o,
        valid,
        previous,
        publication,
        (pending, awaiting),
        outdated,
        unmet_note,
    );
    let next_change = [members.next_change, handoff.next_wait]
        .into_iter()
        .flatten()
        .min();
    let requeue_after = requeue_after(o, reported.verdict.phase, next_change);
    let dedicated_unmet = (dedicated > 0).then(|| count(unmet.len()));
    let mut status = valid_status(o, valid, previous, reported, dedicated_unmet);
    status.unavailable_workers.clone_from(&members.unavailable);
    let granted_after_seconds = if apply.is_some() {
        handoff.granted.iter().map(|g| g.after_seconds).collect()
    } else {
        Vec::new()
    };
    Decision {
        apply,
        slices,
        needs_live_slices: false,
        needs_live_pods,
        live_pods: BTreeSet::new(),
        deletes,
        status,
        events,
        granted_after_seconds,
        requeue_after,
    }
}

/// When to look at the pool again if nothing else triggers it: soon while a roll-out goes on,
/// and just past `next_change` (a revoke wait or a grace that ends), of which no event tells.
fn requeue_after(o: &Observed, phase: Phase, next_change: Option<Duration>) -> Duration {
    let requeue_after = match phase {
        Phase::RollingOut | Phase::Pending if !o.pool.spec.paused => REQUEUE_ROLLING,
        _ => REQUEUE_IDLE,
    };
    next_change.map_or(requeue_after, |left| requeue_after.min(left + EXPIRY_SLACK))
}

/// The events of a ConfigMap write: the new assignment, the jobs it revokes and grants, and a
/// warning when the config it replaces could not be read.
fn write_events(
    valid: &Valid,
    previous: &Previous,
    publication: &Publication,
    handoff: &HandoffOutcome,
    jobs: usize,
) -> Vec<PlannedEvent> {
    let version = publication.config.version;
    let mut events = Vec::new();
    if publication.changed {
        events.push(normal(
            reason::REBALANCED,
            "WriteConfig",
            rebalanced_note(previous.config.as_ref(), publication, jobs, handoff),
        ));
    }
    if handoff.revoked > 0 {
        events.push(normal(
            reason::JOBS_REVOKED,
            "RevokeJobs",
            format!(
                "config version {version}: {} jobs revoked from {}; each is granted to its new worker once no pod that may run it is left",
                handoff.revoked,
                handoff.revoked_from.join(", ")
            ),
        ));
    }
    if !handoff.granted.is_empty() {
        let to: BTreeSet<&str> = handoff.granted.iter().map(|g| g.to.as_str()).collect();
        let longest = handoff
            .granted
            .iter()
            .map(|g| g.after_seconds)
            .fold(0.0, f64::max);
        events.push(normal(
            reason::JOBS_GRANTED,
            "GrantJobs",
            format!(
                "config version {version}: {} jobs granted to {} (longest {longest:.0}s in transit)",
                handoff.granted.len(),
                to.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    if let Some(error) = &previous.error {
        events.push(PlannedEvent {
            warning: true,
            reason: reason::CONFIG_UNREADABLE,
            action: "WriteConfig",
            note: format!(
                "ConfigMap {}: {error}; rebuilt the assignment from scratch",
                valid.config_map_name
            ),
            related_pod: None,
        });
    }
    events
}

/// The warning that dedicated jobs share workers: raised when their number differs from what
/// the status reports, not on every reconcile.
fn not_enough_workers_event(
    pool: &SwarmPool,
    unmet: &[String],
    note: Option<&String>,
) -> Option<PlannedEvent> {
    let reported_unmet = pool.status.as_ref().and_then(|s| s.dedicated_unmet);
    if let Some(note) = note
        && reported_unmet != Some(count(unmet.len()))
    {
        return Some(PlannedEvent {
            warning: true,
            reason: reason::NOT_ENOUGH_WORKERS,
            action: "AssignJobs",
            note: note.clone(),
            related_pod: None,
        });
    }
    None
}

/// The events of the acknowledgements and timeouts of one step.
fn ack_events(acks: &AckProgress, timeout_seconds: i64) -> Vec<PlannedEvent> {
    let acknowledged = acks
        .acknowledged
        .iter()
        .map(|(pod, uid, version)| PlannedEvent {
            warning: false,
            reason: reason::WORKER_ACKNOWLEDGED,
            action: "Acknowledge",
            note: format!("pod {pod} (uid {uid}) acknowledged config version {version}"),
            related_pod: None,
        });
    let timed_out = acks.timed_out.iter().map(|(pod, uid)| PlannedEvent {
        warning: true,
        reason: reason::ACK_TIMED_OUT,
        action: "Acknowledge",
        note: format!(
            "pod {pod} (uid {uid}) did not acknowledge its jobs within {timeout_seconds} s; its pod is refreshed"
        ),
        related_pod: None,
    });
    acknowledged.chain(timed_out).collect()
}

/// The acknowledgement events of one reconcile as one event, naming the first few: a first
/// rollout of 1,000 workers would otherwise publish 1,000 events. The other events pass as
/// they are.
pub fn coalesce_acknowledgements(events: Vec<PlannedEvent>) -> Vec<PlannedEvent> {
    const NAMED: usize = 5;
    let (acks, mut rest): (Vec<_>, Vec<_>) = events
        .into_iter()
        .partition(|e| e.reason == reason::WORKER_ACKNOWLEDGED);
    if acks.len() <= 1 {
        rest.extend(acks);
        return rest;
    }
    let named: Vec<&str> = acks.iter().take(NAMED).map(|e| e.note.as_str()).collect();
    let more = acks.len().saturating_sub(NAMED);
    let mut note = format!("{} workers acknowledged: {}", acks.len(), named.join("; "));
    if more > 0 {
        note.push_str(&format!("; and {more} more"));
    }
    rest.push(PlannedEvent {
        note,
        ..acks.into_iter().next().expect("more than one")
    });
    rest
}

/// The action of a [`reason::WORKER_UNAVAILABLE`] event whose worker held jobs.
pub const FAILOVER: &str = "Failover";

/// The events of workers out of the pool since the last status, and of those back in it.
fn availability_events(
    pool: &SwarmPool,
    previous: &Previous,
    unavailable: &[UnavailableWorker],
) -> Vec<PlannedEvent> {
    let before: &[UnavailableWorker] = pool
        .status
        .as_ref()
        .map_or(&[], |status| status.unavailable_workers.as_slice());
    let held = |pod: &str| {
        previous
            .config
            .as_ref()
            .and_then(|config| config.workload(pod))
            .map_or(0, |workload| workload.jobs.len())
    };
    let listed = |list: &[UnavailableWorker], pod: &str| list.iter().any(|w| w.pod == pod);
    let grace = pool.spec.rollout.lease_grace_seconds;
    let newly = unavailable
        .iter()
        .filter(|w| !listed(before, &w.pod))
        .map(|w| PlannedEvent {
            warning: true,
            reason: reason::WORKER_UNAVAILABLE,
            // A failover when it held jobs (counted as such).
            action: if held(&w.pod) > 0 { FAILOVER } else { "Expire" },
            note: format!(
                "worker {}: {}; its {} jobs go to the other workers once it can no longer run them",
                w.pod,
                why(w.reason, grace),
                held(&w.pod)
            ),
            related_pod: None,
        });
    let back = before
        .iter()
        .filter(|w| !listed(unavailable, &w.pod))
        .map(|w| PlannedEvent {
            warning: false,
            reason: reason::WORKER_AVAILABLE,
            action: "Rejoin",
            note: format!(
                "worker {} is Ready on a live node (or gone); it is a member again",
                w.pod
            ),
            related_pod: None,
        });
    newly.chain(back).collect()
}

/// Why a worker is out of the pool, in an event.
fn why(reason: UnavailableReason, grace: i64) -> String {
    match reason {
        UnavailableReason::NotReady => format!("its pod has been NotReady for {grace} s or more"),
        UnavailableReason::NodeLeaseSilent => format!(
            "its node's Lease has not been renewed for {} s",
            NODE_SILENCE.as_secs()
        ),
    }
}

/// The event of a stale worker's deletion, naming the config version it restarts on.
fn refreshing_worker_event(d: &PodDelete, version: u64) -> PlannedEvent {
    PlannedEvent {
        warning: false,
        reason: reason::REFRESHING_WORKER,
        action: "DeletePod",
        note: format!(
            "deleting pod {} (uid {}) so it restarts on config version {version}",
            d.name, d.uid
        ),
        related_pod: Some((d.name.clone(), d.uid.clone())),
    }
}

/// What the status of a valid pool reports of its workers and jobs.
struct Reported {
    holdings: Holdings,
    stale: Vec<String>,
    verdict: Verdict,
}

/// What the status reports: the config as this plan writes it and the stale workers after it,
/// or, while paused, as they are written (nothing else is).
fn reported(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    publication: &Publication,
    (pending, awaiting): (PendingRefresh, AwaitingAcks),
    outdated: bool,
    unmet_note: Option<String>,
) -> Reported {
    let spec = &o.pool.spec;
    let paused = spec.paused;
    let workers = &valid.workers;
    // Paused: report what is written, not what would be.
    let (mut reported_pending, reported_awaiting, holdings) = if paused {
        let mut p = previous.pending.clone();
        p.retain_workers(workers);
        let written = previous.config.as_ref();
        let awaiting = previous.awaiting.clone();
        (p, awaiting, Holdings::of(written, &spec.jobs))
    } else {
        let holdings = Holdings::of(Some(&publication.config), &spec.jobs);
        (pending, awaiting, holdings)
    };
    // A worker that owes an acknowledgement is stale as much as one that must restart, and so
    // is a started worker that has not acknowledged what it runs.
    reported_pending.mark_unresolved(reported_awaiting.pods().filter(|pod| workers.contains(pod)));
    let reported_config = if paused {
        previous.config.as_ref()
    } else {
        Some(&publication.config)
    };
    if let (RolloutPolicy::Acknowledge, Some(config)) = (spec.rollout.policy, reported_config) {
        reported_pending.mark_unresolved(acknowledge::unacknowledged(config, workers, o.acks));
    }
    let stale = reported_pending.stale_workers(workers);
    let mut verdict = verdict(
        workers,
        &stale,
        holdings.in_transit,
        paused && (outdated || !stale.is_empty()),
        o.now,
    );
    if let Some(note) = unmet_note {
        verdict = verdict.degraded_by(reason::NOT_ENOUGH_WORKERS, note);
    }
    Reported {
        holdings,
        stale,
        verdict,
    }
}

/// The status of a valid pool: the counts of its spec and workers, and what is `reported`.
fn valid_status(
    o: &Observed,
    valid: &Valid,
    previous: &Previous,
    reported: Reported,
    dedicated_unmet: Option<i32>,
) -> SwarmPoolStatus {
    let pool = o.pool;
    let spec = &pool.spec;
    let workers = &valid.workers;
    let Reported {
        holdings,
        stale,
        verdict,
    } = reported;
    SwarmPoolStatus {
        observed_generation: pool.metadata.generation,
        phase: Some(verdict.phase),
        workload: Some(valid.workload_name.clone()),
        stateful_set: statefulset_of(o.pool, Some(&valid.workload_name)),
        workers: count(workers.len()),
        ready_workers: count(workers.ready()),
        ready: Some(format!("{}/{}", workers.ready(), workers.len())),
        jobs: count(spec.jobs.len()),
        unassigned_jobs: count(spec.jobs.len() - holdings.held - holdings.in_transit),
        jobs_in_transit: count(holdings.in_transit),
        dedicated_unmet,
        version: previous.version(),
        stale_workers: stale,
        unavailable_workers: Vec::new(),
        conditions: verdict.conditions(previous_conditions(pool), pool.metadata.generation, o.now),
    }
}

/// The plan of a pool that failed validation: nothing written or deleted, the reason reported.
pub(super) fn failure(o: &Observed, facts: &Facts, failure: Failure) -> Decision {
    let pool = o.pool;
    let previous = pool.status.as_ref();
    // Warn on the transition into this failure, not on every reconcile that still sees it.
    let already_reported = previous.is_some_and(|s| {
        s.phase == Some(Phase::Failed)
            && s.conditions.iter().any(|c| {
                c.type_ == conditions::READY
                    && c.reason == failure.reason.as_str()
                    && c.message == failure.message
            })
    });
    let events = if already_reported {
        Vec::new()
    } else {
        vec![PlannedEvent {
            warning: true,
            reason: failure.reason.as_str(),
            action: "Reconcile",
            note: failure.message.clone(),
            related_pod: None,
        }]
    };
    // Conflicts end when another object goes away, which is not watched.
    let requeue_after = if failure.reason.waits_on_another_object() {
        REQUEUE_CONFLICT
    } else {
        REQUEUE_IDLE
    };
    let verdict = Verdict::new(Phase::Failed, failure.reason.as_str(), failure.message);
    let workers = facts.workers.as_ref();
    let mut slices = worker_slices::Observed::of(
        &pool.config_map_name(),
        o.worker_config_maps.iter().copied(),
    );
    let written = Previous::read(o.config_map, &mut slices);
    let stale = match workers {
        Some(workers) => {
            let mut p = written.pending.clone();
            p.retain_workers(workers);
            p.stale_workers(workers)
        }
        None => Vec::new(),
    };
    let status = SwarmPoolStatus {
        observed_generation: pool.metadata.generation,
        phase: Some(Phase::Failed),
        workload: facts.workload.clone(),
        stateful_set: statefulset_of(o.pool, facts.workload.as_ref()),
        workers: workers.map_or(0, |w| count(w.len())),
        ready_workers: workers.map_or(0, |w| count(w.ready())),
        ready: workers.map(|w| format!("{}/{}", w.ready(), w.len())),
        // While `jobsFrom` cannot be resolved the jobs are not known: the last count stays.
        jobs: match o.jobs_unresolved {
            Some(_) => previous.map_or(0, |s| s.jobs),
            None => count(pool.spec.jobs.len()),
        },
        unassigned_jobs: previous.map_or(0, |s| s.unassigned_jobs),
        jobs_in_transit: previous.map_or(0, |s| s.jobs_in_transit),
        dedicated_unmet: previous.and_then(|s| s.dedicated_unmet),
        version: written.version(),
        stale_workers: stale,
        unavailable_workers: Vec::new(),
        conditions: verdict.conditions(previous_conditions(pool), pool.metadata.generation, o.now),
    };
    Decision {
        apply: None,
        slices: SliceWrites::default(),
        needs_live_slices: false,
        needs_live_pods: false,
        live_pods: BTreeSet::new(),
        deletes: Vec::new(),
        status,
        events,
        granted_after_seconds: Vec::new(),
        requeue_after,
    }
}

/// How many jobs of the spec a config gives to a worker, and how many it has in transit.
struct Holdings {
    held: usize,
    in_transit: usize,
}

impl Holdings {
    /// Counted by spec position, a bit per job: a pool of 100,000 jobs would otherwise build
    /// sets of their names (16 bytes per job each) next to the plan's own tables.
    fn of(config: Option<&WorkerConfig>, jobs: &[String]) -> Holdings {
        let Some(config) = config else {
            return Holdings {
                held: 0,
                in_transit: 0,
            };
        };
        let positions = Positions::new(jobs);
        let mut held = vec![false; jobs.len()];
        let held_jobs = config.workloads().flat_map(|(_, w)| &w.jobs);
        let held_count = mark(&mut held, held_jobs.filter_map(|job| positions.of(job)));
        let mut in_transit = held;
        let sent = config.transit().flat_map(|(_, jobs)| jobs);
        let in_transit_count = mark(&mut in_transit, sent.filter_map(|job| positions.of(job)));
        Holdings {
            held: held_count,
            in_transit: in_transit_count,
        }
    }
}

/// Marks `positions` in `marks`; returns how many were not marked before.
fn mark(marks: &mut [bool], positions: impl Iterator<Item = usize>) -> usize {
    positions
        .filter(|&position| !std::mem::replace(&mut marks[position], true))
        .count()
}

/// The phase rules, in order:
/// 1. Paused with changes not written or stale workers not refreshed: `Pending` (`Paused`).
/// 2. 0 replicas: `Degraded` (`NoReplicas`).
/// 3. No worker pod exists yet: `Pending` (`WaitingForWorkers`).
/// 4. A worker pod has not been Ready for [`STARTUP_GRACE`] or longer: `Degraded`
///    (`WorkersNotReady`).
/// 5. Jobs are in transit: `RollingOut` (`HandingOff`).
/// 6. Stale workers remain: `RollingOut` (`RollingOut`).
/// 7. A worker pod is missing, terminating or not yet Ready: `RollingOut` (`WorkersStarting`).
/// 8. Otherwise: `Balanced`.
fn verdict(
    workers: &Workers,
    stale: &[String],
    in_transit: usize,
    paused_with_changes: bool,
    now: Timestamp,
) -> Verdict {
    if let Some(held_back) = held_back_verdict(workers, paused_with_changes, now) {
        return held_back;
    }
    progress_verdict(workers, stale, in_transit)
}

/// Rules 1 to 4 of [`verdict`]: the pool is held back by `spec.paused`, or its workers are
/// missing or do not get Ready.
fn held_back_verdict(
    workers: &Workers,
    paused_with_changes: bool,
    now: Timestamp,
) -> Option<Verdict> {
    let n = workers.len();
    if paused_with_changes {
        return Some(Verdict::new(
            Phase::Pending,
            reason::PAUSED,
            "spec.paused holds back changes: nothing is written and no pod is deleted",
        ));
    }
    if n == 0 {
        return Some(Verdict::new(
            Phase::Degraded,
            reason::NO_REPLICAS,
            "the StatefulSet has 0 replicas: every job is unassigned",
        ));
    }
    if workers.iter().all(|(_, pod)| pod.is_none()) {
        return Some(Verdict::new(
            Phase::Pending,
            reason::WAITING_FOR_WORKERS,
            format!("waiting for the StatefulSet to create its {n} worker pods"),
        ));
    }
    let not_ready_too_long: Vec<&str> = workers
        .iter()
        .filter(|(_, pod)| {
            pod.is_some_and(|p| {
                !p.ready
                    && !p.terminating
                    && p.not_ready_since
                        .is_some_and(|since| now.duration_since(since) >= STARTUP_GRACE)
            })
        })
        .map(|(name, _)| name)
        .collect();
    if !not_ready_too_long.is_empty() {
        return Some(Verdict::new(
            Phase::Degraded,
            reason::WORKERS_NOT_READY,
            format!(
                "{}/{n} workers ready; not ready for {}s or more: {}",
                workers.ready(),
                STARTUP_GRACE.as_secs(),
                not_ready_too_long.join(", ")
            ),
        ));
    }
    None
}

/// Rules 5 to 8 of [`verdict`]: how far the roll-out has come.
fn progress_verdict(workers: &Workers, stale: &[String], in_transit: usize) -> Verdict {
    let n = workers.len();
    if in_transit > 0 {
        return Verdict::new(
            Phase::RollingOut,
            reason::HANDING_OFF,
            format!(
                "{in_transit} jobs in transit: revoked from their old workers, granted once the pods that ran them are gone"
            ),
        );
    }
    if !stale.is_empty() {
        return Verdict::new(
            Phase::RollingOut,
            reason::ROLLING_OUT,
            format!(
                "{} of {n} workers wait to restart on the new config: {}",
                stale.len(),
                stale.join(", ")
            ),
        );
    }
    if workers.unavailable() > 0 {
        return Verdict::new(
            Phase::RollingOut,
            reason::WORKERS_STARTING,
            format!("{}/{n} workers ready", workers.ready()),
        );
    }
    Verdict::new(
        Phase::Balanced,
        reason::BALANCED,
        format!("{n} workers ready on the current config"),
    )
}

/// Why some dedicated jobs share a worker, and the replicas that would give each its own.
fn not_enough_workers_note(
    unmet: &[String],
    dedicated: usize,
    jobs: usize,
    workers: usize,
) -> String {
    const NAMED: usize = 5;
    let needed = dedicated + usize::from(jobs > dedicated);
    let mut named = unmet[..unmet.len().min(NAMED)].join(", ");
    if unmet.len() > NAMED {
        named.push_str(&format!(" and {} more", unmet.len() - NAMED));
    }
    format!(
        "{} of {dedicated} dedicated jobs run as shared jobs: {workers} workers are too few, {needed} would give each its own worker ({named})",
        unmet.len(),
    )
}

fn normal(reason: &'static str, action: &'static str, note: String) -> PlannedEvent {
    PlannedEvent {
        warning: false,
        reason,
        action,
        note,
        related_pod: None,
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn previous_conditions(pool: &SwarmPool) -> &[Condition] {
    pool.status
        .as_ref()
        .map_or(&[], |s| s.conditions.as_slice())
}

fn rebalanced_note(
    previous: Option<&WorkerConfig>,
    publication: &Publication,
    jobs: usize,
    handoff: &HandoffOutcome,
) -> String {
    let config = &publication.config;
    let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
    if loads.is_empty() {
        return format!(
            "config version {}: {jobs} jobs unassigned, the StatefulSet has 0 replicas",
            config.version
        );
    }
    let (min, max) = (
        loads.iter().min().copied().unwrap_or(0),
        loads.iter().max().copied().unwrap_or(0),
    );
    let in_transit = match handoff.jobs_in_transit {
        0 => String::new(),
        n => format!(", {n} in transit"),
    };
    format!(
        "config version {}: {jobs} jobs on {} workers ({min}..{max} each){in_transit}, {} jobs moved, {} workers changed",
        config.version,
        loads.len(),
        jobs_moved(previous, config),
        publication.touched.len(),
    )
}

/// Jobs a worker of `next` holds that, in `previous`, another worker held or that were in
/// transit: the jobs that arrive at a new worker with this version.
fn jobs_moved(previous: Option<&WorkerConfig>, next: &WorkerConfig) -> usize {
    let Some(previous) = previous else { return 0 };
    let mut before = Vec::new();
    for (pod, workload) in previous.workloads() {
        before.extend(workload.jobs.iter().map(|job| (job.as_str(), pod)));
    }
    for (pod, jobs) in previous.transit() {
        before.extend(jobs.iter().map(|job| (job.as_str(), pod)));
    }
    let before = ByJob::new(before);
    next.workloads()
        .flat_map(|(pod, w)| w.jobs.iter().map(move |job| (pod, job.as_str())))
        .filter(|(pod, job)| {
            let mut was_at = before.get(job).peekable();
            was_at.peek().is_some() && was_at.all(|at| at != *pod)
        })
        .count()
}

/// `status.statefulSet`, kept for StatefulSet pools so readers of the older field still work.
fn statefulset_of(pool: &SwarmPool, workload: Option<&String>) -> Option<String> {
    (pool.spec.workload_kind == WorkloadKind::StatefulSet)
        .then(|| workload.cloned())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acknowledged(pod: &str) -> PlannedEvent {
        let progress = AckProgress {
            acknowledged: vec![(pod.to_owned(), format!("uid-{pod}"), 3)],
            timed_out: Vec::new(),
        };
        ack_events(&progress, 60).remove(0)
    }

    #[test]
    fn the_acknowledgements_of_a_reconcile_make_one_event_naming_the_first_five() {
        let other = PlannedEvent {
            warning: true,
            reason: reason::ACK_TIMED_OUT,
            action: "Acknowledge",
            note: "late".into(),
            related_pod: None,
        };
        let mut events: Vec<PlannedEvent> =
            (0..7).map(|i| acknowledged(&format!("w-{i}"))).collect();
        events.push(other.clone());
        let published = coalesce_acknowledgements(events);
        assert_eq!(published.len(), 2);
        assert_eq!(published[0], other);
        let note = &published[1].note;
        assert!(
            note.starts_with("7 workers acknowledged: pod w-0 (uid uid-w-0)"),
            "{note}"
        );
        assert!(note.contains("w-4") && !note.contains("w-5"), "{note}");
        assert!(note.ends_with("; and 2 more"), "{note}");
        // One alone is published as it is.
        let one = coalesce_acknowledgements(vec![acknowledged("w-0")]);
        assert_eq!(one, vec![acknowledged("w-0")]);
    }
}
