//! StatefulSet pools: worker `i` is the pod `<sts>-<i>`, published under its own name.

use k8s_openapi::api::apps::v1::StatefulSet;
use swarm_assign::Roster;

use super::FailureReason;
use super::workload::{Members, Workload, worker_pod};
use crate::api::crd::{SwarmPoolStatus, WorkloadKind};
use crate::planner::Observed;
use crate::planner::rollout::Workers;

impl Workload for StatefulSet {
    const KIND: WorkloadKind = WorkloadKind::StatefulSet;
    const NOT_FOUND: FailureReason = FailureReason::StatefulSetNotFound;
    const IN_USE: FailureReason = FailureReason::StatefulSetInUse;

    fn observed<'o, 'a>(o: &'o Observed<'a>) -> &'o [&'a Self] {
        &o.statefulsets
    }

    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref().and_then(|s| s.replicas)
    }

    /// `status.statefulSet`: pools reported their StatefulSet there before `status.workload`.
    fn reported(status: &SwarmPoolStatus) -> Option<&str> {
        status.stateful_set.as_deref()
    }

    /// The pods this StatefulSet controls, by uid; position `i` is `<name>-<i>`.
    fn members(&self, o: &Observed, name: &str, replicas: usize) -> Members {
        let uid = self.metadata.uid.as_deref();
        let pods = o
            .pods
            .iter()
            .filter(|pod| self.metadata.namespace.as_deref() == Some(&*pod.namespace))
            .filter(|pod| pod.controller_uid.as_deref() == uid)
            .map(|pod| (pod.name.to_string(), worker_pod(pod, o.deleting)))
            .collect();
        Members {
            workers: Workers::new(name, replicas, pods),
            roster: Roster::statefulset(name, replicas),
            slots: None,
        }
    }
}
