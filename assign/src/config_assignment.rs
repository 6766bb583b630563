//! The assignment a `config.yml` encodes, for the planner and `swarm-operator plan`: the format
//! itself is the wire contract's ([`swarm_protocol::config`]), what it means as an assignment is
//! this crate's.

use swarm_protocol::config::{WorkerConfig, Workload, ordinal_in};

use crate::{Assignment, Held};

/// A [`WorkerConfig`] read as the assignment of one StatefulSet's ordinals.
pub trait ConfigAssignment {
    /// The assignment this config encodes for `statefulset`, whose pods are
    /// `<statefulset>-<i>`.
    ///
    /// Returns `None` when no pod of `statefulset` appears (a config written for another
    /// StatefulSet). Pods of other names are ignored. With K pods of `statefulset` in the
    /// config, the assignment has K ordinals; a pod whose ordinal is K or more (a gap left by a
    /// hand edit) is ignored, so its jobs count as unassigned instead of inflating N.
    fn assignment(&self, statefulset: &str) -> Option<Assignment> {
        self.held(statefulset).map(|held| held.to_assignment())
    }

    /// [`ConfigAssignment::assignment`] borrowed from this config.
    fn held(&self, statefulset: &str) -> Option<Held<'_>>;

    /// [`ConfigAssignment::assignment`] with every job in transit counted as held by the pod
    /// that last held it (if that pod is one of the ordinals): what the workers hold or may
    /// still run. Planning from this gives the same target before and after a revoke is
    /// written.
    fn assignment_with_transit(&self, statefulset: &str) -> Option<Assignment> {
        self.held_with_transit(statefulset)
            .map(|held| held.to_assignment())
    }

    /// [`ConfigAssignment::assignment_with_transit`] borrowed from this config.
    fn held_with_transit(&self, statefulset: &str) -> Option<Held<'_>>;
}

impl ConfigAssignment for WorkerConfig {
    fn held(&self, statefulset: &str) -> Option<Held<'_>> {
        let ours: Vec<(usize, &Workload)> = self
            .workloads()
            .filter_map(|(pod, workload)| Some((ordinal_in(pod, statefulset)?, workload)))
            .collect();
        if ours.is_empty() {
            return None;
        }
        let mut workers = vec![Vec::new(); ours.len()];
        for (ordinal, workload) in ours {
            if let Some(worker) = workers.get_mut(ordinal) {
                *worker = workload.jobs.iter().map(String::as_str).collect();
            }
        }
        Some(Held::new(workers))
    }

    fn held_with_transit(&self, statefulset: &str) -> Option<Held<'_>> {
        let mut workers = self.held(statefulset)?.into_workers();
        for (pod, jobs) in self.transit() {
            let ordinal = ordinal_in(pod, statefulset);
            if let Some(worker) = ordinal.and_then(|ordinal| workers.get_mut(ordinal)) {
                worker.extend(jobs.iter().map(String::as_str));
            }
        }
        Some(Held::new(workers))
    }
}
