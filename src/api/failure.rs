//! Why a pool cannot be planned as specified: its phase is then Failed, with a condition whose
//! reason is one of [`crate::api::conditions::reason`] and whose message says what to fix.

use crate::api::conditions::reason;

/// Why the pool cannot be reconciled as specified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Why, as the condition reason says it.
    pub reason: FailureReason,
    /// What to fix, for the condition message and the Warning event.
    pub message: String,
}

impl Failure {
    /// A failure for `reason`, saying `message`.
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// Why a pool cannot be planned (phase Failed); its condition reason is [`FailureReason::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// `spec.jobs` (or a jobs source) has an empty or repeated job.
    InvalidJobs,
    /// `spec.qos` does not fit the pool's jobs and workers.
    InvalidQos,
    /// `spec.rollout.maxUnavailable` is not a count or a percentage.
    InvalidMaxUnavailable,
    /// The rollout settings do not fit together (for example `None` without `Overlap`).
    InvalidRollout,
    /// `spec.selector` selects everything.
    EmptySelector,
    /// `spec.selector` cannot be parsed.
    InvalidSelector,
    /// No StatefulSet matches the selector.
    StatefulSetNotFound,
    /// No Deployment matches the selector.
    DeploymentNotFound,
    /// More than one workload matches the selector.
    AmbiguousSelector,
    /// Another pool already shares out the matched StatefulSet.
    StatefulSetInUse,
    /// Another pool already shares out the matched Deployment.
    DeploymentInUse,
    /// The pool's ConfigMap (or a worker's) exists and is not this pool's.
    ConfigMapConflict,
    /// The config would not fit in a ConfigMap.
    ConfigMapTooLarge,
    /// A ConfigMap (or key) of `spec.jobsFrom` does not exist.
    JobsSourceNotFound,
    /// A ConfigMap of `spec.jobsFrom` lacks the jobs-source label.
    JobsSourceNotLabelled,
    /// A ConfigMap of `spec.jobsFrom` cannot be read as a job list.
    JobsSourceUnreadable,
}

impl FailureReason {
    /// The condition and event reason (see [`reason`]).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::InvalidJobs => reason::INVALID_JOBS,
            FailureReason::InvalidQos => reason::INVALID_QOS,
            FailureReason::InvalidMaxUnavailable => reason::INVALID_MAX_UNAVAILABLE,
            FailureReason::InvalidRollout => reason::INVALID_ROLLOUT,
            FailureReason::EmptySelector => reason::EMPTY_SELECTOR,
            FailureReason::InvalidSelector => reason::INVALID_SELECTOR,
            FailureReason::StatefulSetNotFound => reason::STATEFUL_SET_NOT_FOUND,
            FailureReason::DeploymentNotFound => reason::DEPLOYMENT_NOT_FOUND,
            FailureReason::AmbiguousSelector => reason::AMBIGUOUS_SELECTOR,
            FailureReason::StatefulSetInUse => reason::STATEFUL_SET_IN_USE,
            FailureReason::DeploymentInUse => reason::DEPLOYMENT_IN_USE,
            FailureReason::ConfigMapConflict => reason::CONFIG_MAP_CONFLICT,
            FailureReason::ConfigMapTooLarge => reason::CONFIG_MAP_TOO_LARGE,
            FailureReason::JobsSourceNotFound => reason::JOBS_SOURCE_NOT_FOUND,
            FailureReason::JobsSourceNotLabelled => reason::JOBS_SOURCE_NOT_LABELLED,
            FailureReason::JobsSourceUnreadable => reason::JOBS_SOURCE_UNREADABLE,
        }
    }

    /// Whether the failure ends only on a change the operator does not watch (the other
    /// ConfigMap or the older pool going away, a jobs source created without its label, a
    /// permission granted): worth checking again sooner.
    pub fn waits_on_another_object(self) -> bool {
        matches!(
            self,
            FailureReason::ConfigMapConflict
                | FailureReason::StatefulSetInUse
                | FailureReason::DeploymentInUse
                | FailureReason::JobsSourceNotFound
                | FailureReason::JobsSourceNotLabelled
                | FailureReason::JobsSourceUnreadable
        )
    }
}
