//! The handoff: how a job moves from the worker that holds it to the one the assignment names.
//!
//! Under `Exclusive` a job is never granted while a pod instance that may still run it is live:
//!
//! 1. **Revoke.** A job that leaves a worker (it moves, its worker is scaled away, or it left the
//!    spec) is listed for no worker: it is *in transit*, under `transit` in `config.yml`, by the
//!    pod that last held it. That pod becomes a *holder*, recorded in the
//!    [`HANDOFF_ANNOTATION`](swarm_protocol::names::HANDOFF_ANNOTATION) with an empty uid in the same write.
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
//! Under `Overlap` the new assignment is published at once (make before break). Only a free slot
//! of a Deployment pool has nobody to publish under: its jobs wait in transit for the pod that
//! takes it, as they do under `Exclusive`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use smallvec::SmallVec;
use swarm_assign::Roster;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::fence;

use crate::planner::target::Target;

use crate::api::crd::Handoff;
use crate::planner::by_job::{ByJob, Positions};
use crate::state::lease::Acks;
use crate::state::records::{Holder, Holders};
use crate::state::revokes::RevokeWaits;

impl Holders {
    /// Records `pod` as a holder whose instance is still to be resolved. A pod that held jobs
    /// before keeps its earliest revocation time.
    fn mark(&mut self, pod: &str, now: Timestamp) {
        let revoked_at = self.entries.get(pod).map_or(now, |h| h.revoked_at.min(now));
        self.entries.insert(
            pod.to_owned(),
            Holder {
                uid: String::new(),
                revoked_at,
                gone: false,
                version: None,
            },
        );
    }

    /// Whether some holder waits for resolution.
    pub fn has_unresolved(&self) -> bool {
        self.entries.values().any(|h| h.uid.is_empty() && !h.gone)
    }

    /// Resolved holders whose instance `pods` does not show (gone, or replaced by another uid).
    fn gone(&self, pods: &PodIndex) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(pod, h)| {
                !h.gone && !h.uid.is_empty() && pods.uid(pod) != Some(h.uid.as_str())
            })
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// Records `version` as the revoking version of the holders marked without one: the
    /// version about to be written, which lists their jobs in transit.
    pub fn stamp_version(&mut self, version: u64) {
        for holder in self.entries.values_mut() {
            holder.version.get_or_insert(version);
        }
    }

    /// Marks released the holders whose recorded instance acknowledged the version that
    /// revoked their jobs (they run exactly their entry of a version without those jobs), or
    /// whose revoke wait is over: their ConfigMap has shown that version for longer than any
    /// permit of a read sent before it lasts (see [`crate::state::revokes`]). Returns what is
    /// left of the shortest wait still running.
    fn release_acknowledged(&mut self, revokes: &Revokes) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        for (pod, holder) in &mut self.entries {
            if holder.gone {
                continue;
            }
            let Some(version) = holder.version else {
                continue;
            };
            if revokes.acks.state(pod, &holder.uid).covers(version) {
                holder.gone = true;
                continue;
            }
            let permit = revokes.acks.permit(pod, &holder.uid);
            let wait = fence::revoke_wait(permit, revokes.grace);
            match revokes.waits.left(pod, version, wait) {
                Some(left) if left.is_zero() => holder.gone = true,
                Some(left) => next = Some(next.map_or(left, |n| n.min(left))),
                None => {}
            }
        }
        next
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
    /// The pod each worker position is published under (a position without one gets no job).
    pub roster: &'a Roster,
    /// The pool's jobs, in spec order.
    pub jobs: &'a [String],
    /// Where the assignment wants every job of `jobs` (N workers, possibly 0).
    pub target: &'a Target,
    /// The config now in the ConfigMap, if it could be read.
    pub previous: Option<&'a WorkerConfig>,
    /// The holders as the ConfigMap records them (`None`: the annotation is unreadable).
    pub holders: Option<&'a Holders>,
    /// The pods of the namespace.
    pub pods: &'a PodIndex,
    /// Under `rollout.policy: Acknowledge`, what frees a holder besides its end: the
    /// acknowledgement of the version that revoked its jobs, or the end of its revoke wait. Each
    /// job is granted as soon as it is free (nothing restarts, so nothing is batched).
    pub revokes: Option<&'a Revokes<'a>>,
    /// Under `Acknowledge`, the workers whose pod is terminating: they are given no job, and
    /// the jobs they hold are revoked.
    pub terminating: &'a BTreeSet<String>,
    /// Under `Acknowledge`, the workers not started yet (no pod, a pod not Ready, or a worker
    /// that has not acknowledged any version): a job moving to one stays with its holder until
    /// it has, so the job runs nowhere only between the revoke and the grant, not for as long as
    /// a pod and its worker take to start.
    pub unready: &'a BTreeSet<String>,
    /// Whether `pods` was listed live after the last write that recorded unresolved holders.
    pub pods_are_live: bool,
    /// The current time.
    pub now: Timestamp,
}

/// What frees the holders of a pool under `rollout.policy: Acknowledge` before their end.
#[derive(Clone, Copy, Debug)]
pub struct Revokes<'a> {
    /// What the workers' Leases acknowledge, and the permit each declares.
    pub acks: &'a Acks,
    /// Since when each worker's ConfigMap has shown each version.
    pub waits: &'a RevokeWaits,
    /// The pool's grace (`rollout.leaseGraceSeconds`), added to every wait.
    pub grace: Duration,
}

/// The handoff's decision: what each worker may run now, and what stays in transit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HandoffOutcome<'a> {
    /// Jobs per ordinal to publish in `workloads`, in spec order within each worker, borrowed
    /// from the spec.
    pub held: Vec<Vec<&'a str>>,
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
    /// The pods that hold jobs of the spec in transit: refreshing them lets the handoff go on.
    pub holder_pods: BTreeSet<String>,
    /// What is left of the shortest revoke wait still running: the pool is looked at again
    /// then, as no event would say it is over.
    pub next_wait: Option<Duration>,
}

impl<'a> HandoffOutcome<'a> {
    /// Takes out the jobs each worker holds: what is left no longer borrows from the input.
    pub fn take_held(self) -> (Vec<Vec<&'a str>>, HandoffOutcome<'static>) {
        let HandoffOutcome {
            held,
            transit,
            holders,
            needs_live_pods,
            jobs_in_transit,
            revoked,
            revoked_from,
            granted,
            awaiting_grants,
            holder_pods,
            next_wait,
        } = self;
        let rest = HandoffOutcome {
            held: Vec::new(),
            transit,
            holders,
            needs_live_pods,
            jobs_in_transit,
            revoked,
            revoked_from,
            granted,
            awaiting_grants,
            holder_pods,
            next_wait,
        };
        (held, rest)
    }
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
pub fn hand_off<'a>(input: &HandoffInput<'a>) -> HandoffOutcome<'a> {
    match input.mode {
        Handoff::Overlap => overlap(input),
        Handoff::Exclusive => exclusive(input),
    }
}

/// Make before break: publish the target as it is; nothing is in transit.
fn overlap<'a>(input: &HandoffInput<'a>) -> HandoffOutcome<'a> {
    let previous_transit = transit_by_job(input.previous);
    let target = input.target.workers(input.jobs);
    let granted = target
        .iter()
        .enumerate()
        .filter_map(|(ordinal, jobs)| Some((input.roster.pod(ordinal)?, jobs)))
        .flat_map(|(pod, jobs)| {
            jobs.iter()
                .filter(|job| previous_transit.contains_key(**job))
                .map(move |_| GrantedJob {
                    to: pod.to_owned(),
                    after_seconds: 0.0,
                })
        })
        .collect();
    // A free slot (no pod yet) publishes nothing. Its jobs stay in transit by the pods that held
    // them, so the slot keeps them (see `swarm_assign::Rebound::current`) and the pod that takes
    // it inherits them; a job nobody held yet is placed anew once a pod is there.
    let positions = Positions::new(input.jobs);
    let published = Published::of(input.previous, &positions);
    let mut transit: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut jobs_in_transit = 0;
    let mut held = Vec::with_capacity(target.len());
    for (ordinal, jobs) in target.into_iter().enumerate() {
        if input.roster.pod(ordinal).is_some() {
            held.push(jobs);
            continue;
        }
        held.push(Vec::new());
        for job in jobs {
            let listed_by = positions
                .of(job)
                .map(|position| published.get(position, job));
            let from: BTreeSet<&str> = listed_by
                .into_iter()
                .flatten()
                .chain(previous_transit.get(job).into_iter().flatten().copied())
                .collect();
            for pod in &from {
                push_unique(transit.entry((*pod).to_owned()).or_default(), job);
            }
            jobs_in_transit += usize::from(!from.is_empty());
        }
    }
    HandoffOutcome {
        held,
        transit,
        jobs_in_transit,
        granted,
        ..HandoffOutcome::default()
    }
}

fn exclusive<'a>(input: &HandoffInput<'a>) -> HandoffOutcome<'a> {
    let previous_transit = transit_by_job(input.previous);
    let (holders, needs_live_pods, next_wait) = observed_holders(input, &previous_transit);
    let live_holders: BTreeSet<String> = holders
        .entries
        .iter()
        .filter(|(_, h)| !h.gone)
        .map(|(pod, _)| pod.clone())
        .collect();

    // Where each job of the spec stands. The decisions are made as they are applied, not
    // kept: a pool of 100,000 jobs would hold as many.
    let spec = Positions::new(input.jobs);
    let published = Published::of(input.previous, &spec);
    let decider = Decider::new(input, &previous_transit, &published, &live_holders);

    // A worker gets the jobs handed to it in one grant, once all of them are free: it restarts
    // once to pick them up, so granting some earlier would only cost another version. That
    // takes every decision first, so they are made twice.
    // Under `Acknowledge` nothing restarts: each job is granted as soon as it is free.
    let awaiting: BTreeSet<String> = match input.revokes {
        Some(_) => BTreeSet::new(),
        None => input
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(position, job)| match decider.decide(position, job) {
                Decision::Wait { to, .. } => to.map(str::to_owned),
                _ => None,
            })
            .collect(),
    };

    let mut draft = ExclusiveDraft::new(input, holders);
    for (position, job) in input.jobs.iter().enumerate() {
        draft.apply(
            input,
            &previous_transit,
            &awaiting,
            job,
            decider.decide(position, job),
        );
    }
    drop(decider);
    draft.keep_removed_jobs(input, &spec, &published, &previous_transit, &live_holders);
    let mut outcome = draft.finish(&spec, needs_live_pods);
    outcome.next_wait = next_wait;
    outcome
}

/// The holders to go by (see [`current_holders`]), with those a live list shows gone marked
/// so, and whether pods must still be listed live: to resolve a holder, or to confirm one gone
/// that only the cache shows gone.
fn observed_holders(
    input: &HandoffInput,
    previous_transit: &BTreeMap<&str, Vec<&str>>,
) -> (Holders, bool, Option<Duration>) {
    let (mut holders, mut needs_live_pods) = current_holders(input, previous_transit);
    let next_wait = input
        .revokes
        .and_then(|revokes| holders.release_acknowledged(revokes));
    if input.pods_are_live {
        for pod in holders.gone(input.pods) {
            if let Some(h) = holders.entries.get_mut(&pod) {
                h.gone = true;
            }
        }
    } else if !holders.gone(input.pods).is_empty() {
        // The cache says a holder is gone; only a live list may confirm it.
        needs_live_pods = true;
    }
    (holders, needs_live_pods, next_wait)
}

/// Where each job of the spec goes in this step: a job waits while a pod other than its
/// destination may still run it.
struct Decider<'i, 'a> {
    input: &'i HandoffInput<'a>,
    previous_transit: &'i BTreeMap<&'a str, Vec<&'a str>>,
    published: &'i Published<'a>,
    live_holders: &'i BTreeSet<String>,
    ordinal_of: BTreeMap<&'a str, usize>,
}

impl<'i, 'a> Decider<'i, 'a> {
    fn new(
        input: &'i HandoffInput<'a>,
        previous_transit: &'i BTreeMap<&'a str, Vec<&'a str>>,
        published: &'i Published<'a>,
        live_holders: &'i BTreeSet<String>,
    ) -> Self {
        let ordinal_of = (0..input.roster.len())
            .filter_map(|i| input.roster.pod(i).map(|pod| (pod, i)))
            .collect();
        Self {
            input,
            previous_transit,
            published,
            live_holders,
            ordinal_of,
        }
    }

    /// The decision on `job`, at `position` in the spec.
    fn decide(&self, position: usize, job: &str) -> Decision<'a> {
        let input = self.input;
        let previous_transit = self.previous_transit;
        let live_holder = |pod: &str| self.live_holders.contains(pod);
        let destination = input.target.owner(position);
        // A free slot has no pod to publish under: its jobs wait in transit for one. Nor has a
        // terminating pod under `Acknowledge`: its worker runs nothing any more.
        let to = destination
            .and_then(|ordinal| input.roster.pod(ordinal))
            .filter(|pod| !input.terminating.contains(*pod));
        let held_by: Pods = self.published.get(position, job);
        let was_in_transit = previous_transit.contains_key(job);
        let live_senders: Vec<&str> = previous_transit
            .get(job)
            .into_iter()
            .flatten()
            .copied()
            .filter(|pod| live_holder(pod))
            .collect();
        // Pods other than the destination that may run the job: it waits until they are gone.
        let blocked = held_by
            .iter()
            .chain(live_senders.iter())
            .any(|pod| Some(*pod) != to);
        // Under `Acknowledge`, a job whose destination has not started stays with the worker
        // that runs it, or goes back to the one it was revoked from.
        let destination_waits = input.revokes.is_some()
            && destination.is_some()
            && to.is_none_or(|pod| input.unready.contains(pod));
        let last_ran_at: &[&str] = if was_in_transit {
            &previous_transit[job]
        } else {
            &held_by
        };
        let stays_at = match last_ran_at {
            [pod] if destination_waits && !input.terminating.contains(*pod) => {
                self.ordinal_of.get(pod).copied()
            }
            _ => None,
        };
        match (destination, to) {
            _ if let Some(ordinal) = stays_at => {
                if was_in_transit {
                    Decision::Grant(ordinal)
                } else {
                    Decision::Publish(ordinal)
                }
            }
            (Some(ordinal), Some(pod)) if !blocked && was_in_transit && !held_by.contains(&pod) => {
                Decision::Grant(ordinal)
            }
            (Some(ordinal), Some(_)) if !blocked => Decision::Publish(ordinal),
            // A job in transit to a free slot stays in transit, so the slot keeps it.
            (Some(_), None) if was_in_transit => Decision::Wait {
                revoke_from: held_by,
                to: None,
            },
            _ if held_by.is_empty() && live_senders.is_empty() => Decision::Unassigned,
            _ => Decision::Wait {
                revoke_from: held_by,
                to,
            },
        }
    }
}

/// The outcome [`exclusive`] builds from its decisions. The jobs in transit and the holders
/// are kept apart from it until the holders with nothing left in transit are dropped.
struct ExclusiveDraft<'a> {
    out: HandoffOutcome<'a>,
    transit: BTreeMap<String, Vec<String>>,
    holders: Holders,
    /// Jobs of the spec this step revokes, for [`HandoffOutcome::revoked`].
    newly_revoked: BTreeSet<&'a str>,
    /// The pods they are revoked from, for [`HandoffOutcome::revoked_from`].
    revoked_from: BTreeSet<String>,
}

impl<'a> ExclusiveDraft<'a> {
    /// Nothing held by any worker yet, nothing in transit. Each worker has room for the jobs
    /// the target gives it or the jobs it holds now, whichever are more (a job may stay where it
    /// is for now): grown by doubling, a pool's job lists would take up to twice their size.
    fn new(input: &HandoffInput, holders: Holders) -> Self {
        let room = |ordinal: usize| {
            let holds = input
                .roster
                .pod(ordinal)
                .and_then(|pod| input.previous?.workload(pod))
                .map_or(0, |workload| workload.jobs.len());
            input.target.load(ordinal).max(holds)
        };
        Self {
            out: HandoffOutcome {
                held: (0..input.target.replicas())
                    .map(|ordinal| Vec::with_capacity(room(ordinal)))
                    .collect(),
                ..HandoffOutcome::default()
            },
            transit: BTreeMap::new(),
            holders,
            newly_revoked: BTreeSet::new(),
            revoked_from: BTreeSet::new(),
        }
    }

    /// Carries out the decision on `job`: held by its worker, granted to it (unless the worker
    /// still waits for other jobs), or kept in transit.
    fn apply(
        &mut self,
        input: &HandoffInput,
        previous_transit: &BTreeMap<&str, Vec<&str>>,
        awaiting: &BTreeSet<String>,
        job: &'a str,
        decision: Decision,
    ) {
        let Self {
            out,
            transit,
            holders,
            newly_revoked,
            revoked_from,
        } = self;
        // Grants go to positions with a pod (a free slot's jobs wait instead).
        let pod_of = |ordinal: usize| input.roster.pod(ordinal).unwrap_or_default();
        match decision {
            Decision::Publish(ordinal) => out.held[ordinal].push(job),
            Decision::Grant(ordinal) if !awaiting.contains(pod_of(ordinal)) => {
                let since = previous_transit[job]
                    .iter()
                    .filter_map(|pod| holders.entries.get(*pod).map(|h| h.revoked_at))
                    .min();
                out.granted.push(GrantedJob {
                    to: pod_of(ordinal).to_owned(),
                    after_seconds: since.map_or(0.0, |s| seconds_between(s, input.now)),
                });
                out.held[ordinal].push(job);
            }
            Decision::Grant(ordinal) => {
                // Free, but its worker still waits for others: it stays where it is listed.
                for pod in &previous_transit[job] {
                    push_unique(transit.entry((*pod).to_owned()).or_default(), job);
                }
                out.jobs_in_transit += 1;
                out.awaiting_grants.insert(pod_of(ordinal).to_owned());
            }
            Decision::Unassigned => {}
            Decision::Wait { revoke_from, to } => {
                // Revoke from every pod that holds it now; keep waiting for the live holders.
                for pod in revoke_from {
                    transit
                        .entry(pod.to_owned())
                        .or_default()
                        .push(job.to_owned());
                    holders.mark(pod, input.now);
                    newly_revoked.insert(job);
                    revoked_from.insert(pod.to_owned());
                }
                for pod in previous_transit.get(job).into_iter().flatten() {
                    if holders.entries.contains_key(*pod) {
                        push_unique(transit.entry((*pod).to_owned()).or_default(), job);
                    }
                }
                out.jobs_in_transit += 1;
                out.awaiting_grants.extend(to.map(str::to_owned));
            }
        }
    }

    /// Keeps the jobs that left the spec in transit by whoever may still run them.
    fn keep_removed_jobs(
        &mut self,
        input: &HandoffInput,
        spec: &Positions,
        published: &Published,
        previous_transit: &BTreeMap<&str, Vec<&str>>,
        live_holders: &BTreeSet<String>,
    ) {
        let live_holder = |pod: &str| live_holders.contains(pod);
        // Jobs that left the spec: whoever may still run one keeps it in transit until gone, so
        // the job is not granted early if it comes back.
        for (job, pods) in published.others.iter() {
            if spec.contains(job) {
                continue;
            }
            for pod in pods {
                self.transit
                    .entry((*pod).to_owned())
                    .or_default()
                    .push((*job).to_owned());
                self.holders.mark(pod, input.now);
            }
        }
        for (job, pods) in previous_transit {
            if spec.contains(job) {
                continue;
            }
            for pod in pods.iter().filter(|pod| live_holder(pod)) {
                push_unique(self.transit.entry((*pod).to_owned()).or_default(), job);
            }
        }
    }

    /// The outcome, once every job is decided: the holders left with something in transit,
    /// and what the handoff waits for.
    fn finish(self, spec: &Positions, needs_live_pods: bool) -> HandoffOutcome<'a> {
        let Self {
            mut out,
            transit,
            mut holders,
            newly_revoked,
            revoked_from,
        } = self;
        // Holders with nothing left in transit are done.
        holders.entries.retain(|pod, _| transit.contains_key(pod));
        out.revoked = newly_revoked.len();
        out.revoked_from = sorted_pods(revoked_from);
        // Only holders of jobs of the spec hold up a handoff: a worker that merely still runs jobs
        // removed from the spec is refreshed with its grant, once, like any receiver.
        out.holder_pods = holders
            .entries
            .iter()
            .filter(|(pod, h)| {
                !h.gone
                    && transit
                        .get(*pod)
                        .is_some_and(|jobs| jobs.iter().any(|j| spec.contains(j.as_str())))
            })
            .map(|(pod, _)| pod.clone())
            .collect();
        out.needs_live_pods = needs_live_pods || holders.has_unresolved();
        out.transit = transit;
        out.holders = holders;
        out
    }
}

/// Where one job of the spec goes in this step.
enum Decision<'a> {
    /// Stays with (or goes at once to) this ordinal: nobody else may run it.
    Publish(usize),
    /// Was in transit and is free now: granted to this ordinal, unless that worker still waits
    /// for other jobs.
    Grant(usize),
    /// No worker to go to and nobody runs it (0 replicas).
    Unassigned,
    /// Stays in (or goes into) transit: revoked from `revoke_from`, for worker `to`.
    Wait {
        revoke_from: Pods<'a>,
        to: Option<&'a str>,
    },
}

/// The holders to go by: the recorded ones, plus any pod the config lists jobs in transit for
/// without a record (a lost or unreadable annotation), which must be resolved again.
fn current_holders(
    input: &HandoffInput,
    previous_transit: &BTreeMap<&str, Vec<&str>>,
) -> (Holders, bool) {
    let mut holders = input.holders.cloned().unwrap_or_default();
    // Under `Acknowledge`, a record without a version was made under another policy: the
    // config now written lists its jobs in transit.
    if let (Some(_), Some(previous)) = (input.revokes, input.previous) {
        holders.stamp_version(previous.version);
    }
    let mut unresolved = false;
    for pod in previous_transit.values().flatten() {
        if !holders.entries.contains_key(*pod) {
            holders.mark(pod, input.now);
            unresolved = true;
        }
    }
    if input.pods_are_live {
        // Resolve: the instance listed now may have started on the content that gave it jobs;
        // without one, any instance created later starts on the new content.
        for (pod, h) in holders
            .entries
            .iter_mut()
            .filter(|(_, h)| h.uid.is_empty() && !h.gone)
        {
            match input.pods.uid(pod) {
                Some(uid) => h.uid = uid.to_owned(),
                None => h.gone = true,
            }
        }
        unresolved = false;
    }
    (holders, unresolved)
}

/// The pods that list one job: nearly always one, kept inline (a pool of 100,000 jobs would
/// otherwise make as many allocations on every plan).
type Pods<'a> = SmallVec<[&'a str; 1]>;

/// Every job of the previous config's `workloads` and the pods that list it: by spec position
/// for the first pod that lists a job of the spec (4 bytes per job where a table by name takes
/// 32), by name for the rest (jobs that left the spec, and a job listed twice by a hand edit).
struct Published<'a> {
    /// The pods of the previous config.
    pods: Vec<&'a str>,
    /// By spec position: the index in `pods` of the first pod listing the job, or [`UNLISTED`].
    first: Vec<u32>,
    /// Every other listing.
    others: ByJob<'a, &'a str>,
}

/// No pod lists the job.
const UNLISTED: u32 = u32::MAX;

impl<'a> Published<'a> {
    fn of(previous: Option<&'a WorkerConfig>, spec: &Positions) -> Self {
        let mut pods = Vec::new();
        let mut first = vec![UNLISTED; spec.len()];
        let mut others = Vec::new();
        for (pod, workload) in previous.into_iter().flat_map(WorkerConfig::workloads) {
            let index = u32::try_from(pods.len()).expect("fewer than 4 billion pods");
            pods.push(pod);
            for job in &workload.jobs {
                match spec.of(job) {
                    Some(position) if first[position] == UNLISTED => first[position] = index,
                    Some(position) if first[position] == index => {}
                    _ => others.push((job.as_str(), pod)),
                }
            }
        }
        Self {
            pods,
            first,
            others: ByJob::new(others),
        }
    }

    /// The pods that list `job`, at `position` in the spec, in order.
    fn get(&self, position: usize, job: &str) -> Pods<'a> {
        let first = self
            .first
            .get(position)
            .filter(|&&index| index != UNLISTED)
            .map(|&index| self.pods[index as usize]);
        let mut pods: Pods = first.into_iter().chain(self.others.get(job)).collect();
        if pods.len() > 1 {
            pods.sort_unstable();
            pods.dedup();
        }
        pods
    }
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

#[cfg(test)]
mod tests {

    mod revoke_wait {
        use std::time::{Duration, Instant};

        use super::super::*;
        use crate::state::lease::Ack;
        use crate::state::revokes::RevokeLog;
        use crate::state::slice_summary::SliceSummary;

        fn holders(version: u64) -> Holders {
            let mut holders = Holders::default();
            holders.entries.insert(
                "w-0".into(),
                Holder {
                    uid: "u0".into(),
                    revoked_at: Timestamp::UNIX_EPOCH,
                    gone: false,
                    version: Some(version),
                },
            );
            holders
        }

        fn slice(version: u64) -> SliceSummary {
            let config = format!("version: {version}\nworkloads: {{}}\n");
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "cm.w-0",
                    "resourceVersion": version.to_string(),
                    "labels": {"swarm.io/pool": "p", "swarm.io/worker": "w-0"},
                },
                "data": {"config.yml": config},
            }))
            .unwrap()
        }

        /// Whether the holder is free after `elapsed` since its ConfigMap first showed
        /// `shown`, with `acked` acknowledged; and what is left of its wait.
        fn release(shown: u64, elapsed: u64, acked: Option<u64>) -> (bool, Option<Duration>) {
            let t0 = Instant::now();
            let mut log = RevokeLog::default();
            log.note([&slice(shown)], t0);
            let waits = log.at(t0 + Duration::from_secs(elapsed));
            let acks = Acks::new(acked.map(|version| {
                let ack = Ack {
                    holder: "u0".into(),
                    version,
                };
                ("w-0".to_owned(), ack)
            }));
            let revokes = Revokes {
                acks: &acks,
                waits: &waits,
                grace: Duration::from_secs(2),
            };
            let mut holders = holders(5);
            let left = holders.release_acknowledged(&revokes);
            (holders.entries["w-0"].gone, left)
        }

        #[test]
        fn a_holder_is_free_on_its_acknowledgement_or_once_no_permit_can_outlast_the_revoke() {
            // 30 s permit, 2 % rates, 2 s grace: 33.22 s.
            assert_eq!(release(5, 0, Some(5)), (true, None), "acknowledged");
            assert!(!release(5, 0, Some(4)).0, "an older version");
            let (free, left) = release(5, 33, None);
            assert!(!free);
            assert!(
                left.is_some_and(|l| l < Duration::from_millis(230)),
                "{left:?}"
            );
            assert_eq!(release(5, 34, None), (true, None));
            assert_eq!(
                release(6, 34, None),
                (true, None),
                "a later version shows it too"
            );
            assert_eq!(
                release(4, 3_600, None),
                (false, None),
                "never shown: never free"
            );
        }
    }
    use super::*;
    use swarm_assign::{Assignment, pod_name};

    const STS: &str = "w";
    static NO_PODS: BTreeSet<String> = BTreeSet::new();

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|j| j.to_string()).collect()
    }

    fn config(workers: &[&[&str]], transit: &[(&str, &[&str])]) -> WorkerConfig {
        let workloads = workers.iter().enumerate().map(|(i, held)| {
            let workload = swarm_protocol::config::Workload {
                version: 1,
                jobs: jobs(held),
            };
            (pod_name(STS, i), workload)
        });
        WorkerConfig::new(1, workloads)
            .with_transit(transit.iter().map(|(pod, j)| (pod.to_string(), jobs(j))))
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    struct Case {
        spec: Vec<String>,
        target: Assignment,
        previous: WorkerConfig,
        holders: Holders,
        pods: PodIndex,
        live: bool,
    }

    impl Case {
        fn run(&self) -> Owned {
            owned(hand_off(&HandoffInput {
                mode: Handoff::Exclusive,
                roster: &Roster::statefulset(STS, self.target.replicas()),
                jobs: &self.spec,
                target: &Target::of(&self.spec, &self.target),
                previous: Some(&self.previous),
                holders: Some(&self.holders),
                pods: &self.pods,
                revokes: None,
                terminating: &NO_PODS,
                unready: &NO_PODS,
                pods_are_live: self.live,
                now: at(10),
            }))
        }
    }

    /// An outcome with the jobs held copied, so that it outlives its input.
    struct Owned {
        held: Vec<Vec<String>>,
        rest: HandoffOutcome<'static>,
    }

    impl std::ops::Deref for Owned {
        type Target = HandoffOutcome<'static>;

        fn deref(&self) -> &Self::Target {
            &self.rest
        }
    }

    fn owned(out: HandoffOutcome) -> Owned {
        let (held, rest) = out.take_held();
        let held = held
            .into_iter()
            .map(|jobs| jobs.into_iter().map(str::to_owned).collect())
            .collect();
        Owned { held, rest }
    }

    fn holders(entries: &[(&str, &str)]) -> Holders {
        Holders {
            entries: entries
                .iter()
                .map(|(pod, uid)| {
                    let holder = Holder {
                        uid: uid.to_string(),
                        revoked_at: at(0),
                        gone: false,
                        version: None,
                    };
                    (pod.to_string(), holder)
                })
                .collect(),
        }
    }

    #[test]
    fn a_moving_job_is_revoked_and_its_old_worker_becomes_an_unresolved_holder() {
        let case = Case {
            spec: jobs(&["a", "b"]),
            target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
            previous: config(&[&["a", "b"], &[]], &[]),
            holders: Holders::default(),
            pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
            live: false,
        };
        let out = case.run();
        assert_eq!(out.held, vec![jobs(&["a"]), vec![]]);
        assert_eq!(out.transit["w-0"], jobs(&["b"]));
        assert_eq!(out.holders.entries["w-0"].uid, "");
        assert!(out.needs_live_pods, "the holder must be resolved live");
        assert_eq!((out.revoked, out.jobs_in_transit), (1, 1));
        assert!(out.awaiting_grants.contains("w-1"));
    }

    #[test]
    fn a_job_is_granted_only_once_a_live_list_shows_its_holder_gone() {
        let mut case = Case {
            spec: jobs(&["a", "b"]),
            target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
            previous: config(&[&["a"], &[]], &[("w-0", &["b"])]),
            holders: holders(&[("w-0", "u0")]),
            pods: PodIndex::new([("w-0", "u0-new"), ("w-1", "u1")]),
            live: false,
        };
        let cached = case.run();
        assert!(cached.needs_live_pods, "the cache alone never grants");
        assert!(cached.held[1].is_empty());

        case.live = true;
        let out = case.run();
        assert_eq!(out.held[1], jobs(&["b"]));
        assert!(out.transit.is_empty() && out.holders.entries.is_empty());
        assert_eq!(out.granted.len(), 1);
        assert_eq!(out.granted[0].after_seconds, 10.0);

        case.pods = PodIndex::new([("w-0", "u0"), ("w-1", "u1")]);
        let still_there = case.run();
        assert!(
            still_there.held[1].is_empty(),
            "a terminating holder is live"
        );
    }

    #[test]
    fn a_holder_without_a_pod_at_resolution_frees_its_jobs() {
        let case = Case {
            spec: jobs(&["a"]),
            target: Assignment::new(vec![jobs(&["a"])]),
            previous: config(&[&[]], &[("w-3", &["a"])]),
            holders: holders(&[("w-3", "")]),
            pods: PodIndex::new([("w-0", "u0")]),
            live: true,
        };
        assert_eq!(case.run().held[0], jobs(&["a"]));
    }

    #[test]
    fn a_job_going_back_to_its_own_holder_is_granted_at_once() {
        let case = Case {
            spec: jobs(&["a"]),
            target: Assignment::new(vec![jobs(&["a"])]),
            previous: config(&[&[]], &[("w-0", &["a"])]),
            holders: holders(&[("w-0", "u0")]),
            pods: PodIndex::new([("w-0", "u0")]),
            live: true,
        };
        assert_eq!(
            case.run().held[0],
            jobs(&["a"]),
            "one instance per pod name"
        );
    }

    #[test]
    fn a_worker_gets_its_jobs_in_one_grant_once_all_are_free() {
        let mut case = Case {
            spec: jobs(&["a", "b", "c"]),
            target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"]), jobs(&["c"])]),
            previous: config(&[&["a"], &[], &[]], &[("w-3", &["b"]), ("w-4", &["c"])]),
            holders: holders(&[("w-3", "u3"), ("w-4", "u4")]),
            pods: PodIndex::new([("w-4", "u4")]),
            live: true,
        };
        case.target = Assignment::new(vec![jobs(&["a"]), jobs(&["b", "c"]), vec![]]);
        let out = case.run();
        assert!(
            out.held[1].is_empty(),
            "b is free but c is not: w-1 waits for both"
        );
        assert_eq!(out.jobs_in_transit, 2);
        assert!(out.holders.entries["w-3"].gone);

        // Once w-4 is gone too, both are granted in one step.
        let mut next = Case {
            previous: config(&[&["a"], &[], &[]], &[("w-3", &["b"]), ("w-4", &["c"])]),
            holders: out.holders.clone(),
            pods: PodIndex::new([]),
            ..case
        };
        next.live = true;
        let out = next.run();
        assert_eq!(out.held[1], jobs(&["b", "c"]));
        assert_eq!(out.granted.len(), 2);
    }

    #[test]
    fn a_removed_job_waits_for_its_holder_if_it_comes_back() {
        // Removed from the spec: it is in transit from w-0, unseen by the status.
        let removed = Case {
            spec: jobs(&["a"]),
            target: Assignment::new(vec![jobs(&["a"]), vec![]]),
            previous: config(&[&["a", "b"], &[]], &[]),
            holders: Holders::default(),
            pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
            live: true,
        };
        let out = removed.run();
        assert_eq!(out.transit["w-0"], jobs(&["b"]));
        assert_eq!(out.jobs_in_transit, 0);

        // Back in the spec before w-0 restarted: not granted to w-1 while w-0 may run it.
        let back = Case {
            spec: jobs(&["a", "b"]),
            target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
            previous: config(&[&["a"], &[]], &[("w-0", &["b"])]),
            holders: out.holders.clone(),
            pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
            live: true,
        };
        let out = back.run();
        assert!(out.held[1].is_empty());
        assert_eq!(out.jobs_in_transit, 1);
    }

    #[test]
    fn a_receiver_that_still_runs_a_removed_job_is_not_a_holder_to_refresh_first() {
        // w-1 runs the removed job c and receives b from w-0: it restarts once, after the grant.
        let case = Case {
            spec: jobs(&["a", "b"]),
            target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
            previous: config(&[&["a", "b"], &["c"]], &[]),
            holders: Holders::default(),
            pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
            live: true,
        };
        let out = case.run();
        assert_eq!(out.transit["w-1"], jobs(&["c"]));
        assert!(
            out.holders.entries.contains_key("w-1"),
            "c waits for w-1's pod"
        );
        assert_eq!(out.holder_pods, BTreeSet::from(["w-0".to_owned()]));
        assert!(out.awaiting_grants.contains("w-1"), "w-1 is held back");
    }

    /// The config after "a" (slot 0) held x and had z revoked, and "b" holds y.
    fn a_held_x_and_z_b_holds_y() -> WorkerConfig {
        WorkerConfig::new(
            1,
            [("a", &["x"][..]), ("b", &["y"][..])].map(|(pod, held)| {
                let workload = swarm_protocol::config::Workload {
                    version: 1,
                    jobs: jobs(held),
                };
                (pod.to_owned(), workload)
            }),
        )
        .with_transit([("a".to_owned(), jobs(&["z"]))])
    }

    #[test]
    fn jobs_for_a_free_slot_wait_in_transit_until_a_pod_takes_it() {
        // Slot 0's pod "a" terminated; no pod has taken the slot yet.
        let roster = Roster::new(vec![None, Some("b".into())], vec![]);
        let spec = jobs(&["x", "y", "z"]);
        let target = Target::of(
            &spec,
            &Assignment::new(vec![jobs(&["x", "z"]), jobs(&["y"])]),
        );
        let previous = a_held_x_and_z_b_holds_y();
        let input = |holders: &Holders, pods: &PodIndex| {
            owned(hand_off(&HandoffInput {
                mode: Handoff::Exclusive,
                roster: &roster,
                jobs: &spec,
                target: &target,
                previous: Some(&previous),
                holders: Some(holders),
                pods,
                revokes: None,
                terminating: &NO_PODS,
                unready: &NO_PODS,
                pods_are_live: true,
                now: at(10),
            }))
        };
        // "a" is gone: nothing blocks x and z, but the slot has no pod to publish them under.
        let out = input(&holders(&[("a", "ua")]), &PodIndex::default());
        assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
        assert_eq!(out.transit["a"], jobs(&["x", "z"]), "the slot keeps them");
        assert_eq!(out.jobs_in_transit, 2);
        assert!(out.granted.is_empty());
    }

    #[test]
    fn overlap_publishes_nothing_for_a_free_slot() {
        let out = owned(hand_off(&HandoffInput {
            mode: Handoff::Overlap,
            roster: &Roster::new(vec![None, Some("b".into())], vec!["c".into()]),
            jobs: &jobs(&["x", "y"]),
            target: &Target::of(
                &jobs(&["x", "y"]),
                &Assignment::new(vec![jobs(&["x"]), jobs(&["y"])]),
            ),
            previous: None,
            holders: None,
            pods: &PodIndex::default(),
            revokes: None,
            terminating: &NO_PODS,
            unready: &NO_PODS,
            pods_are_live: false,
            now: at(0),
        }));
        assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
        assert!(out.transit.is_empty(), "x was never held: nothing to keep");
    }

    #[test]
    fn overlap_keeps_a_free_slots_jobs_in_transit_by_the_pod_that_held_them() {
        // "a" held x and z and is gone; z was already waiting from an earlier plan.
        let previous = a_held_x_and_z_b_holds_y();
        let out = owned(hand_off(&HandoffInput {
            mode: Handoff::Overlap,
            roster: &Roster::new(vec![None, Some("b".into())], Vec::new()),
            jobs: &jobs(&["x", "y", "z"]),
            target: &Target::of(
                &jobs(&["x", "y", "z"]),
                &Assignment::new(vec![jobs(&["x", "z"]), jobs(&["y"])]),
            ),
            previous: Some(&previous),
            holders: None,
            pods: &PodIndex::default(),
            revokes: None,
            terminating: &NO_PODS,
            unready: &NO_PODS,
            pods_are_live: false,
            now: at(0),
        }));
        assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
        assert_eq!(out.transit["a"], jobs(&["x", "z"]), "the slot keeps them");
        assert_eq!(out.jobs_in_transit, 2);
        assert!(out.holders.entries().is_empty() && !out.needs_live_pods);
    }

    #[test]
    fn overlap_publishes_the_target_at_once() {
        let out = owned(hand_off(&HandoffInput {
            mode: Handoff::Overlap,
            roster: &Roster::statefulset(STS, 2),
            jobs: &jobs(&["a", "b"]),
            target: &Target::of(
                &jobs(&["a", "b"]),
                &Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
            ),
            previous: Some(&config(&[&["a", "b"], &[]], &[])),
            holders: None,
            pods: &PodIndex::default(),
            revokes: None,
            terminating: &NO_PODS,
            unready: &NO_PODS,
            pods_are_live: false,
            now: at(0),
        }));
        assert_eq!(out.held, vec![jobs(&["a"]), jobs(&["b"])]);
        assert!(out.transit.is_empty() && !out.needs_live_pods);
    }

    #[test]
    fn published_jobs_are_found_by_position_with_every_pod_that_lists_them() {
        let spec = jobs(&["a", "b", "c"]);
        // w-0 lists a and b; w-1 lists a again (a hand edit), b twice and a job that left the spec.
        let previous = config(&[&["a", "b"], &["gone", "a", "b", "b"]], &[]);
        let positions = Positions::new(&spec);
        let published = Published::of(Some(&previous), &positions);
        let (w0, w1) = (pod_name(STS, 0), pod_name(STS, 1));
        assert_eq!(published.get(0, "a").as_slice(), [w0.as_str(), w1.as_str()]);
        assert_eq!(published.get(1, "b").as_slice(), [w0.as_str(), w1.as_str()]);
        assert!(published.get(2, "c").is_empty());
        let left: Vec<(&str, Vec<&str>)> = published
            .others
            .iter()
            .filter(|(job, _)| !positions.contains(job))
            .map(|(job, pods)| (job, pods.collect()))
            .collect();
        assert_eq!(left, [("gone", vec![w1.as_str()])]);
        assert!(Published::of(None, &positions).get(0, "a").is_empty());
    }
}
