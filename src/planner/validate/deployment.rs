//! Deployment pools: the workers are the pods of the Deployment's ReplicaSets, each holding a
//! slot of the table recorded in the ConfigMap.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use swarm_assign::Roster;

use super::FailureReason;
use super::workload::{Members, Workload, worker_pod};
use crate::api::crd::WorkloadKind;
use crate::planner::Observed;
use crate::planner::rollout::{WorkerPod, Workers};
use crate::state::cached::CachedPod;
use crate::state::config_map;

impl Workload for Deployment {
    const KIND: WorkloadKind = WorkloadKind::Deployment;
    const NOT_FOUND: FailureReason = FailureReason::DeploymentNotFound;
    const IN_USE: FailureReason = FailureReason::DeploymentInUse;

    fn observed<'o, 'a>(o: &'o Observed<'a>) -> &'o [&'a Self] {
        &o.deployments
    }

    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref().and_then(|s| s.replicas)
    }

    /// The pods of the ReplicaSets this Deployment controls, rebound to the slot table.
    fn members(&self, o: &Observed, name: &str, replicas: usize) -> Members {
        let pods = pods_of(self, o);
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
        Members {
            workers: Workers::named(names, worker_pods),
            roster,
            slots: Some(rebound),
        }
    }
}

/// The pods of `deployment`'s ReplicaSets, oldest first: a pod that has waited longest for a
/// slot gets the next one.
fn pods_of<'a>(deployment: &Deployment, o: &Observed<'a>) -> Vec<&'a CachedPod> {
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
    pods.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    pods
}

/// The uid of the object's controller, if it has one.
fn controller_uid(object: &impl ResourceExt) -> Option<&str> {
    object
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}
