//! The workload kinds on the controller's side: for each, the caches its pools are planned
//! from, the watches that fill them and trigger its pools, and how its pods are listed live.
//! One [`WatchedWorkload`] impl per kind ([`statefulset`], [`deployment`]); [`Workloads`] holds
//! them all, so the rest of the controller (watch wiring, context, cluster) names no kind.

mod deployment;
mod statefulset;

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::watches::WatchScope;
use crate::api::crd::{SwarmPool, WorkloadKind};
use crate::planner::Observed;
use crate::planner::validate::Workload;
use crate::state::cached::CachedPod;
use crate::state::pod_summary::PodSummary;
use deployment::Deployments;
use statefulset::StatefulSets;

/// One kind of workload as the controller follows it. The planner's side of the kind is
/// [`WatchedWorkload::Workload`].
pub(super) trait WatchedWorkload: Clone + Send + Sync + 'static {
    /// The workload's type, as the planner matches pools to it.
    type Workload: Workload;

    /// Starts this kind's watches within `scope`, each change triggering the pools (of
    /// `pools`) it maps to: `controller` with those triggers, and the caches they fill.
    fn watch(
        controller: Controller<SwarmPool>,
        scope: &WatchScope,
        pools: &Store<SwarmPool>,
    ) -> (Controller<SwarmPool>, Self);

    /// The cache of this kind's pods.
    fn pods(&self) -> &Store<CachedPod>;

    /// The pools whose workers include `pod`, one of this kind's pods.
    fn pools_for_pod(
        &self,
        pools: &[Arc<SwarmPool>],
        pod: &PodSummary,
    ) -> Vec<ObjectRef<SwarmPool>>;

    /// Adds what this kind's caches hold in `namespace` to `snapshot`.
    fn snapshot(&self, namespace: &str, snapshot: &mut WorkloadSnapshot);

    /// The label selector of a live list that holds the pods named `names` (and may hold
    /// more); `None` when there is nothing to list.
    fn live_pods_selector(names: &BTreeSet<String>) -> Option<String>;
}

/// The caches of every workload kind.
#[derive(Clone)]
pub(super) struct Workloads {
    statefulsets: StatefulSets,
    deployments: Deployments,
}

impl Workloads {
    /// Starts the watches of every kind (see [`WatchedWorkload::watch`]).
    pub(super) fn watch(
        controller: Controller<SwarmPool>,
        scope: &WatchScope,
        pools: &Store<SwarmPool>,
    ) -> (Controller<SwarmPool>, Self) {
        let (controller, statefulsets) = StatefulSets::watch(controller, scope, pools);
        let (controller, deployments) = Deployments::watch(controller, scope, pools);
        let workloads = Workloads {
            statefulsets,
            deployments,
        };
        (controller, workloads)
    }

    /// The cached pod `key`, whichever kind's it is.
    pub(super) fn pod(&self, key: &ObjectRef<CachedPod>) -> Option<Arc<CachedPod>> {
        self.statefulsets
            .pods()
            .get(key)
            .or_else(|| self.deployments.pods().get(key))
    }

    /// What the caches of every kind hold in `namespace`: any pod may hold jobs in transit,
    /// whichever workload it belongs to.
    pub(super) fn snapshot(&self, namespace: &str) -> WorkloadSnapshot {
        let mut snapshot = WorkloadSnapshot::default();
        self.statefulsets.snapshot(namespace, &mut snapshot);
        self.deployments.snapshot(namespace, &mut snapshot);
        snapshot
    }

    /// The live list's label selector for the pods named `names` of a pool of `kind` (see
    /// [`WatchedWorkload::live_pods_selector`]).
    pub(super) fn live_pods_selector(
        kind: WorkloadKind,
        names: &BTreeSet<String>,
    ) -> Option<String> {
        match kind {
            WorkloadKind::StatefulSet => StatefulSets::live_pods_selector(names),
            WorkloadKind::Deployment => Deployments::live_pods_selector(names),
        }
    }
}

/// The workloads and pods of one namespace, as the caches held them when a reconcile started.
#[derive(Default)]
pub(super) struct WorkloadSnapshot {
    statefulsets: Vec<Arc<StatefulSet>>,
    deployments: Vec<Arc<Deployment>>,
    replica_sets: Vec<Arc<ReplicaSet>>,
    pods: Vec<Arc<CachedPod>>,
}

impl WorkloadSnapshot {
    /// Fills the workload fields of `observed` (left empty by its builder) from this snapshot.
    pub(super) fn fill<'a>(&'a self, observed: &mut Observed<'a>) {
        observed.statefulsets = self.statefulsets.iter().map(AsRef::as_ref).collect();
        observed.deployments = self.deployments.iter().map(AsRef::as_ref).collect();
        observed.replica_sets = self.replica_sets.iter().map(AsRef::as_ref).collect();
        observed.pods = self.pods.iter().map(AsRef::as_ref).collect();
    }
}

/// The objects of `store` in `namespace`.
fn in_namespace<K>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store.state_filter(|object| object.meta().namespace.as_deref() == Some(namespace))
}
