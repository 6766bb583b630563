//! The events of a plan: the ConfigMap write and what it revokes and grants, the workers
//! deleted, acknowledging, out of the pool and back, and dedicated jobs sharing workers.

use std::collections::BTreeSet;

use swarm_assign::Publication;
use swarm_protocol::config::WorkerConfig;

use super::count;
use crate::api::conditions::reason;
use crate::api::crd::{SwarmPool, UnavailableReason, UnavailableWorker};
use crate::planner::PlannedEvent;
use crate::planner::acknowledge::AckProgress;
use crate::planner::by_job::ByJob;
use crate::planner::handoff::HandoffOutcome;
use crate::planner::rollout::PodDelete;
use crate::planner::validate::Valid;
use crate::state::config_map::Previous;
use crate::state::node_leases::NODE_SILENCE;

/// The events of a ConfigMap write: the new assignment, the jobs it revokes and grants, and a
/// warning when the config it replaces could not be read.
pub(super) fn write_events(
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
pub(super) fn not_enough_workers_event(
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
pub(super) fn ack_events(acks: &AckProgress, timeout_seconds: i64) -> Vec<PlannedEvent> {
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
pub(super) fn availability_events(
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
pub(super) fn refreshing_worker_event(d: &PodDelete, version: u64) -> PlannedEvent {
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

/// Why some dedicated jobs share a worker, and the replicas that would give each its own.
pub(super) fn not_enough_workers_note(
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
