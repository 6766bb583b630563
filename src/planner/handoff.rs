//! The handoff: how a job moves from the worker that holds it to the one the assignment names.
//!
//! Under `Exclusive` a job is never granted while a pod instance that may still run it is live:
//!
//! 1. **Revoke.** A job that leaves a worker (it moves, its worker is scaled away, or it left the
//!    spec) is listed for no worker: it is *in transit*, under `transit` in `config.yml`, by the
//!    pod that last held it. That pod becomes a *holder*, recorded in the
//!    [`HANDOFF_ANNOTATION`] with an empty uid in the same write.
//! 2. **Resolve.** After that write the holder is resolved against pods listed live: the pod
//!    instance that exists then may have started on the content that gave it the job, so its uid
//!    is recorded; a holder without a pod is dropped (any instance created later starts on the
//!    new content).
//! 3. **Grant.** A job in transit is granted to its worker once none of its holders is live: the
//!    recorded instance is gone from the API (a terminating pod is live), confirmed by a live
//!    list. Pods of one name never run side by side, so a job whose only holder is its own
//!    destination is granted at once, and so are new jobs and jobs whose holders are gone.
//!
//! A job that left the spec stays in transit, unseen by the status, until its holder is gone:
//! nothing waits for it, but if it comes back meanwhile it is not granted early.
//!
//! The state lives in the ConfigMap only (`transit` in `config.yml`, the holders' uids in the
//! annotation), written atomically with the revoke, so an operator that crashes and restarts
//! with empty memory picks it up where it was and never grants early.
//!
//! Under `Overlap` the new assignment is published at once (make before break).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use swarm_assign::worker_config::WorkerConfig;
use swarm_assign::{Assignment, pod_name};

use crate::crd::Handoff;

/// ConfigMap annotation with the holders: JSON object of pod name to `{"uid", "revokedAt"}`, the
/// pod instances that may still run jobs in transit (`uid` empty until resolved), keys sorted.
pub const HANDOFF_ANNOTATION: &str = "swarm.io/handoff";

/// One pod instance that may still run jobs revoked from its pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Uid of the instance, `""` until resolved against a live pod list.
    pub uid: String,
    /// When jobs were first revoked from this pod (the start of their time unheld).
    pub revoked_at: Timestamp,
}

/// The holders of jobs in transit, by pod name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    entries: BTreeMap<String, Holder>,
}

/// The annotation could not be read.
#[derive(Debug, thiserror::Error)]
#[error("annotation {HANDOFF_ANNOTATION} is not a JSON object of holders: {0}")]
pub struct HoldersParseError(#[source] serde_json::Error);

impl Holders {
    /// Reads the annotation value; a missing annotation is an empty set.
    pub fn parse(annotation: Option<&str>) -> Result<Self, HoldersParseError> {
        match annotation {
            None => Ok(Self::default()),
            Some(text) if text.trim().is_empty() => Ok(Self::default()),
            Some(text) => serde_json::from_str(text)
                .map(|entries| Self { entries })
                .map_err(HoldersParseError),
        }
    }

    /// The annotation value: compact JSON, keys sorted (`{}` when empty).
    pub fn render(&self) -> String {
        serde_json::to_string(&self.entries).expect("holders always serialize")
    }

    /// Records `pod` as a holder whose instance is still to be resolved. A pod that held jobs
    /// before keeps its earliest revocation time.
    fn mark(&mut self, pod: &str, now: Timestamp) {
        let revoked_at = self.entries.get(pod).map_or(now, |h| h.revoked_at.min(now));
        self.entries.insert(
            pod.to_owned(),
            Holder {
                uid: String::new(),
                revoked_at,
            },
        );
    }

    /// Whether some holder waits for resolution.
    pub fn has_unresolved(&self) -> bool {
        self.entries.values().any(|h| h.uid.is_empty())
    }

    /// Resolved holders whose instance `pods` does not show (gone, or replaced by another uid).
    fn gone(&self, pods: &PodIndex) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(pod, h)| !h.uid.is_empty() && pods.uid(pod) != Some(h.uid.as_str()))
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// The entries: pod name to holder.
    pub fn entries(&self) -> &BTreeMap<String, Holder> {
        &self.entries
    }

    /// Length of the annotation once every holder is resolved, for the size check.
    pub fn resolved_size_bound(&self) -> usize {
        const UID_LEN: usize = 36;
        // "name":{"uid":"…","revokedAt":"2026-01-01T00:00:00.000000000Z"},
        const PER_ENTRY: usize = 64;
        self.entries
            .iter()
            .map(|(pod, h)| pod.len() + h.uid.len().max(UID_LEN) + PER_ENTRY)
            .sum::<usize>()
            + 2
    }
}

/// The pods of the pool's namespace as observed: pod name to the uid of its instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIndex {
    uids: BTreeMap<String, String>,
}

impl PodIndex {
    /// An index of `(pod name, uid)` pairs.
    pub fn new<'a>(pods: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            uids: pods
                .into_iter()
                .map(|(name, uid)| (name.to_owned(), uid.to_owned()))
                .collect(),
        }
    }

    fn uid(&self, pod: &str) -> Option<&str> {
        self.uids.get(pod).map(String::as_str)
    }
}

/// What the handoff step reads.
#[derive(Clone, Copy, Debug)]
pub struct HandoffInput<'a> {
    /// `spec.rollout.handoff`.
    pub mode: Handoff,
    /// Name of the StatefulSet; workers are `<statefulset>-0 .. -(N-1)`.
    pub statefulset: &'a str,
    /// The pool's jobs, in spec order.
    pub jobs: &'a [String],
    /// Where the assignment wants every job (N workers, possibly 0).
    pub target: &'a Assignment,
    /// The config now in the ConfigMap, if it could be read.
    pub previous: Option<&'a WorkerConfig>,
    /// The holders as the ConfigMap records them (`None`: the annotation is unreadable).
    pub holders: Option<&'a Holders>,
    /// The pods of the namespace.
    pub pods: &'a PodIndex,
    /// Whether `pods` was listed live after the last write that recorded unresolved holders.
    pub pods_are_live: bool,
    /// The current time.
    pub now: Timestamp,
}

/// The handoff's decision: what each worker may run now, and what stays in transit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HandoffOutcome {
    /// Jobs per ordinal to publish in `workloads`, in spec order within each worker.
    pub held: Vec<Vec<String>>,
    /// Jobs in transit by the pod that last held them (jobs that left the spec included).
    pub transit: BTreeMap<String, Vec<String>>,
    /// The holders to record.
    pub holders: Holders,
    /// Holders must be resolved or confirmed gone against pods listed live.
    pub needs_live_pods: bool,
    /// Jobs of the spec in transit.
    pub jobs_in_transit: usize,
    /// Jobs of the spec that this step revoked (they were held, now in transit).
    pub revoked: usize,
    /// Pods jobs of the spec were revoked from, in ordinal order.
    pub revoked_from: Vec<String>,
    /// Jobs that were in transit and are granted now, with how long each was in transit.
    pub granted: Vec<GrantedJob>,
    /// Workers that still have jobs coming to them: refreshing them now would only make them
    /// restart again once the jobs are granted.
    pub awaiting_grants: BTreeSet<String>,
    /// The pods that hold jobs in transit: refreshing them is what lets the handoff go on.
    pub holder_pods: BTreeSet<String>,
}

/// A job granted after a time in transit.
#[derive(Clone, Debug, PartialEq)]
pub struct GrantedJob {
    /// The worker it is granted to.
    pub to: String,
    /// Seconds since it was revoked (0 if unknown).
    pub after_seconds: f64,
}

/// Decides what to publish. See the module documentation for the rules.
pub fn hand_off(input: &HandoffInput) -> HandoffOutcome {
    match input.mode {
        Handoff::Overlap => overlap(input),
        Handoff::Exclusive => exclusive(input),
    }
}

/// Make before break: publish the target as it is; nothing is in transit.
fn overlap(input: &HandoffInput) -> HandoffOutcome {
    let previous_transit = transit_by_job(input.previous);
    let granted = input
        .target
        .workers()
        .iter()
        .enumerate()
        .flat_map(|(ordinal, jobs)| {
            jobs.iter()
                .filter(|job| previous_transit.contains_key(job.as_str()))
                .map(move |_| GrantedJob {
                    to: pod_name(input.statefulset, ordinal),
                    after_seconds: 0.0,
                })
        })
        .collect();
    HandoffOutcome {
        held: input.target.workers().to_vec(),
        granted,
        ..HandoffOutcome::default()
    }
}

fn exclusive(input: &HandoffInput) -> HandoffOutcome {
    let previous_transit = transit_by_job(input.previous);
    let (mut holders, mut needs_live_pods) = current_holders(input, &previous_transit);
    // When each gone holder first had jobs revoked, for the time-in-transit of what it frees.
    let mut freed_since: BTreeMap<String, Timestamp> = BTreeMap::new();
    if input.pods_are_live {
        for pod in holders.gone(input.pods) {
            if let Some(h) = holders.entries.remove(&pod) {
                freed_since.insert(pod, h.revoked_at);
            }
        }
    } else if !holders.gone(input.pods).is_empty() {
        // The cache says a holder is gone; only a live list may confirm it.
        needs_live_pods = true;
    }
    let live_holders: BTreeSet<String> = holders.entries.keys().cloned().collect();
    let live_holder = |pod: &str| live_holders.contains(pod);

    let published = published_by_job(input.previous);
    let replicas = input.target.replicas();
    let mut out = HandoffOutcome {
        held: vec![Vec::new(); replicas],
        ..HandoffOutcome::default()
    };
    let mut transit: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut newly_revoked: BTreeSet<String> = BTreeSet::new();
    let mut revoked_from: BTreeSet<String> = BTreeSet::new();
    let mut spec: BTreeSet<&str> = BTreeSet::new();

    let owner_of = target_owners(input.target);
    for job in input.jobs {
        spec.insert(job.as_str());
        let destination = owner_of
            .get(job.as_str())
            .map(|&ordinal| pod_name(input.statefulset, ordinal));
        let held_by = published.get(job.as_str()).cloned().unwrap_or_default();
        let in_transit_from: Vec<&str> = previous_transit
            .get(job.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|pod| live_holder(pod))
            .collect();
        // Pods other than the destination that may run the job: it waits until they are gone.
        let blockers = held_by
            .iter()
            .map(String::as_str)
            .chain(in_transit_from.iter().copied())
            .any(|pod| Some(pod) != destination.as_deref());
        match destination {
            Some(to) if !blockers => {
                let was_in_transit = previous_transit.contains_key(job.as_str());
                if was_in_transit && !held_by.contains(&to) {
                    let since = previous_transit[job.as_str()]
                        .iter()
                        .filter_map(|pod| freed_since.get(*pod))
                        .min();
                    out.granted.push(GrantedJob {
                        after_seconds: since.map_or(0.0, |s| seconds_between(*s, input.now)),
                        to: to.clone(),
                    });
                }
                let ordinal = owner_of[job.as_str()];
                out.held[ordinal].push(job.clone());
            }
            _ => {
                // Revoke from every pod that holds it now; keep waiting for the live holders.
                for pod in &held_by {
                    transit.entry(pod.clone()).or_default().push(job.clone());
                    holders.mark(pod, input.now);
                    newly_revoked.insert(job.clone());
                    revoked_from.insert(pod.clone());
                }
                for pod in &in_transit_from {
                    push_unique(transit.entry((*pod).to_owned()).or_default(), job);
                }
                if held_by.is_empty() && in_transit_from.is_empty() {
                    // No worker (N = 0) and no one left who may run it: simply unassigned.
                    continue;
                }
                out.jobs_in_transit += 1;
                if let Some(to) = destination {
                    out.awaiting_grants.insert(to);
                }
            }
        }
    }

    // Jobs that left the spec: whoever may still run one keeps it in transit until gone, so
    // the job is not granted early if it comes back.
    for (job, pods) in &published {
        if spec.contains(job) {
            continue;
        }
        for pod in pods {
            transit
                .entry(pod.clone())
                .or_default()
                .push((*job).to_owned());
            holders.mark(pod, input.now);
        }
    }
    for (job, pods) in &previous_transit {
        if spec.contains(job) {
            continue;
        }
        for pod in pods.iter().filter(|pod| live_holder(pod)) {
            push_unique(transit.entry((*pod).to_owned()).or_default(), job);
        }
    }

    // Holders with nothing left in transit are done.
    holders.entries.retain(|pod, _| transit.contains_key(pod));
    out.revoked = newly_revoked.len();
    out.revoked_from = sorted_pods(revoked_from);
    out.holder_pods = holders.entries.keys().cloned().collect();
    out.needs_live_pods = needs_live_pods || holders.has_unresolved();
    out.transit = transit;
    out.holders = holders;
    out
}

/// The holders to go by: the recorded ones, plus any pod the config lists jobs in transit for
/// without a record (a lost or unreadable annotation), which must be resolved again.
fn current_holders(
    input: &HandoffInput,
    previous_transit: &BTreeMap<&str, Vec<&str>>,
) -> (Holders, bool) {
    let mut holders = input.holders.cloned().unwrap_or_default();
    let mut unresolved = false;
    for pod in previous_transit.values().flatten() {
        if !holders.entries.contains_key(*pod) {
            holders.mark(pod, input.now);
            unresolved = true;
        }
    }
    if input.pods_are_live {
        // Resolve: the instance listed now may have started on the content that gave it jobs.
        holders.entries.retain(|pod, h| {
            if !h.uid.is_empty() {
                return true;
            }
            match input.pods.uid(pod) {
                Some(uid) => {
                    h.uid = uid.to_owned();
                    true
                }
                None => false,
            }
        });
        unresolved = false;
    }
    (holders, unresolved)
}

/// Every job of the previous config's `workloads` and the pods that list it.
fn published_by_job(previous: Option<&WorkerConfig>) -> BTreeMap<&str, Vec<String>> {
    let mut by_job: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (pod, workload) in previous.into_iter().flat_map(WorkerConfig::workloads) {
        for job in &workload.jobs {
            let pods = by_job.entry(job.as_str()).or_default();
            if !pods.iter().any(|p| p == pod) {
                pods.push(pod.to_owned());
            }
        }
    }
    by_job
}

/// Every job of the previous config's `transit` and the pods it is in transit from.
fn transit_by_job(previous: Option<&WorkerConfig>) -> BTreeMap<&str, Vec<&str>> {
    let mut by_job: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, jobs) in previous.into_iter().flat_map(WorkerConfig::transit) {
        for job in jobs {
            let pods = by_job.entry(job.as_str()).or_default();
            if !pods.contains(&pod) {
                pods.push(pod);
            }
        }
    }
    by_job
}

fn target_owners(target: &Assignment) -> BTreeMap<&str, usize> {
    target
        .workers()
        .iter()
        .enumerate()
        .flat_map(|(ordinal, jobs)| jobs.iter().map(move |job| (job.as_str(), ordinal)))
        .collect()
}

fn push_unique(jobs: &mut Vec<String>, job: &str) {
    if !jobs.iter().any(|j| j == job) {
        jobs.push(job.to_owned());
    }
}

/// Pod names in ordinal order (`w-2` before `w-10`).
fn sorted_pods(pods: BTreeSet<String>) -> Vec<String> {
    let mut pods: Vec<String> = pods.into_iter().collect();
    pods.sort_by_cached_key(|pod| match pod.rsplit_once('-') {
        Some((prefix, ordinal)) => (prefix.to_owned(), ordinal.parse::<u64>().ok(), pod.clone()),
        None => (pod.clone(), None, pod.clone()),
    });
    pods
}

fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}
