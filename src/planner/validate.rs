//! Step 1 of the pipeline: is the pool servable as specified, and what does it manage?
//!
//! Matching a pool to its workload is in [`workload`], over one `Workload` impl per kind
//! ([`statefulset`], [`deployment`]).

mod deployment;
mod statefulset;
pub(crate) mod workload;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use swarm_assign::{Rebound, Roster, validate_jobs, validate_qos};

use super::Observed;
use crate::api::crd::{Handoff, RolloutPolicy, SwarmPool, WorkloadKind};
use crate::api::failure::{Failure, FailureReason};
use crate::planner::rollout::{self, Workers};
pub(crate) use workload::Workload;
use workload::match_workload;

/// What is known about the pool while validating; a failure's status is built from it.
#[derive(Default)]
pub(super) struct Facts {
    /// Name of the matched workload.
    pub workload: Option<String>,
    pub workers: Option<Workers>,
}

/// A pool that passed validation, with what the later steps need.
pub(super) struct Valid {
    /// Name of the matched StatefulSet or Deployment.
    pub workload_name: String,
    /// The workers in position order and their pods.
    pub workers: Workers,
    /// The pod each position is published under.
    pub roster: Roster,
    /// Deployment pools: the slot table after this plan's rebinding.
    pub slots: Option<Rebound>,
    pub max_unavailable: usize,
    pub config_map_name: String,
}

impl Valid {
    /// Whether the workers are a Deployment's pods (slots) rather than a StatefulSet's.
    pub fn has_slots(&self) -> bool {
        self.slots.is_some()
    }
}

/// Checks the pool against what it refers to. Every check that fails says what to fix.
pub(super) fn validate(o: &Observed, facts: &mut Facts) -> Result<Valid, Failure> {
    let pool = o.pool;
    let spec = &pool.spec;

    let selector = pool_selector(&spec.selector, spec.workload_kind)?;
    let matched = match_workload(o, &selector)?;
    facts.workload = Some(matched.name.clone());
    facts.workers = Some(matched.members.workers.clone());
    let replicas = matched.replicas;

    if let Some(unresolved) = o.jobs_unresolved {
        return Err(Failure::new(
            unresolved.failure_reason(),
            unresolved.to_string(),
        ));
    }
    validate_jobs(&spec.jobs)
        .map_err(|e| Failure::new(FailureReason::InvalidJobs, e.to_string()))?;
    if let Some(qos) = &spec.qos {
        validate_qos(&spec.jobs, qos)
            .map_err(|e| Failure::new(FailureReason::InvalidQos, e.to_string()))?;
    }
    let max_unavailable = rollout::max_unavailable(&spec.rollout.max_unavailable, replicas)
        .map_err(|e| Failure::new(FailureReason::InvalidMaxUnavailable, e.to_string()))?;
    if spec.rollout.policy == RolloutPolicy::None && spec.rollout.handoff == Handoff::Exclusive {
        return Err(Failure::new(
            FailureReason::InvalidRollout,
            "rollout.handoff Exclusive needs rollout.policy DeletePods: with policy None the workers reload by themselves and the operator cannot tell when one has stopped a job; set rollout.handoff: Overlap or rollout.policy: DeletePods",
        ));
    }

    let config_map_name = pool.config_map_name();
    if let Some(cm) = o.config_map {
        check_ownership(pool, cm, &config_map_name)?;
    }
    Ok(Valid {
        workload_name: matched.name,
        workers: matched.members.workers,
        roster: matched.members.roster,
        slots: matched.members.slots,
        max_unavailable,
        config_map_name,
    })
}

/// The pool's selector as a [`Selector`]; an empty one would match every workload.
fn pool_selector(selector: &LabelSelector, kind: WorkloadKind) -> Result<Selector, Failure> {
    let empty = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty);
    if empty {
        return Err(Failure::new(
            FailureReason::EmptySelector,
            format!(
                "spec.selector is empty and would match every {}; set matchLabels or matchExpressions",
                kind.as_str()
            ),
        ));
    }
    Selector::try_from(selector.clone()).map_err(|e| {
        Failure::new(
            FailureReason::InvalidSelector,
            format!("spec.selector: {}", e.0),
        )
    })
}

/// Whether `selector` matches the labels of `workload`.
pub fn selects(selector: &LabelSelector, workload: &impl ResourceExt) -> bool {
    pool_selector(selector, WorkloadKind::default()).is_ok_and(|s| s.matches(workload.labels()))
}

fn check_ownership(pool: &SwarmPool, cm: &ConfigMap, name: &str) -> Result<(), Failure> {
    let pool_uid = pool.metadata.uid.as_deref();
    match cm
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        Some(owner) if Some(owner.uid.as_str()) != pool_uid => Err(Failure::new(
            FailureReason::ConfigMapConflict,
            format!(
                "ConfigMap {name} is controlled by {} {} (uid {}); delete it or set spec.configMap to another name",
                owner.kind, owner.name, owner.uid
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use proptest::prelude::*;

    use super::*;

    /// Label keys, values and operators as a user might mistype them.
    fn label_text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9./_-]{0,12}|\\PC{0,8}|In|NotIn|Exists|DoesNotExist"
    }

    fn selector() -> impl Strategy<Value = LabelSelector> {
        let labels = prop::collection::btree_map(label_text(), label_text(), 0..3);
        let requirement = (
            label_text(),
            label_text(),
            prop::option::of(prop::collection::vec(label_text(), 0..3)),
        )
            .prop_map(|(key, operator, values)| LabelSelectorRequirement {
                key,
                operator,
                values,
            });
        (
            prop::option::of(labels),
            prop::option::of(prop::collection::vec(requirement, 0..3)),
        )
            .prop_map(|(match_labels, match_expressions)| LabelSelector {
                match_labels,
                match_expressions,
            })
    }

    /// Found by the property below: the percentage times the replicas overflowed.
    #[test]
    fn a_percentage_of_39_digits_is_a_count_not_an_overflow() {
        let huge = IntOrString::String(format!("{}%", u128::MAX));
        assert_eq!(rollout::max_unavailable(&huge, 3), Ok(usize::MAX));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any selector is taken or refused naming spec.selector, never a panic.
        #[test]
        fn any_selector_is_taken_or_refused_naming_spec_selector(selector in selector()) {
            if let Err(failure) = pool_selector(&selector, WorkloadKind::default()) {
                prop_assert!(failure.message.contains("spec.selector"), "{}", failure.message);
            }
        }

        /// Any rollout.maxUnavailable is a count of at least 1, or refused quoting the value.
        #[test]
        fn any_max_unavailable_is_at_least_one_or_refused_quoting_it(
            value in prop_oneof![
                any::<i32>().prop_map(IntOrString::Int),
                "[-+ 0-9%.]{0,8}|[1-9][0-9]{30,45}%|\\PC{0,8}".prop_map(IntOrString::String),
            ],
            replicas in 0_usize..100_000,
        ) {
            match rollout::max_unavailable(&value, replicas) {
                Ok(n) => prop_assert!(n >= 1),
                Err(error) => {
                    let given = match &value {
                        IntOrString::Int(n) => n.to_string(),
                        IntOrString::String(text) => text.clone(),
                    };
                    prop_assert!(error.to_string().contains(&format!("{given:?}")), "{}", error);
                }
            }
        }

        /// Any job list is taken, or refused naming the empty position or the repeated job.
        #[test]
        fn any_job_list_is_taken_or_refused_naming_the_job(jobs in prop::collection::vec("[ab]{0,2}|\\PC{0,4}", 0..8)) {
            match validate_jobs(&jobs) {
                Ok(()) => prop_assert!(jobs.iter().all(|job| !job.is_empty())),
                Err(error) => {
                    let message = error.to_string();
                    let named = jobs.iter().enumerate().any(|(i, job)| {
                        (job.is_empty() && message.contains(&format!("spec.jobs[{i}]")))
                            || message.contains(&format!("{job:?}"))
                    });
                    prop_assert!(named, "{}", message);
                }
            }
        }
    }
}
