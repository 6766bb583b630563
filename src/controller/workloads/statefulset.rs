//! StatefulSet pools on the controller's side: the StatefulSets and their pods (by the
//! `statefulset.kubernetes.io/pod-name` label), a pod mapped through its controlling
//! StatefulSet, and live lists by that name label.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::{WatchedWorkload, WorkloadSnapshot, in_namespace};
use crate::api::crd::SwarmPool;
use crate::controller::triggers::pools_for_owner;
use crate::controller::watches::{WatchScope, workload_triggers};
use crate::runtime::cache_health::Cache;
use crate::state::cached::CachedPod;
use crate::state::pod_summary::PodSummary;
use crate::state::trim;
use swarm_protocol::names::STATEFULSET_POD_LABEL;

/// Names in one set-based selector at most; beyond, every StatefulSet pod of the namespace is
/// listed (a long query would approach the API server's limit on request line length).
const MAX_NAMES_IN_SELECTOR: usize = 1000;

/// The caches of StatefulSets and of their pods.
#[derive(Clone)]
pub(super) struct StatefulSets {
    statefulsets: Store<StatefulSet>,
    pods: Store<CachedPod>,
}

impl WatchedWorkload for StatefulSets {
    type Workload = StatefulSet;

    fn watch(
        controller: Controller<SwarmPool>,
        scope: &WatchScope,
        pools: &Store<SwarmPool>,
    ) -> (Controller<SwarmPool>, Self) {
        let (statefulsets, sts_events) = scope.cached(
            watcher::Config::default(),
            trim::statefulset,
            Cache::StatefulSets,
        );
        let (pods, pod_events) = scope.pods(STATEFULSET_POD_LABEL, Cache::Pods);
        let caches = StatefulSets { statefulsets, pods };
        let controller = workload_triggers(controller, pools, &caches, sts_events, pod_events);
        (controller, caches)
    }

    fn pods(&self) -> &Store<CachedPod> {
        &self.pods
    }

    /// Through its controlling StatefulSet.
    fn pools_for_pod(
        &self,
        pools: &[Arc<SwarmPool>],
        pod: &PodSummary,
    ) -> Vec<ObjectRef<SwarmPool>> {
        let namespace = pod.metadata.namespace.as_deref();
        pools_for_owner(pools, &self.statefulsets, namespace, pod.owner_references())
    }

    fn snapshot(&self, namespace: &str, snapshot: &mut WorkloadSnapshot) {
        snapshot
            .statefulsets
            .extend(in_namespace(&self.statefulsets, namespace));
        let here = |pod: &CachedPod| &*pod.namespace == namespace;
        snapshot.pods.extend(self.pods.state_filter(here));
    }

    /// By the label the StatefulSet controller gives each pod its name in: a holder of jobs in
    /// transit may be a pod the pool's StatefulSet no longer controls.
    fn live_pods_selector(names: &BTreeSet<String>) -> Option<String> {
        if names.is_empty() {
            return None;
        }
        if names.len() > MAX_NAMES_IN_SELECTOR {
            return Some(STATEFULSET_POD_LABEL.to_owned());
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Some(format!("{STATEFULSET_POD_LABEL} in ({})", names.join(",")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_lists_select_the_named_pods_by_their_name_label() {
        let names = |n: usize| (0..n).map(|i| format!("w-{i}")).collect::<BTreeSet<_>>();
        let selector = StatefulSets::live_pods_selector;
        assert_eq!(selector(&names(0)), None);
        assert_eq!(
            selector(&names(2)).as_deref(),
            Some("statefulset.kubernetes.io/pod-name in (w-0,w-1)")
        );
        assert_eq!(
            selector(&names(MAX_NAMES_IN_SELECTOR + 1)).as_deref(),
            Some(STATEFULSET_POD_LABEL)
        );
    }
}
