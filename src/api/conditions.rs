//! Status conditions and their reasons.
//!
//! One reason describes the pool at a time; it is the reason of all three conditions
//! (`Ready`, `Progressing`, `Degraded`), each with its own True/False. The exception is a
//! lasting degradation that does not stop a rollout (too few workers for the dedicated jobs):
//! it makes `Degraded` True with its own reason while the phase stays `RollingOut`. A
//! condition's `lastTransitionTime` changes only when its status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::crd::Phase;

/// Condition type: the pool is Balanced.
pub const READY: &str = "Ready";
/// Condition type: the operator is moving the pool towards its spec (refreshing or starting workers).
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the pool runs with reduced capacity or cannot be reconciled.
pub const DEGRADED: &str = "Degraded";

/// Reason constants, PascalCase, as they appear in conditions and events.
pub mod reason {
    /// The ConfigMap is current, no worker is stale and every worker is Ready.
    pub const BALANCED: &str = "Balanced";
    /// Stale workers are waiting to be refreshed.
    pub const ROLLING_OUT: &str = "RollingOut";
    /// Worker pods are being created, restarted or becoming Ready.
    pub const WORKERS_STARTING: &str = "WorkersStarting";
    /// No worker pod exists yet.
    pub const WAITING_FOR_WORKERS: &str = "WaitingForWorkers";
    /// A worker has not been Ready for longer than the startup grace period.
    pub const WORKERS_NOT_READY: &str = "WorkersNotReady";
    /// The StatefulSet has 0 replicas: every job is unassigned.
    pub const NO_REPLICAS: &str = "NoReplicas";
    /// `spec.paused` holds back changes that are not written yet.
    pub const PAUSED: &str = "Paused";
    /// No StatefulSet in the namespace matches the selector.
    pub const STATEFUL_SET_NOT_FOUND: &str = "StatefulSetNotFound";
    /// An older SwarmPool already selects the same StatefulSet.
    pub const STATEFUL_SET_IN_USE: &str = "StatefulSetInUse";
    /// No Deployment matches the selector (`workloadKind: Deployment`).
    pub const DEPLOYMENT_NOT_FOUND: &str = "DeploymentNotFound";
    /// The Deployment is already managed by an older pool.
    pub const DEPLOYMENT_IN_USE: &str = "DeploymentInUse";
    /// Several StatefulSets match the selector.
    pub const AMBIGUOUS_SELECTOR: &str = "AmbiguousSelector";
    /// The selector is empty and would match every StatefulSet.
    pub const EMPTY_SELECTOR: &str = "EmptySelector";
    /// The selector has an expression the operator cannot evaluate.
    pub const INVALID_SELECTOR: &str = "InvalidSelector";
    /// A job is empty or listed twice (over `spec.jobs` and `spec.jobsFrom`).
    pub const INVALID_JOBS: &str = "InvalidJobs";
    /// A ConfigMap named in `spec.jobsFrom` does not exist, or has no such key.
    pub const JOBS_SOURCE_NOT_FOUND: &str = "JobsSourceNotFound";
    /// A ConfigMap named in `spec.jobsFrom` lacks the `swarm.io/jobs-source` label, so it is
    /// not watched.
    pub const JOBS_SOURCE_NOT_LABELLED: &str = "JobsSourceNotLabelled";
    /// A ConfigMap named in `spec.jobsFrom` cannot be read (the API server refused).
    pub const JOBS_SOURCE_UNREADABLE: &str = "JobsSourceUnreadable";
    /// `qos` names a job that is not in `spec.jobs`, lists one twice, or has a bad weight.
    pub const INVALID_QOS: &str = "InvalidQoS";
    /// Some `qos.dedicated` jobs run as shared jobs: there are too few workers to give each its
    /// own.
    pub const NOT_ENOUGH_WORKERS: &str = "NotEnoughWorkers";
    /// `rollout.maxUnavailable` is neither a non-negative integer nor a percentage.
    pub const INVALID_MAX_UNAVAILABLE: &str = "InvalidMaxUnavailable";
    /// The rendered `config.yml` does not fit in a ConfigMap.
    pub const CONFIG_MAP_TOO_LARGE: &str = "ConfigMapTooLarge";
    /// The ConfigMap is controlled by another object.
    pub const CONFIG_MAP_CONFLICT: &str = "ConfigMapConflict";
    /// Jobs are in transit: revoked from their old workers, granted once those pods are gone.
    pub const HANDING_OFF: &str = "HandingOff";
    /// `rollout.handoff` and `rollout.policy` do not go together.
    pub const INVALID_ROLLOUT: &str = "InvalidRollout";
    /// Event reason: jobs were revoked from the workers that held them (now in transit).
    pub const JOBS_REVOKED: &str = "JobsRevoked";
    /// Event reason: jobs in transit were granted to their new workers.
    pub const JOBS_GRANTED: &str = "JobsGranted";
    /// Event reason: a new config version was written.
    pub const REBALANCED: &str = "Rebalanced";
    /// Event reason: a worker acknowledged the version that changed its jobs
    /// (`rollout.policy: Acknowledge`).
    pub const WORKER_ACKNOWLEDGED: &str = "WorkerAcknowledged";
    /// Event reason: a worker did not acknowledge its jobs in time; its pod is refreshed.
    pub const ACK_TIMED_OUT: &str = "AckTimedOut";
    /// Event reason: a worker is out of the pool (its pod NotReady, its node's Lease silent);
    /// its jobs go to the other workers.
    pub const WORKER_UNAVAILABLE: &str = "WorkerUnavailable";
    /// Event reason: a worker out of the pool is back; it is a member again.
    pub const WORKER_AVAILABLE: &str = "WorkerAvailable";
    /// Event reason: a stale worker's pod was deleted to load the new config.
    pub const REFRESHING_WORKER: &str = "RefreshingWorker";
    /// A watch cache of the operator has been failing: phase Degraded, `Ready` Unknown, and the
    /// rest of the status may be out of date.
    pub const STALE_CACHE: &str = "StaleCache";
    /// Event reason: the ConfigMap's `config.yml` could not be read and was rebuilt.
    pub const CONFIG_UNREADABLE: &str = "ConfigUnreadable";
}

/// Where the pool stands: the phase plus the reason and message shared by the conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `status.phase`.
    pub phase: Phase,
    /// PascalCase reason (one of [`reason`]).
    pub reason: &'static str,
    /// Human-readable explanation.
    pub message: String,
    /// A degradation reported by the `Degraded` condition whatever the phase: reason and
    /// message.
    pub degraded_by: Option<(&'static str, String)>,
}

impl Verdict {
    /// Builds a verdict.
    pub fn new(phase: Phase, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            phase,
            reason,
            message: message.into(),
            degraded_by: None,
        }
    }

    /// This verdict with `Degraded` True for `reason`: a `Balanced` pool becomes `Degraded` with
    /// it; a pool in another phase keeps its phase, and only the `Degraded` condition says it.
    pub fn degraded_by(self, reason: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        match self.phase {
            Phase::Balanced => Self::new(Phase::Degraded, reason, message),
            Phase::Degraded | Phase::Failed => self,
            _ => Self {
                degraded_by: Some((reason, message)),
                ..self
            },
        }
    }

    fn statuses(&self) -> [(&'static str, bool); 3] {
        let progressing =
            matches!(self.phase, Phase::RollingOut) || self.reason == reason::WAITING_FOR_WORKERS;
        [
            (READY, self.phase == Phase::Balanced),
            (PROGRESSING, progressing),
            (
                DEGRADED,
                matches!(self.phase, Phase::Degraded | Phase::Failed),
            ),
        ]
    }

    /// The `Ready`, `Progressing` and `Degraded` conditions for this verdict. A condition keeps
    /// the `lastTransitionTime` of its `previous` namesake when its status did not flip.
    pub fn conditions(
        &self,
        previous: &[Condition],
        generation: Option<i64>,
        now: Timestamp,
    ) -> Vec<Condition> {
        self.statuses()
            .into_iter()
            .map(|(type_, is_true)| {
                let (is_true, reason, message) = match &self.degraded_by {
                    Some((reason, message)) if type_ == DEGRADED => (true, *reason, message),
                    _ => (is_true, self.reason, &self.message),
                };
                let status = if is_true { "True" } else { "False" };
                let last_transition_time = previous
                    .iter()
                    .find(|c| c.type_ == type_ && c.status == status)
                    .map(|c| c.last_transition_time.clone())
                    .unwrap_or(Time(now));
                Condition {
                    type_: type_.to_owned(),
                    status: status.to_owned(),
                    reason: reason.to_owned(),
                    message: message.clone(),
                    observed_generation: generation,
                    last_transition_time,
                }
            })
            .collect()
    }
}

/// The conditions of a pool whose state the operator cannot see: `Ready` and `Progressing`
/// Unknown, `Degraded` True, all with reason `StaleCache` and `message`. A condition keeps the
/// `lastTransitionTime` of its `previous` namesake when its status did not flip.
pub fn unknown(
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
    message: &str,
) -> Vec<Condition> {
    [
        (READY, "Unknown"),
        (PROGRESSING, "Unknown"),
        (DEGRADED, "True"),
    ]
    .into_iter()
    .map(|(type_, status)| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason::STALE_CACHE.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now)),
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn find<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
        conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn balanced_is_ready_not_progressing_not_degraded() {
        let c =
            Verdict::new(Phase::Balanced, reason::BALANCED, "ok").conditions(&[], Some(3), at(10));
        assert_eq!(find(&c, READY).status, "True");
        assert_eq!(find(&c, PROGRESSING).status, "False");
        assert_eq!(find(&c, DEGRADED).status, "False");
        assert!(
            c.iter()
                .all(|c| c.reason == "Balanced" && c.observed_generation == Some(3))
        );
    }

    #[test]
    fn failed_is_degraded_with_the_failure_reason() {
        let v = Verdict::new(Phase::Failed, reason::STATEFUL_SET_NOT_FOUND, "none");
        let c = v.conditions(&[], None, at(10));
        assert_eq!(find(&c, READY).status, "False");
        assert_eq!(find(&c, READY).reason, "StatefulSetNotFound");
        assert_eq!(find(&c, DEGRADED).status, "True");
    }

    #[test]
    fn waiting_for_workers_counts_as_progressing() {
        let v = Verdict::new(Phase::Pending, reason::WAITING_FOR_WORKERS, "");
        let c = v.conditions(&[], None, at(1));
        assert_eq!(find(&c, PROGRESSING).status, "True");
        let paused = Verdict::new(Phase::Pending, reason::PAUSED, "").conditions(&[], None, at(1));
        assert_eq!(find(&paused, PROGRESSING).status, "False");
    }

    #[test]
    fn a_lasting_degradation_shows_in_degraded_while_a_rollout_goes_on() {
        let rolling = Verdict::new(Phase::RollingOut, reason::ROLLING_OUT, "2 stale")
            .degraded_by(reason::NOT_ENOUGH_WORKERS, "1 dedicated job shared");
        assert_eq!(rolling.phase, Phase::RollingOut);
        let c = rolling.conditions(&[], None, at(1));
        assert_eq!(find(&c, PROGRESSING).status, "True");
        assert_eq!(find(&c, PROGRESSING).reason, "RollingOut");
        assert_eq!(find(&c, DEGRADED).status, "True");
        assert_eq!(find(&c, DEGRADED).reason, "NotEnoughWorkers");
        assert_eq!(find(&c, DEGRADED).message, "1 dedicated job shared");

        let settled = Verdict::new(Phase::Balanced, reason::BALANCED, "ok")
            .degraded_by(reason::NOT_ENOUGH_WORKERS, "1 dedicated job shared");
        assert_eq!(settled.phase, Phase::Degraded);
        let c = settled.conditions(&[], None, at(1));
        assert_eq!(find(&c, READY).status, "False");
        assert!(c.iter().all(|c| c.reason == "NotEnoughWorkers"));

        let no_replicas = Verdict::new(Phase::Degraded, reason::NO_REPLICAS, "0")
            .degraded_by(reason::NOT_ENOUGH_WORKERS, "x");
        assert_eq!(no_replicas.reason, reason::NO_REPLICAS);
    }

    #[test]
    fn a_stale_cache_makes_ready_unknown_and_degraded_true() {
        let balanced =
            Verdict::new(Phase::Balanced, reason::BALANCED, "ok").conditions(&[], Some(2), at(10));
        let c = unknown(&balanced, Some(2), at(20), "the pods watch has failed");
        assert_eq!(find(&c, READY).status, "Unknown");
        assert_eq!(find(&c, PROGRESSING).status, "Unknown");
        assert_eq!(find(&c, DEGRADED).status, "True");
        assert!(
            c.iter()
                .all(|c| c.reason == "StaleCache" && c.message.contains("pods watch"))
        );
        assert!(c.iter().all(|c| c.last_transition_time == Time(at(20))));
        let again = unknown(&c, Some(2), at(30), "still");
        assert!(again.iter().all(|c| c.last_transition_time == Time(at(20))));
    }

    #[test]
    fn last_transition_time_changes_only_when_the_status_flips() {
        let first = Verdict::new(Phase::RollingOut, reason::ROLLING_OUT, "a").conditions(
            &[],
            None,
            at(100),
        );
        // Same statuses, other reason and message: every transition time is kept.
        let second = Verdict::new(Phase::RollingOut, reason::WORKERS_STARTING, "b").conditions(
            &first,
            None,
            at(200),
        );
        for type_ in [READY, PROGRESSING, DEGRADED] {
            assert_eq!(find(&second, type_).last_transition_time, Time(at(100)));
        }
        // Ready and Progressing flip, Degraded stays False.
        let third =
            Verdict::new(Phase::Balanced, reason::BALANCED, "c").conditions(&second, None, at(300));
        assert_eq!(find(&third, READY).last_transition_time, Time(at(300)));
        assert_eq!(
            find(&third, PROGRESSING).last_transition_time,
            Time(at(300))
        );
        assert_eq!(find(&third, DEGRADED).last_transition_time, Time(at(100)));
    }
}
