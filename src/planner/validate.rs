//! Step 1 of the pipeline: is the pool servable as specified, and what does it manage?

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use swarm_assign::{validate_jobs, validate_qos};

use super::Observed;
use crate::conditions::reason;
use crate::crd::{Handoff, RolloutPolicy, SwarmPool};
use crate::pod_summary::PodSummary;
use crate::rollout::{self, WorkerPod, Workers};

/// Why the pool cannot be reconciled as specified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// What is known about the pool while validating; a failure's status is built from it.
#[derive(Default)]
pub(super) struct Facts {
    pub statefulset: Option<String>,
    pub workers: Option<Workers>,
}

/// A pool that passed validation, with what the later steps need.
pub(super) struct Valid {
    /// Name of the matched StatefulSet.
    pub statefulset_name: String,
    /// The workers `0..N-1` and their pods.
    pub workers: Workers,
    pub max_unavailable: usize,
    pub config_map_name: String,
}

/// Checks the pool against what it refers to. Every check that fails says what to fix.
pub(super) fn validate(o: &Observed, facts: &mut Facts) -> Result<Valid, Failure> {
    let pool = o.pool;
    let spec = &pool.spec;
    let namespace = pool.namespace().unwrap_or_default();

    let selector = pool_selector(&spec.selector)?;
    let sts = match_statefulset(&selector, &namespace, &o.statefulsets)?;
    let sts_name = sts.name_any();
    if let Some(owner) = older_pool_selecting(pool, sts, &o.other_pools) {
        return Err(Failure::new(
            reason::STATEFUL_SET_IN_USE,
            format!(
                "StatefulSet {sts_name} is already managed by the older SwarmPool {owner}; a StatefulSet's workers can belong to one pool only"
            ),
        ));
    }
    facts.statefulset = Some(sts_name.clone());

    let replicas = sts
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize;
    let workers = worker_pods(sts, replicas, &o.pods, o.deleting);
    facts.workers = Some(workers.clone());

    validate_jobs(&spec.jobs).map_err(|e| Failure::new(reason::INVALID_JOBS, e.to_string()))?;
    if let Some(qos) = &spec.qos {
        validate_qos(&spec.jobs, qos)
            .map_err(|e| Failure::new(reason::INVALID_QOS, e.to_string()))?;
    }
    let max_unavailable = rollout::max_unavailable(&spec.rollout.max_unavailable, replicas)
        .map_err(|e| Failure::new(reason::INVALID_MAX_UNAVAILABLE, e.to_string()))?;
    if spec.rollout.policy == RolloutPolicy::None && spec.rollout.handoff == Handoff::Exclusive {
        return Err(Failure::new(
            reason::INVALID_ROLLOUT,
            "rollout.handoff Exclusive needs rollout.policy DeletePods: with policy None the workers reload by themselves and the operator cannot tell when one has stopped a job; set rollout.handoff: Overlap or rollout.policy: DeletePods",
        ));
    }

    let config_map_name = pool.config_map_name();
    if let Some(cm) = o.config_map {
        check_ownership(pool, cm, &config_map_name)?;
    }
    Ok(Valid {
        statefulset_name: sts_name,
        workers,
        max_unavailable,
        config_map_name,
    })
}

/// The pool's selector as a [`Selector`]; an empty one would match every StatefulSet.
fn pool_selector(selector: &LabelSelector) -> Result<Selector, Failure> {
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
            reason::EMPTY_SELECTOR,
            "spec.selector is empty and would match every StatefulSet; set matchLabels or matchExpressions",
        ));
    }
    Selector::try_from(selector.clone())
        .map_err(|e| Failure::new(reason::INVALID_SELECTOR, format!("spec.selector: {}", e.0)))
}

/// Whether `selector` matches the labels of `sts`.
pub fn selects(selector: &LabelSelector, sts: &StatefulSet) -> bool {
    pool_selector(selector).is_ok_and(|s| s.matches(sts.labels()))
}

fn match_statefulset<'a>(
    selector: &Selector,
    namespace: &str,
    candidates: &[&'a StatefulSet],
) -> Result<&'a StatefulSet, Failure> {
    let mut matched: Vec<&StatefulSet> = candidates
        .iter()
        .copied()
        .filter(|sts| {
            sts.namespace().as_deref() == Some(namespace) && selector.matches(sts.labels())
        })
        .collect();
    matched.sort_by_key(|sts| sts.name_any());
    match matched.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::new(
            reason::STATEFUL_SET_NOT_FOUND,
            format!("no StatefulSet in namespace {namespace} has labels matching {selector}"),
        )),
        many => Err(Failure::new(
            reason::AMBIGUOUS_SELECTOR,
            format!(
                "{} StatefulSets match {selector}: {}; the selector must match exactly one",
                many.len(),
                many.iter()
                    .map(|s| s.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The name of another pool of the namespace that selects `sts` and was created before `pool`
/// (ties broken by name), if any: that pool manages the StatefulSet.
fn older_pool_selecting(
    pool: &SwarmPool,
    sts: &StatefulSet,
    others: &[&SwarmPool],
) -> Option<String> {
    let age = |p: &SwarmPool| {
        (
            p.metadata.creation_timestamp.clone().map(|t| t.0),
            p.name_any(),
        )
    };
    others
        .iter()
        .filter(|other| {
            other.metadata.uid != pool.metadata.uid
                && other.namespace() == pool.namespace()
                && selects(&other.spec.selector, sts)
                && age(other) < age(pool)
        })
        .map(|other| age(other))
        .min()
        .map(|(_, name)| name)
}

/// The workers of `sts` with their pods: only pods the StatefulSet controls (by uid) count.
fn worker_pods(
    sts: &StatefulSet,
    replicas: usize,
    pods: &[&PodSummary],
    deleting: &BTreeSet<String>,
) -> Workers {
    let sts_uid = sts.metadata.uid.as_deref();
    // Called for every pod of the namespace on every plan: compare in place, allocate nothing.
    let controlled = |pod: &PodSummary| {
        pod.metadata.namespace == sts.metadata.namespace
            && pod
                .owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && Some(r.uid.as_str()) == sts_uid)
    };
    let pods = pods
        .iter()
        .filter(|pod| controlled(pod))
        .map(|pod| (pod.name_any(), worker_pod(pod, deleting)))
        .collect();
    Workers::new(&sts.name_any(), replicas, pods)
}

fn worker_pod(pod: &PodSummary, deleting: &BTreeSet<String>) -> WorkerPod {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let terminating = pod.metadata.deletion_timestamp.is_some() || deleting.contains(&uid);
    let ready_condition = pod.ready.as_ref();
    let ready = !terminating && ready_condition.is_some_and(|c| c.is_true);
    let not_ready_since = if ready {
        None
    } else {
        ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .or(pod.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
    };
    WorkerPod {
        uid,
        ready,
        terminating,
        not_ready_since,
    }
}

fn check_ownership(pool: &SwarmPool, cm: &ConfigMap, name: &str) -> Result<(), Failure> {
    let pool_uid = pool.metadata.uid.as_deref();
    match cm
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        Some(owner) if Some(owner.uid.as_str()) != pool_uid => Err(Failure::new(
            reason::CONFIG_MAP_CONFLICT,
            format!(
                "ConfigMap {name} is controlled by {} {} (uid {}); delete it or set spec.configMap to another name",
                owner.kind, owner.name, owner.uid
            ),
        )),
        _ => Ok(()),
    }
}
