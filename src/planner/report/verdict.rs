//! The phase and the `Ready` condition of a valid pool: held back, or how far its roll-out
//! has come.

use k8s_openapi::jiff::Timestamp;

use crate::api::conditions::{Verdict, reason};
use crate::api::crd::Phase;
use crate::planner::STARTUP_GRACE;
use crate::planner::rollout::Workers;

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
pub(super) fn verdict(
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
