//! The kinds of workload a pool's workers can belong to, as validation matches them. What every
//! kind shares (the selector picks exactly one workload of the kind, which the oldest pool
//! selecting it manages) is written here once; what differs (where the workloads are observed,
//! which pods are its workers and how they are published) is one [`Workload`] impl per kind.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use swarm_assign::{Rebound, Roster};

use super::{Failure, FailureReason, selects};
use crate::api::crd::{SwarmPool, SwarmPoolStatus, WorkloadKind};
use crate::planner::Observed;
use crate::planner::rollout::{WorkerPod, Workers};
use crate::state::cached::CachedPod;

/// One kind of workload (a StatefulSet, a Deployment) as the planner matches a pool to it.
pub(crate) trait Workload: ResourceExt + Sized {
    /// The pool's `spec.workloadKind` that names this kind.
    const KIND: WorkloadKind;
    /// Why a pool fails when its selector matches no workload of this kind.
    const NOT_FOUND: FailureReason;
    /// Why a pool fails when an older pool already manages its workload.
    const IN_USE: FailureReason;

    /// The workloads of this kind in the pool's namespace, as observed.
    fn observed<'o, 'a>(o: &'o Observed<'a>) -> &'o [&'a Self];

    /// `spec.replicas`, as written.
    fn replicas(&self) -> Option<i32>;

    /// The workload a pool last reported as its own in `status`, so that a relabelled or
    /// deleted workload still reaches the pool that used it.
    fn reported(status: &SwarmPoolStatus) -> Option<&str> {
        status.workload.as_deref()
    }

    /// The workers of this workload, named `name` with `replicas` wanted, and the pod each
    /// position is published under.
    fn members(&self, o: &Observed, name: &str, replicas: usize) -> Members;
}

/// A matched workload's workers and how they are published.
pub(crate) struct Members {
    /// The workers in position order and their pods.
    pub workers: Workers,
    /// The pod each position is published under.
    pub roster: Roster,
    /// Slot-table kinds (Deployments): the table after this plan's rebinding.
    pub slots: Option<Rebound>,
}

/// The workload the selector matched, and its workers.
pub(super) struct Matched {
    pub name: String,
    pub replicas: usize,
    pub members: Members,
}

/// The one workload of the pool's kind its selector matches, and its workers.
pub(super) fn match_workload(o: &Observed, selector: &Selector) -> Result<Matched, Failure> {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    match o.pool.spec.workload_kind {
        WorkloadKind::StatefulSet => match_pool::<StatefulSet>(o, selector),
        WorkloadKind::Deployment => match_pool::<Deployment>(o, selector),
    }
}

/// A pool of kind `W`: the one workload the selector matches, unless an older pool manages it.
fn match_pool<W: Workload>(o: &Observed, selector: &Selector) -> Result<Matched, Failure> {
    let pool = o.pool;
    let namespace = pool.namespace().unwrap_or_default();
    let workload = match_one(selector, &namespace, W::observed(o))?;
    let name = workload.name_any();
    if let Some(owner) = older_pool_selecting(pool, workload, &o.other_pools) {
        let kind = W::KIND.as_str();
        return Err(Failure::new(
            W::IN_USE,
            format!(
                "{kind} {name} is already managed by the older SwarmPool {owner}; a {kind}'s workers can belong to one pool only"
            ),
        ));
    }
    let replicas = desired_replicas(workload.replicas());
    Ok(Matched {
        members: workload.members(o, &name, replicas),
        name,
        replicas,
    })
}

/// `spec.replicas` of a workload: 1 when unset, never negative.
fn desired_replicas(replicas: Option<i32>) -> usize {
    usize::try_from(replicas.unwrap_or(1)).unwrap_or(0)
}

/// The one workload of `candidates` in `namespace` whose labels `selector` matches.
fn match_one<'a, W: Workload>(
    selector: &Selector,
    namespace: &str,
    candidates: &[&'a W],
) -> Result<&'a W, Failure> {
    let kind = W::KIND.as_str();
    let mut matched: Vec<&W> = candidates
        .iter()
        .copied()
        .filter(|k| k.namespace().as_deref() == Some(namespace) && selector.matches(k.labels()))
        .collect();
    matched.sort_by_key(|k| k.name_any());
    match matched.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::new(
            W::NOT_FOUND,
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

/// A cached pod as a worker: terminating also when this operator asked for its deletion.
pub(super) fn worker_pod(pod: &CachedPod, deleting: &BTreeSet<String>) -> WorkerPod {
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
        started: pod.started,
        ran: pod.ran,
        node: pod.node.as_deref().map(str::to_owned),
    }
}
