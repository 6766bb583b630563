//! The pods a pool's worker positions are published under.

use crate::pod_name;

/// Which pod each worker position (a StatefulSet's ordinal, a Deployment pool's slot) is
/// published under in `workloads`, and the idle pods listed there with no jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    slots: Vec<Option<String>>,
    idle: Vec<String>,
}

impl Roster {
    /// The ordinals `0..replicas` of `statefulset`, pods `<statefulset>-<ordinal>`.
    pub fn statefulset(statefulset: &str, replicas: usize) -> Self {
        Self {
            slots: (0..replicas)
                .map(|i| Some(pod_name(statefulset, i)))
                .collect(),
            idle: Vec::new(),
        }
    }

    /// Positions published under the given pods (`None`: a free slot, whose jobs wait in
    /// transit until a pod takes it), and `idle` pods listed with no jobs.
    pub fn new(slots: Vec<Option<String>>, idle: Vec<String>) -> Self {
        Self { slots, idle }
    }

    /// The number of worker positions (N).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there is no worker position.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The pod of position `i`, if it has one.
    pub fn pod(&self, i: usize) -> Option<&str> {
        self.slots.get(i).and_then(Option::as_deref)
    }

    /// The pods listed with no jobs.
    pub fn idle(&self) -> &[String] {
        &self.idle
    }

    /// Every pod listed in `workloads`: positions with a pod, then the idle pods.
    pub fn pods(&self) -> impl Iterator<Item = &str> {
        self.slots
            .iter()
            .flatten()
            .chain(&self.idle)
            .map(String::as_str)
    }
}
