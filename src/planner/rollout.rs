//! Stale-worker bookkeeping and the paced delete budget (pure).
//!
//! A worker is stale when its pod instance may have started before the ConfigMap version that
//! last changed its job set. Pod instances are told apart by uid. The bookkeeping lives in the
//! ConfigMap itself, in the [`PENDING_REFRESH_ANNOTATION`](swarm_protocol::names::PENDING_REFRESH_ANNOTATION), so progress survives restarts:
//!
//! 1. When a version changes the job sets of some workers, each of them is recorded with an
//!    empty uid ("unresolved") in the same write as the new config.
//! 2. After that write, unresolved entries are resolved against a live pod list: a pod that
//!    exists may have mounted the old content, so its uid is recorded; a worker without a pod
//!    is dropped (its pod will be created from the new content).
//! 3. An entry is done once the worker's pod is gone or has another uid. Until then the pod is
//!    stale and, under `DeletePods`, deleted with a uid precondition within the budget.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::state::records::PendingRefresh;

/// The observed state of one worker's pod, as far as pacing cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPod {
    /// Uid of the pod instance.
    pub uid: String,
    /// The pod's Ready condition is True (and it is not terminating).
    pub ready: bool,
    /// The pod has a deletionTimestamp, or this operator already asked to delete it.
    pub terminating: bool,
    /// Since when the pod has not been Ready (Ready condition transition, else creation).
    pub not_ready_since: Option<Timestamp>,
    /// When its most recently started container started, if one runs.
    pub started: Option<Timestamp>,
    /// Some container of the pod has run: before that no worker in it has read anything.
    pub ran: bool,
    /// The node it runs on, once scheduled.
    pub node: Option<String>,
}

impl WorkerPod {
    /// Whether the worker counts as unavailable for the budget.
    pub fn unavailable(&self) -> bool {
        !self.ready || self.terminating
    }
}

/// The workers of a pool in position order (a StatefulSet's ordinals `0..N-1`, a Deployment
/// pool's slots) by pod name, with their pods (only pods the pool's workload controls; `None`
/// when the worker has no pod).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workers {
    workers: Vec<(String, Option<WorkerPod>)>,
    /// Pod name -> position, so lookups stay cheap for large pools.
    positions: HashMap<String, usize>,
}

impl Workers {
    /// Workers `<statefulset>-0 .. <statefulset>-(replicas-1)` with their pods from `pods`
    /// (keyed by pod name).
    pub fn new(statefulset: &str, replicas: usize, pods: BTreeMap<String, WorkerPod>) -> Self {
        Self::named(
            (0..replicas).map(|ordinal| format!("{statefulset}-{ordinal}")),
            pods,
        )
    }

    /// Workers of the given names in position order, with their pods from `pods`.
    pub fn named(
        names: impl IntoIterator<Item = String>,
        mut pods: BTreeMap<String, WorkerPod>,
    ) -> Self {
        let workers: Vec<(String, Option<WorkerPod>)> = names
            .into_iter()
            .map(|name| {
                let pod = pods.remove(&name);
                (name, pod)
            })
            .collect();
        let positions = workers
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        Self { workers, positions }
    }

    /// Pod names and pods in position order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&WorkerPod>)> {
        self.workers.iter().map(|(n, p)| (n.as_str(), p.as_ref()))
    }

    /// The pod of the worker named `name`, `None` when it has none or is not a worker.
    pub fn pod(&self, name: &str) -> Option<&WorkerPod> {
        self.ordinal(name).and_then(|i| self.workers[i].1.as_ref())
    }

    /// Whether `name` is one of the workers.
    pub fn contains(&self, name: &str) -> bool {
        self.ordinal(name).is_some()
    }

    /// Position of a worker.
    fn ordinal(&self, name: &str) -> Option<usize> {
        self.positions.get(name).copied()
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True for 0 replicas.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Workers whose pod is Ready.
    pub fn ready(&self) -> usize {
        self.iter()
            .filter(|(_, p)| p.is_some_and(|p| !p.unavailable()))
            .count()
    }

    /// Workers whose pod is missing, not Ready or terminating.
    pub fn unavailable(&self) -> usize {
        self.len() - self.ready()
    }
}

impl PendingRefresh {
    /// Records `pods` as stale with an unresolved uid (their job set changed in the version
    /// about to be written). A pod recorded before is unresolved again: whatever instance runs
    /// at resolution time may have mounted content older than this version.
    pub fn mark_unresolved<'a>(&mut self, pods: impl IntoIterator<Item = &'a str>) {
        for pod in pods {
            self.entries.insert(pod.to_owned(), String::new());
        }
    }

    /// Whether some entry still waits for resolution.
    pub fn has_unresolved(&self) -> bool {
        self.entries.values().any(String::is_empty)
    }

    /// Drops entries for pods that are no longer workers (scaled away).
    pub fn retain_workers(&mut self, workers: &Workers) {
        self.entries.retain(|pod, _| workers.contains(pod));
    }

    /// Resolves unresolved entries against pods listed live after the write that recorded
    /// them: an existing pod is recorded by uid, a worker without a pod is dropped.
    pub fn resolve(&mut self, live: &Workers) {
        self.entries.retain(|pod, uid| {
            if !uid.is_empty() {
                return true;
            }
            match live.pod(pod) {
                Some(p) => {
                    uid.clone_from(&p.uid);
                    true
                }
                None => false,
            }
        });
    }

    /// Entries whose pod (as observed) is gone or has another uid: those instances were
    /// replaced, so the entries may be done. Unresolved entries are never listed.
    pub fn replaced(&self, pods: &Workers) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(pod, uid)| !uid.is_empty() && pods.pod(pod).is_none_or(|p| &p.uid != *uid))
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// Drops the entries whose pod was replaced, by a pod list the caller trusts (live).
    pub fn drop_replaced(&mut self, live: &Workers) {
        for pod in self.replaced(live) {
            self.entries.remove(&pod);
        }
    }

    /// Pod names of the stale workers in ordinal order.
    pub fn stale_workers(&self, workers: &Workers) -> Vec<String> {
        let mut names: Vec<&String> = self.entries.keys().collect();
        names.sort_by_key(|name| workers.ordinal(name).unwrap_or(usize::MAX));
        names.into_iter().cloned().collect()
    }

    /// True when no worker is stale.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `spec.rollout.maxUnavailable` is neither a non-negative integer nor `NN%`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "rollout.maxUnavailable {0:?} is neither a non-negative integer nor a percentage like \"25%\""
)]
pub struct InvalidMaxUnavailable(pub String);

/// How many workers may be unavailable at once: an integer, or a percentage of `replicas`
/// rounded down; at least 1 either way.
pub fn max_unavailable(
    value: &IntOrString,
    replicas: usize,
) -> Result<usize, InvalidMaxUnavailable> {
    let n = match value {
        IntOrString::Int(n) => {
            usize::try_from(*n).map_err(|_| InvalidMaxUnavailable(n.to_string()))?
        }
        IntOrString::String(text) => {
            let invalid = || InvalidMaxUnavailable(text.clone());
            let trimmed = text.trim();
            match trimmed.strip_suffix('%') {
                Some(percent)
                    if !percent.is_empty() && percent.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    let percent: u128 = percent.parse().map_err(|_| invalid())?;
                    // Saturating: a percentage of 39 digits would overflow the product.
                    let n = percent.saturating_mul(replicas as u128) / 100;
                    usize::try_from(n).unwrap_or(usize::MAX)
                }
                Some(_) => return Err(invalid()),
                // Kubernetes accepts a plain number in the string form too ("2").
                None => trimmed.parse().map_err(|_| invalid())?,
            }
        }
    };
    Ok(n.max(1))
}

/// A pod to delete: name and the uid precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDelete {
    /// Pod name.
    pub name: String,
    /// Uid the pod must still have; a re-created pod of the same name is left alone.
    pub uid: String,
}

/// Which stale workers the handoff wants refreshed first, and which later.
#[derive(Clone, Copy, Debug)]
pub struct Priorities<'a> {
    /// Refreshed before the others: pods that hold jobs in transit, whose restart lets the
    /// handoff go on.
    pub first: &'a BTreeSet<String>,
    /// Not refreshed now (unless also in `first`): workers with jobs still coming to them,
    /// which would have to restart again once those are granted.
    pub hold_back: &'a BTreeSet<String>,
}

impl Default for Priorities<'static> {
    fn default() -> Self {
        static NONE: BTreeSet<String> = BTreeSet::new();
        Self {
            first: &NONE,
            hold_back: &NONE,
        }
    }
}

/// The stale pods to delete now. Stale pods that are already unavailable (not Ready) go first
/// and cost nothing; Ready ones only while fewer than `max_unavailable` workers are unavailable,
/// `priorities.first` before the others. Terminating pods are never deleted again, unresolved
/// entries never, and workers held back by `priorities` not yet.
pub fn deletes(
    pending: &PendingRefresh,
    workers: &Workers,
    max_unavailable: usize,
    priorities: &Priorities,
) -> Vec<PodDelete> {
    let mut stale = pending.stale_workers(workers);
    // Stable: ordinal order within each group.
    stale.sort_by_key(|name| !priorities.first.contains(name));
    let candidates: Vec<(&str, &WorkerPod)> = stale
        .iter()
        .filter(|name| priorities.first.contains(*name) || !priorities.hold_back.contains(*name))
        .filter_map(|name| {
            let uid = pending.entries.get(name)?;
            let pod = workers.pod(name)?;
            (!uid.is_empty() && pod.uid == *uid && !pod.terminating).then_some((name.as_str(), pod))
        })
        .collect();

    let mut out: Vec<PodDelete> = candidates
        .iter()
        .filter(|(_, pod)| !pod.ready)
        .map(|(name, pod)| PodDelete {
            name: (*name).to_owned(),
            uid: pod.uid.clone(),
        })
        .collect();

    let mut budget = max_unavailable.saturating_sub(workers.unavailable());
    for (name, pod) in candidates.iter().filter(|(_, pod)| pod.ready) {
        if budget == 0 {
            break;
        }
        budget -= 1;
        out.push(PodDelete {
            name: (*name).to_owned(),
            uid: pod.uid.clone(),
        });
    }
    out.sort_by_key(|d| workers.ordinal(&d.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, ready: bool, terminating: bool) -> WorkerPod {
        WorkerPod {
            uid: uid.into(),
            ready,
            terminating,
            not_ready_since: None,
            started: None,
            ran: true,
            node: None,
        }
    }

    fn workers(pods: &[(usize, WorkerPod)], replicas: usize) -> Workers {
        Workers::new(
            "w",
            replicas,
            pods.iter()
                .map(|(i, p)| (format!("w-{i}"), p.clone()))
                .collect(),
        )
    }

    #[test]
    fn max_unavailable_percentage_rounds_down_with_a_floor_of_one() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(max_unavailable(&pct("25%"), 10), Ok(2));
        assert_eq!(max_unavailable(&pct("25%"), 3), Ok(1));
        assert_eq!(max_unavailable(&pct("0%"), 10), Ok(1));
        assert_eq!(max_unavailable(&pct("100%"), 7), Ok(7));
        assert_eq!(max_unavailable(&pct("50%"), 0), Ok(1));
    }

    #[test]
    fn max_unavailable_integer_forms_are_taken_as_is_with_a_floor_of_one() {
        assert_eq!(max_unavailable(&IntOrString::Int(3), 10), Ok(3));
        assert_eq!(max_unavailable(&IntOrString::Int(0), 10), Ok(1));
        assert_eq!(max_unavailable(&IntOrString::String("2".into()), 10), Ok(2));
    }

    #[test]
    fn max_unavailable_rejects_negative_and_malformed_values() {
        assert!(max_unavailable(&IntOrString::Int(-1), 10).is_err());
        for bad in ["abc", "%", "-5%", "2.5%", "25 %", ""] {
            let err = max_unavailable(&IntOrString::String(bad.into()), 10).unwrap_err();
            assert_eq!(err.0, bad);
        }
    }

    #[test]
    fn resolution_records_existing_pods_and_drops_workers_without_one() {
        let mut p = PendingRefresh::default();
        p.mark_unresolved(["w-0", "w-1"]);
        let live = workers(&[(0, pod("u0", true, false))], 2);
        p.resolve(&live);
        assert_eq!(p.entries().len(), 1);
        assert_eq!(p.entries()["w-0"], "u0");
        assert!(!p.has_unresolved());
    }

    #[test]
    fn an_entry_is_done_once_its_pod_is_replaced_or_gone() {
        let mut p = PendingRefresh::parse(Some(r#"{"w-0":"u0","w-1":"u1","w-2":"u2"}"#)).unwrap();
        let live = workers(
            &[(0, pod("u0", true, false)), (1, pod("new", false, false))],
            3,
        );
        p.drop_replaced(&live);
        assert_eq!(p.stale_workers(&live), vec!["w-0".to_owned()]);
    }

    #[test]
    fn the_size_bound_covers_the_resolved_annotation() {
        let mut p = PendingRefresh::default();
        p.mark_unresolved(["w-0", "w-1"]);
        let bound = p.resolved_size_bound();
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let live = workers(&[(0, pod(uid, true, false)), (1, pod(uid, true, false))], 2);
        p.resolve(&live);
        assert!(p.render().len() <= bound);
        assert!(
            p.render().len() + 2 > bound,
            "tight: {} vs {bound}",
            p.render().len()
        );
    }

    #[test]
    fn workers_are_found_by_name_and_only_by_their_exact_name() {
        let w = workers(&[(1, pod("u1", true, false))], 3);
        assert!(
            w.contains("w-2") && !w.contains("w-3") && !w.contains("w-01") && !w.contains("x-1")
        );
        assert_eq!(w.pod("w-1").map(|p| p.uid.as_str()), Some("u1"));
        assert!(w.pod("w-0").is_none());
    }

    #[test]
    fn stale_workers_are_listed_in_ordinal_order() {
        let mut p = PendingRefresh::default();
        p.mark_unresolved(["w-10", "w-9", "w-1"]);
        let w = workers(&[], 11);
        assert_eq!(p.stale_workers(&w), vec!["w-1", "w-9", "w-10"]);
    }

    #[test]
    fn budget_allows_max_unavailable_minus_already_unavailable() {
        let pods: Vec<_> = (0..4)
            .map(|i| (i, pod(&format!("u{i}"), true, false)))
            .collect();
        let w = workers(&pods, 4);
        let p = PendingRefresh::parse(Some(r#"{"w-0":"u0","w-1":"u1","w-2":"u2","w-3":"u3"}"#))
            .unwrap();
        let d = deletes(&p, &w, 2, &Priorities::default());
        assert_eq!(
            d.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["w-0", "w-1"]
        );
        assert_eq!(d[0].uid, "u0");
    }

    #[test]
    fn unavailable_stale_pods_are_deleted_first_and_free_of_budget() {
        let w = workers(
            &[
                (0, pod("u0", true, false)),
                (1, pod("u1", false, false)),
                (2, pod("u2", true, false)),
            ],
            3,
        );
        let p = PendingRefresh::parse(Some(r#"{"w-0":"u0","w-1":"u1","w-2":"u2"}"#)).unwrap();
        // One worker is already unavailable and the budget is 1: only the crashing pod goes.
        let d = deletes(&p, &w, 1, &Priorities::default());
        assert_eq!(
            d,
            vec![PodDelete {
                name: "w-1".into(),
                uid: "u1".into()
            }]
        );
    }

    #[test]
    fn terminating_and_unresolved_pods_are_never_deleted() {
        let w = workers(
            &[(0, pod("u0", true, true)), (1, pod("u1", true, false))],
            2,
        );
        let p = PendingRefresh::parse(Some(r#"{"w-0":"u0","w-1":""}"#)).unwrap();
        assert!(deletes(&p, &w, 5, &Priorities::default()).is_empty());
    }

    #[test]
    fn a_pod_with_another_uid_than_recorded_is_not_deleted() {
        let w = workers(&[(0, pod("other", true, false))], 1);
        let p = PendingRefresh::parse(Some(r#"{"w-0":"u0"}"#)).unwrap();
        assert!(deletes(&p, &w, 1, &Priorities::default()).is_empty());
        assert_eq!(p.replaced(&w), vec!["w-0".to_owned()]);
    }
}
