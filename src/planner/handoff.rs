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
//!
//! The `Exclusive` decisions are in `exclusive`, the holders' records in `holders`, and what
//! the config now written lists in `published`.

mod exclusive;
mod holders;
mod published;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use swarm_assign::Roster;
use swarm_protocol::config::WorkerConfig;

use crate::api::crd::Handoff;
use crate::planner::by_job::Positions;
use crate::planner::target::Target;
use crate::state::lease::Acks;
use crate::state::records::Holders;
use crate::state::revokes::RevokeWaits;
use exclusive::exclusive;
pub use holders::PodIndex;
use published::{Published, transit_by_job};

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

fn push_unique(jobs: &mut Vec<String>, job: &str) {
    if !jobs.iter().any(|j| j == job) {
        jobs.push(job.to_owned());
    }
}
