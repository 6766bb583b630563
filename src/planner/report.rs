//! Step 5 of the pipeline: the status, its conditions and the events.
//!
//! The status is built here; the phase rules are in `verdict`, the events in `events`.

mod events;
mod verdict;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use swarm_assign::Publication;
use swarm_protocol::config::WorkerConfig;

use super::acknowledge;
use super::by_job::Positions;
use super::config_map::Previous;
use super::handoff::HandoffOutcome;
use super::membership::Membership;
use super::validate::{Facts, Valid};
use super::{
    Decision, EXPIRY_SLACK, Observed, PlannedEvent, REQUEUE_CONFLICT, REQUEUE_IDLE,
    REQUEUE_ROLLING, Rollout,
};
use crate::api::conditions::{self, Verdict, reason};
use crate::api::crd::{Phase, RolloutPolicy, SwarmPool, SwarmPoolStatus, WorkloadKind};
use crate::api::failure::Failure;
use crate::state::records::{AwaitingAcks, PendingRefresh};
use crate::state::worker_slices::{self, SliceWrites};
pub use events::{FAILOVER, coalesce_acknowledgements};
use events::{
    ack_events, availability_events, not_enough_workers_event, not_enough_workers_note,
    refreshing_worker_event, write_events,
};
use verdict::verdict;

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

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn previous_conditions(pool: &SwarmPool) -> &[Condition] {
    pool.status
        .as_ref()
        .map_or(&[], |s| s.conditions.as_slice())
}

/// `status.statefulSet`, kept for StatefulSet pools so readers of the older field still work.
fn statefulset_of(pool: &SwarmPool, workload: Option<&String>) -> Option<String> {
    (pool.spec.workload_kind == WorkloadKind::StatefulSet)
        .then(|| workload.cloned())
        .flatten()
}
