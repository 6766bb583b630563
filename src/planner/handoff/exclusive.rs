//! The `Exclusive` handoff (see [`super`]): each job of the spec decided in turn, revoked from
//! the pods that may still run it and granted once none is live.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use super::holders::observed_holders;
use super::published::{Pods, Published, transit_by_job};
use super::{GrantedJob, HandoffInput, HandoffOutcome, push_unique};
use crate::planner::by_job::Positions;
use crate::state::records::Holders;

/// Revoke, resolve, grant: see the [`super`] documentation for the rules.
pub(super) fn exclusive<'a>(input: &HandoffInput<'a>) -> HandoffOutcome<'a> {
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
