//! Step 1 of the pipeline: is the pool servable as specified, and what does it manage?

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use swarm_assign::{Rebound, Roster, validate_jobs, validate_qos};

use super::{Observed, config_map};
use crate::api::failure::{Failure, FailureReason};
use crate::crd::{Handoff, RolloutPolicy, SwarmPool, WorkloadKind};
use crate::rollout::{self, WorkerPod, Workers};
use crate::state::cached::CachedPod;

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

/// The workload the selector matched, and its workers.
struct Matched {
    name: String,
    replicas: usize,
    workers: Workers,
    roster: Roster,
    slots: Option<Rebound>,
}

/// Checks the pool against what it refers to. Every check that fails says what to fix.
pub(super) fn validate(o: &Observed, facts: &mut Facts) -> Result<Valid, Failure> {
    let pool = o.pool;
    let spec = &pool.spec;

    let selector = pool_selector(&spec.selector, spec.workload_kind)?;
    let matched = match spec.workload_kind {
        WorkloadKind::StatefulSet => match_statefulset_pool(o, &selector)?,
        WorkloadKind::Deployment => match_deployment_pool(o, &selector)?,
    };
    facts.workload = Some(matched.name.clone());
    facts.workers = Some(matched.workers.clone());
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
        workers: matched.workers,
        roster: matched.roster,
        slots: matched.slots,
        max_unavailable,
        config_map_name,
    })
}

/// A StatefulSet pool: the one StatefulSet the selector matches; worker `i` is `<sts>-<i>`.
fn match_statefulset_pool(o: &Observed, selector: &Selector) -> Result<Matched, Failure> {
    let pool = o.pool;
    let namespace = pool.namespace().unwrap_or_default();
    let sts = match_one(
        selector,
        &namespace,
        &o.statefulsets,
        WorkloadKind::StatefulSet,
    )?;
    let name = sts.name_any();
    if let Some(owner) = older_pool_selecting(pool, sts, &o.other_pools) {
        return Err(Failure::new(
            FailureReason::StatefulSetInUse,
            format!(
                "StatefulSet {name} is already managed by the older SwarmPool {owner}; a StatefulSet's workers can belong to one pool only"
            ),
        ));
    }
    let replicas = desired_replicas(sts.spec.as_ref().and_then(|s| s.replicas));
    let uid = sts.metadata.uid.as_deref();
    let pods = o
        .pods
        .iter()
        .filter(|pod| sts.metadata.namespace.as_deref() == Some(&*pod.namespace))
        .filter(|pod| pod.controller_uid.as_deref() == uid)
        .map(|pod| (pod.name.to_string(), worker_pod(pod, o.deleting)))
        .collect();
    Ok(Matched {
        workers: Workers::new(&name, replicas, pods),
        roster: Roster::statefulset(&name, replicas),
        slots: None,
        name,
        replicas,
    })
}

/// A Deployment pool: the one Deployment the selector matches; the workers are the pods of its
/// ReplicaSets, each holding a slot of the table recorded in the ConfigMap.
fn match_deployment_pool(o: &Observed, selector: &Selector) -> Result<Matched, Failure> {
    let pool = o.pool;
    let namespace = pool.namespace().unwrap_or_default();
    let deployment = match_one(
        selector,
        &namespace,
        &o.deployments,
        WorkloadKind::Deployment,
    )?;
    let name = deployment.name_any();
    if let Some(owner) = older_pool_selecting(pool, deployment, &o.other_pools) {
        return Err(Failure::new(
            FailureReason::DeploymentInUse,
            format!(
                "Deployment {name} is already managed by the older SwarmPool {owner}; a Deployment's workers can belong to one pool only"
            ),
        ));
    }
    let replicas = desired_replicas(deployment.spec.as_ref().and_then(|s| s.replicas));
    let deployment_uid = deployment.metadata.uid.as_deref();
    let replica_sets: BTreeSet<&str> = o
        .replica_sets
        .iter()
        .filter(|rs| rs.metadata.namespace == deployment.metadata.namespace)
        .filter(|rs| controller_uid(**rs) == deployment_uid)
        .filter_map(|rs| rs.metadata.uid.as_deref())
        .collect();
    let mut pods: Vec<&CachedPod> = o
        .pods
        .iter()
        .copied()
        .filter(|pod| deployment.metadata.namespace.as_deref() == Some(&*pod.namespace))
        .filter(|pod| {
            pod.controller_uid
                .as_deref()
                .is_some_and(|uid| replica_sets.contains(uid))
        })
        .collect();
    // Oldest first: a pod that has waited longest for a slot gets the next one.
    pods.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    let worker_pods: BTreeMap<String, WorkerPod> = pods
        .iter()
        .map(|pod| (pod.name.to_string(), worker_pod(pod, o.deleting)))
        .collect();
    // A terminating or finished pod takes no slot and frees the one it held.
    let candidates: Vec<&str> = pods
        .iter()
        .filter(|pod| !pod.finished)
        .filter(|pod| !worker_pods[&*pod.name].terminating)
        .map(|pod| &*pod.name)
        .collect();
    let rebound = config_map::slot_table(o.config_map).rebind(replicas, &candidates);
    let live: BTreeSet<&str> = candidates.iter().copied().collect();
    let table = rebound.table.slots();
    // A free slot is named by the pod that last held it, or for what it is when none did.
    let names = table.iter().enumerate().map(|(i, slot)| {
        slot.pod()
            .map_or_else(|| format!("{name} slot {i}"), str::to_owned)
    });
    let roster = Roster::new(
        table
            .iter()
            .map(|slot| {
                slot.pod()
                    .filter(|pod| live.contains(pod))
                    .map(str::to_owned)
            })
            .collect(),
        rebound.idle.clone(),
    );
    Ok(Matched {
        workers: Workers::named(names, worker_pods),
        roster,
        slots: Some(rebound),
        name,
        replicas,
    })
}

/// `spec.replicas` of a workload: 1 when unset, never negative.
fn desired_replicas(replicas: Option<i32>) -> usize {
    usize::try_from(replicas.unwrap_or(1)).unwrap_or(0)
}

/// The uid of the object's controller, if it has one.
fn controller_uid(object: &impl ResourceExt) -> Option<&str> {
    object
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
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

/// The one object of `candidates` in `namespace` whose labels `selector` matches.
fn match_one<'a, K: ResourceExt>(
    selector: &Selector,
    namespace: &str,
    candidates: &[&'a K],
    workload: WorkloadKind,
) -> Result<&'a K, Failure> {
    let kind = workload.as_str();
    let mut matched: Vec<&K> = candidates
        .iter()
        .copied()
        .filter(|k| k.namespace().as_deref() == Some(namespace) && selector.matches(k.labels()))
        .collect();
    matched.sort_by_key(|k| k.name_any());
    match matched.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::new(
            match workload {
                WorkloadKind::Deployment => FailureReason::DeploymentNotFound,
                WorkloadKind::StatefulSet => FailureReason::StatefulSetNotFound,
            },
            format!("no {kind} in namespace {namespace} has labels matching {selector}"),
        )),
        many => Err(Failure::new(
            FailureReason::AmbiguousSelector,
            format!(
                "{} {kind}s match {selector}: {}; the selector must match exactly one",
                many.len(),
                many.iter()
                    .map(|k| k.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The name of another pool of the namespace, of the same workload kind, that selects
/// `workload` and was created before `pool` (ties broken by name), if any: that pool manages it.
fn older_pool_selecting(
    pool: &SwarmPool,
    workload: &impl ResourceExt,
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
                && other.spec.workload_kind == pool.spec.workload_kind
                && selects(&other.spec.selector, workload)
                && age(other) < age(pool)
        })
        .map(|other| age(other))
        .min()
        .map(|(_, name)| name)
}

fn worker_pod(pod: &CachedPod, deleting: &BTreeSet<String>) -> WorkerPod {
    let uid = pod.uid.to_string();
    let terminating = pod.terminating || deleting.contains(&uid);
    let ready_condition = pod.ready.as_ref();
    let ready = !terminating && !pod.finished && ready_condition.is_some_and(|c| c.is_true);
    let not_ready_since = if ready {
        None
    } else {
        ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
            .or(pod.created)
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
            FailureReason::ConfigMapConflict,
            format!(
                "ConfigMap {name} is controlled by {} {} (uid {}); delete it or set spec.configMap to another name",
                owner.kind, owner.name, owner.uid
            ),
        )),
        _ => Ok(()),
    }
}
