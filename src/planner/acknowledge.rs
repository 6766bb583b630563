//! The workers that still owe an acknowledgement (`rollout.policy: Acknowledge`, pure).
//!
//! Each version that changes a worker's jobs must be acknowledged by the worker's pod instance
//! in its Lease (see [`crate::state::lease`]). Until it is, the worker is stale, recorded in the
//! ConfigMap's [`AWAITING_ACK_ANNOTATION`](swarm_protocol::names::AWAITING_ACK_ANNOTATION) with the instance waited for and since when, so the
//! timeout survives operator restarts. A worker that has not acknowledged within
//! `rollout.ackTimeoutSeconds` is handed to the `DeletePods` bookkeeping: its pod is deleted,
//! paced like any stale worker, and its replacement reads the current config at start.
//!
//! The timeout is a progress deadline, as a Deployment's is: it runs from the write or from the
//! pool's last acknowledgement, whichever is later. While acknowledgements keep coming the API
//! server is taking them, if slowly (a large rollout, or its shedding of requests under load),
//! and restarting the workers still waited for would only add to its load; once none has come
//! for the timeout, the workers still waited for are stuck and are restarted.
//!
//! This is only about restarts and status. What keeps a moved job on one worker is the handoff
//! (see [`super::handoff`]), which releases a revoked job on its holder's acknowledgement.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_protocol::config::WorkerConfig;

use crate::planner::rollout::Workers;
use crate::state::lease::Acks;
use crate::state::records::{Awaiting, AwaitingAcks};

/// What changed in the records this step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckProgress {
    /// Workers that acknowledged their jobs: (pod, uid, version).
    pub acknowledged: Vec<(String, String, u64)>,
    /// Workers whose time ran out: (pod, uid). Their pods are to be refreshed.
    pub timed_out: Vec<(String, String)>,
}

/// Workers whose Ready pod instance has not acknowledged its entry of `config`. A pod that
/// started after a write reads the config at start, so the handoff waits for no acknowledgement
/// from it; but until it acknowledges, nothing says it runs its jobs, and the status says so.
pub fn unacknowledged<'a>(
    config: &'a WorkerConfig,
    workers: &'a Workers,
    acks: &'a Acks,
) -> impl Iterator<Item = &'a str> + 'a {
    workers.iter().filter_map(move |(pod, instance)| {
        let instance = instance.filter(|p| p.ready && !p.terminating)?;
        let version = config.workload(pod).map_or(config.version, |w| w.version);
        (!acks.state(pod, &instance.uid).covers(version)).then_some(pod)
    })
}

impl AwaitingAcks {
    /// Pod names of the workers waited for.
    pub fn pods(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// One step from `previous` (the config written) to `config` (the one to write): workers
    /// whose instance acknowledged their entry's version are done; `touched` workers (whose jobs
    /// `config` changes) owe an acknowledgement from now; a new instance gets a fresh `timeout`;
    /// a worker without a running pod owes nothing (its next pod reads the config at start);
    /// an acknowledgement restarts every other worker's clock (the pool progresses); and a
    /// worker past `timeout` leaves these records for a refresh.
    #[allow(clippy::too_many_arguments, reason = "one input per rule above")]
    pub fn step<'a>(
        &mut self,
        previous: Option<&WorkerConfig>,
        touched: impl IntoIterator<Item = &'a str>,
        config: &WorkerConfig,
        workers: &Workers,
        acks: &Acks,
        now: Timestamp,
        timeout: SignedDuration,
    ) -> AckProgress {
        let mut progress = AckProgress::default();
        self.entries.retain(|pod, _| workers.contains(pod));
        // Acknowledged what is written: done, whatever this step changes next.
        if let Some(previous) = previous {
            self.settle(previous, workers, acks, now, &mut progress);
        }
        for pod in touched {
            self.entries.entry(pod.to_owned()).or_insert(Awaiting {
                uid: String::new(),
                since: now,
            });
        }
        self.settle(config, workers, acks, now, &mut progress);
        if !progress.acknowledged.is_empty() {
            for awaiting in self.entries.values_mut() {
                awaiting.since = awaiting.since.max(now);
            }
        }
        self.entries.retain(|pod, awaiting| {
            if now.duration_since(awaiting.since) < timeout {
                return true;
            }
            progress.timed_out.push((pod.clone(), awaiting.uid.clone()));
            false
        });
        progress
    }

    /// Follows each worker's instance and drops the workers that acknowledged their entry in
    /// `config`, or have no running pod.
    fn settle(
        &mut self,
        config: &WorkerConfig,
        workers: &Workers,
        acks: &Acks,
        now: Timestamp,
        progress: &mut AckProgress,
    ) {
        self.entries.retain(|pod, awaiting| {
            let Some(instance) = workers.pod(pod).filter(|p| !p.terminating) else {
                return false;
            };
            if awaiting.uid != instance.uid {
                // A replaced instance gets a window of its own.
                if !awaiting.uid.is_empty() {
                    awaiting.since = now;
                }
                awaiting.uid.clone_from(&instance.uid);
            }
            let version = config.workload(pod).map_or(config.version, |w| w.version);
            if acks.state(pod, &awaiting.uid).covers(version) {
                progress
                    .acknowledged
                    .push((pod.clone(), awaiting.uid.clone(), version));
                return false;
            }
            true
        });
    }
}
