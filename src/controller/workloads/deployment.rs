//! Deployment pools on the controller's side: the Deployments, their ReplicaSets and their
//! pods (by the `pod-template-hash` label), a pod mapped through its ReplicaSet's Deployment.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::{WatchedWorkload, WorkloadSnapshot, in_namespace};
use crate::api::crd::SwarmPool;
use crate::controller::changes;
use crate::controller::triggers::{controller_of, pools_for_owner, pools_of_kind};
use crate::controller::watches::{WatchScope, changes_only, workload_triggers};
use crate::runtime::cache_health::Cache;
use crate::state::cached::CachedPod;
use crate::state::pod_summary::PodSummary;
use crate::state::trim;
use swarm_protocol::names::DEPLOYMENT_POD_LABEL;

/// The caches of Deployments, of their ReplicaSets and of their pods.
#[derive(Clone)]
pub(super) struct Deployments {
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: Store<CachedPod>,
}

impl WatchedWorkload for Deployments {
    type Workload = Deployment;

    /// Also the ReplicaSets: a Deployment's pods are theirs.
    fn watch(
        controller: Controller<SwarmPool>,
        scope: &WatchScope,
        pools: &Store<SwarmPool>,
    ) -> (Controller<SwarmPool>, Self) {
        let (deployments, deployment_events) = scope.cached(
            watcher::Config::default(),
            trim::deployment,
            Cache::Deployments,
        );
        let (replica_sets, rs_events) = scope.cached(
            watcher::Config::default(),
            trim::replica_set,
            Cache::ReplicaSets,
        );
        let (pods, pod_events) = scope.pods(DEPLOYMENT_POD_LABEL, Cache::DeploymentPods);
        let caches = Deployments {
            deployments,
            replica_sets,
            pods,
        };
        let controller =
            workload_triggers(controller, pools, &caches, deployment_events, pod_events);
        let rs_events = changes_only(rs_events, changes::content);
        let by_rs = (pools.clone(), caches.deployments.clone());
        let controller = controller.watches_stream(rs_events.touched_objects(), move |rs| {
            let (pools, deployments) = &by_rs;
            let namespace = rs.namespace();
            let owners = rs.owner_references();
            pools_for_owner(&pools.state(), deployments, namespace.as_deref(), owners)
        });
        (controller, caches)
    }

    fn pods(&self) -> &Store<CachedPod> {
        &self.pods
    }

    /// Through its ReplicaSet's Deployment.
    fn pools_for_pod(
        &self,
        pools: &[Arc<SwarmPool>],
        pod: &PodSummary,
    ) -> Vec<ObjectRef<SwarmPool>> {
        let Some(rs_name) = controller_of::<ReplicaSet>(pod.owner_references()) else {
            return Vec::new();
        };
        let namespace = pod.namespace().unwrap_or_default();
        match self
            .replica_sets
            .get(&ObjectRef::new(rs_name).within(&namespace))
        {
            Some(rs) => pools_for_owner(
                pools,
                &self.deployments,
                Some(&namespace),
                rs.owner_references(),
            ),
            // The ReplicaSet is not cached yet (or gone): every Deployment pool of the namespace
            // looks, as one of them may have to grant what this pod held.
            None => pools_of_kind::<Deployment>(pools, Some(&namespace)),
        }
    }

    fn snapshot(&self, namespace: &str, snapshot: &mut WorkloadSnapshot) {
        snapshot
            .deployments
            .extend(in_namespace(&self.deployments, namespace));
        snapshot
            .replica_sets
            .extend(in_namespace(&self.replica_sets, namespace));
        let here = |pod: &CachedPod| &*pod.namespace == namespace;
        snapshot.pods.extend(self.pods.state_filter(here));
    }

    /// A Deployment's pods have no name label: they are all listed, and the named ones kept.
    fn live_pods_selector(_names: &BTreeSet<String>) -> Option<String> {
        Some(DEPLOYMENT_POD_LABEL.to_owned())
    }
}
