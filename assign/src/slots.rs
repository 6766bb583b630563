//! Slots: stable worker positions over pods with random names (a Deployment's pods).
//!
//! A StatefulSet's pods carry their position in their name (`<statefulset>-<ordinal>`), so the
//! assignment, which works on positions, maps to pods directly. A Deployment's pods do not: they
//! come and go under new names. A pool over a Deployment therefore has `replicas` *slots*, and the
//! [`SlotTable`] records which pod holds each. The assignment is computed per slot, and a slot's
//! jobs go with the slot, not the pod: the pod that takes over a slot inherits its jobs, and no
//! other job moves.
//!
//! [`SlotTable::rebind`] is the whole rule, applied on every plan:
//! 1. A slot is *occupied* while its pod is a candidate (live, not terminating); otherwise it is
//!    *free*, whatever it held.
//! 2. With more slots than `replicas`, free slots are removed, highest first. Occupied slots are
//!    not: a scale-down removes the slots of the pods the ReplicaSet deletes, once they terminate,
//!    so the pods that stay keep their jobs.
//! 3. With fewer slots than `replicas`, empty slots are added.
//! 4. Candidates without a slot take the free slots, lowest first, in the order given (oldest pod
//!    first). Candidates left over are *idle*: listed with no jobs until a slot frees (the surplus
//!    of a rolling update).
//!
//! Each slot also remembers the pods that held it before ([`Slot::lineage`]) for as long as jobs
//! revoked from them are in transit: those jobs are the slot's until the handoff grants them to
//! its new pod.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{Assignment, Held};
use swarm_protocol::config::WorkerConfig;

/// One slot: the pod that holds it last, after the pods that held it before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Slot {
    /// Pods in the order they took the slot; the last one holds it (or held it, while the slot is
    /// free). Empty for a slot no pod has taken yet.
    pub pods: Vec<String>,
}

impl Slot {
    /// The pod that holds the slot (or last held it).
    pub fn pod(&self) -> Option<&str> {
        self.pods.last().map(String::as_str)
    }

    /// Every pod whose jobs are the slot's: the pods that held it before, then its pod.
    pub fn lineage(&self) -> &[String] {
        &self.pods
    }
}

/// The slots of a pool, in slot order. It serializes as a list of lists of pod names, as the
/// ConfigMap records it: `[["web-7d4b9-x2k5q"], ["web-7d4b9-h8m2w", "web-7d4b9-z9c4r"], []]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SlotTable {
    slots: Vec<Slot>,
}

/// The table after [`SlotTable::rebind`], and what the plan needs from the change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebound {
    /// The new table: `replicas` slots, more only while pods of removed slots still run.
    pub table: SlotTable,
    /// The slots the new table no longer has, in their old order: their jobs are placed anew.
    pub removed: Vec<Slot>,
    /// Candidates without a slot, in the order given.
    pub idle: Vec<String>,
}

impl SlotTable {
    /// A table of the given slots.
    pub fn new(slots: Vec<Slot>) -> Self {
        Self { slots }
    }

    /// The slots in slot order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table has no slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slot `pod` holds, if it holds one.
    pub fn slot_of(&self, pod: &str) -> Option<usize> {
        self.slots.iter().position(|slot| slot.pod() == Some(pod))
    }

    /// Applies the rule of the module documentation for `replicas` slots and the `candidates`
    /// (the workload's live, non-terminating pods, in order of preference: oldest first).
    pub fn rebind(&self, replicas: usize, candidates: &[&str]) -> Rebound {
        let live: BTreeSet<&str> = candidates.iter().copied().collect();
        let occupied = |slot: &Slot| slot.pod().is_some_and(|pod| live.contains(pod));

        let original = self.with_unique_heads();
        let mut slots = original.slots.clone();
        let mut removed_at = Vec::new();
        let mut index = slots.len();
        while slots.len() > replicas && index > 0 {
            index -= 1;
            if !occupied(&slots[index]) {
                removed_at.push(index);
                slots.remove(index);
            }
        }
        removed_at.reverse();
        let removed = removed_at
            .iter()
            .map(|&i| original.slots[i].clone())
            .collect();
        slots.resize_with(replicas.max(slots.len()), Slot::default);

        let slotted: BTreeSet<String> = slots
            .iter()
            .filter(|slot| occupied(slot))
            .filter_map(Slot::pod)
            .map(str::to_owned)
            .collect();
        let free: Vec<usize> = (0..slots.len()).filter(|&i| !occupied(&slots[i])).collect();
        let mut free = free.into_iter();
        let mut idle = Vec::new();
        for &pod in candidates.iter().filter(|pod| !slotted.contains(**pod)) {
            match free.next() {
                Some(i) => slots[i].pods.push(pod.to_owned()),
                None => idle.push(pod.to_owned()),
            }
        }
        Rebound {
            table: SlotTable { slots },
            removed,
            idle,
        }
    }

    /// The table with every pod heading at most one slot. A table that says otherwise (edited by
    /// hand) would publish one pod for two slots and lose the jobs of one of them: the first slot
    /// keeps the pod, and a later slot drops it from its end, so the pod before it (or nobody)
    /// heads it and the slot is free unless that pod is live.
    fn with_unique_heads(&self) -> SlotTable {
        let mut heads = BTreeSet::new();
        let slots = self
            .slots
            .iter()
            .map(|slot| {
                let mut pods = slot.pods.clone();
                while let Some(head) = pods.last() {
                    if heads.insert(head.clone()) {
                        break;
                    }
                    pods.pop();
                }
                Slot { pods }
            })
            .collect();
        SlotTable { slots }
    }

    /// Forgets the pods that held a slot before and no longer matter: a predecessor is kept while
    /// `keep` says so (jobs revoked from it are still in transit).
    pub fn prune(&mut self, keep: impl Fn(&str) -> bool) {
        for slot in &mut self.slots {
            let Some((last, before)) = slot.pods.split_last() else {
                continue;
            };
            let last = last.clone();
            let mut pods: Vec<String> = before.iter().filter(|p| keep(p)).cloned().collect();
            pods.push(last);
            slot.pods = pods;
        }
    }
}

impl Rebound {
    /// The assignment to plan from: for every slot of the new table and then every removed slot,
    /// the jobs its lineage holds in `config` or has in transit. A job counted twice (a hand edit)
    /// counts for its first slot.
    pub fn current(&self, config: &WorkerConfig) -> Assignment {
        self.held(config).to_assignment()
    }

    /// [`Rebound::current`] borrowed from `config`.
    pub fn held<'a>(&self, config: &'a WorkerConfig) -> Held<'a> {
        let mut seen = BTreeSet::new();
        let workers = self
            .table
            .slots
            .iter()
            .chain(&self.removed)
            .map(|slot| {
                let mut jobs = Vec::new();
                for pod in slot.lineage() {
                    let held = config.workload(pod).map(|w| w.jobs.as_slice());
                    let in_transit = config
                        .transit()
                        .filter(|(from, _)| from == pod)
                        .flat_map(|(_, jobs)| jobs);
                    for job in held.into_iter().flatten().chain(in_transit) {
                        if seen.insert(job.as_str()) {
                            jobs.push(job.as_str());
                        }
                    }
                }
                jobs
            })
            .collect();
        Held::new(workers)
    }
}
