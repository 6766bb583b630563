//! Step 1c of the pipeline: which workers take part in the assignment (`rollout.policy:
//! Acknowledge`; under the other policies every worker does).
//!
//! A worker proves itself alive through what the cluster already pays for: its pod's readiness
//! (its worker answers ready only while its reads of its ConfigMap succeed, and the kubelet
//! writes the pod's status only when that changes) and its node's Lease. A worker is out of the
//! pool, given no job and its jobs revoked, when its pod is terminating, has been NotReady for
//! the pool's grace, or runs on a node whose Lease is silent. A worker that is starting is not
//! failed: a pod none of whose containers has run yet (its image pulling) has no worker to judge,
//! and a container that has just started (a new pod, or a crashed worker restarted in the same
//! pod, which takes its jobs back with its first read) has [`START_WINDOW`] to turn Ready.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::Observed;
use super::rollout::WorkerPod;
use super::validate::Valid;
use crate::api::crd::{RolloutPolicy, UnavailableReason, UnavailableWorker};
use crate::state::node_leases::NodeLeases;

/// How long after its container started a pod NotReady since then counts as starting, not
/// failed: its worker answers ready after its first read, and the kubelet sees it at its next
/// probe (every 5 s). Short enough that a worker that freezes as it starts still fails over
/// within the documented bound: this window, then the revoke wait (33.2 s on defaults).
pub const START_WINDOW: SignedDuration = SignedDuration::from_secs(15);

/// How long before the pod turned NotReady its container may have started and still count as
/// that start: the kubelet writes the two in one status, a moment apart.
const START_SLACK: SignedDuration = SignedDuration::from_secs(5);

/// Who takes part in this plan's assignment and handoff.
pub(super) struct Membership {
    /// Whether the pool runs under `rollout.policy: Acknowledge`; nothing else applies if not.
    pub acknowledge: bool,
    /// Positions of the workers out of the pool: not members.
    pub out: BTreeSet<usize>,
    /// The workers out of the pool (not terminating) and why, in position order.
    pub unavailable: Vec<UnavailableWorker>,
    /// Workers given no job and whose jobs are revoked: terminating, or out of the pool.
    pub terminating: BTreeSet<String>,
    /// Workers not ready for jobs: their pod is not Ready, or its instance acknowledged no
    /// version yet (its worker process is not up, or does not speak the protocol).
    pub unready: BTreeSet<String>,
    /// When a worker's membership changes with no event to tell: a grace or a start window
    /// ends, a node's Lease turns silent.
    pub next_change: Option<Duration>,
}

impl Membership {
    /// The membership of `valid.workers` as `o` shows them.
    pub fn of(o: &Observed, valid: &Valid) -> Membership {
        let acknowledge = o.pool.spec.rollout.policy == RolloutPolicy::Acknowledge;
        let mut members = Membership {
            acknowledge,
            out: BTreeSet::new(),
            unavailable: Vec::new(),
            terminating: BTreeSet::new(),
            unready: BTreeSet::new(),
            next_change: None,
        };
        if !acknowledge {
            return members;
        }
        let grace = SignedDuration::from_secs(o.pool.spec.rollout.lease_grace_seconds.max(0));
        let judge = Judge {
            now: o.now,
            grace,
            nodes: o.node_leases,
        };
        for (position, (name, pod)) in valid.workers.iter().enumerate() {
            let Some(pod) = pod else {
                members.unready.insert(name.to_owned());
                continue;
            };
            if pod.terminating {
                members.terminating.insert(name.to_owned());
                continue;
            }
            let (out, change) = judge.out(pod);
            members.next_change = earliest(members.next_change, change);
            if let Some((reason, since)) = out {
                members.out.insert(position);
                members.terminating.insert(name.to_owned());
                members.unavailable.push(UnavailableWorker {
                    pod: name.to_owned(),
                    reason,
                    since: since.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
                });
            } else if !pod.ready || o.acks.state(name, &pod.uid).acked().is_none() {
                members.unready.insert(name.to_owned());
            }
        }
        members
    }
}

/// The rules that take a running worker out of the pool, at one instant.
struct Judge<'a> {
    now: Timestamp,
    grace: SignedDuration,
    nodes: &'a NodeLeases,
}

impl Judge<'_> {
    /// Whether `pod` is out of the pool, why and since when; and when that may change.
    fn out(
        &self,
        pod: &WorkerPod,
    ) -> (
        Option<(UnavailableReason, Option<Timestamp>)>,
        Option<Duration>,
    ) {
        if let Some(node) = pod.node.as_deref()
            && let Some(since) = self.nodes.silent_since(node, self.now)
        {
            return (
                Some((UnavailableReason::NodeLeaseSilent, Some(since))),
                None,
            );
        }
        let node_change = pod
            .node
            .as_deref()
            .and_then(|node| self.nodes.silent_in(node, self.now));
        if pod.ready || !pod.ran {
            return (None, node_change.and_then(positive));
        }
        let Some(since) = pod.not_ready_since else {
            return (None, node_change.and_then(positive));
        };
        let grace_ends = since + self.grace;
        // A start's window: the container started about when the pod turned NotReady (a pod
        // that was Ready after its start and then failed gets the grace alone).
        let start_ends = pod
            .started
            .filter(|started| *started + START_SLACK >= since)
            .map(|started| started + START_WINDOW);
        let ends = start_ends.map_or(grace_ends, |r| r.max(grace_ends));
        if self.now < ends {
            let left = positive(ends.duration_since(self.now));
            return (None, earliest(left, node_change.and_then(positive)));
        }
        (Some((UnavailableReason::NotReady, Some(since))), None)
    }
}

fn positive(d: SignedDuration) -> Option<Duration> {
    Duration::try_from(d).ok().filter(|d| !d.is_zero())
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_000 + second).unwrap()
    }

    fn pod(ready: bool, not_ready_since: Option<i64>, started: Option<i64>) -> WorkerPod {
        WorkerPod {
            uid: "u".into(),
            ready,
            terminating: false,
            not_ready_since: not_ready_since.map(at),
            started: started.map(at),
            ran: true,
            node: Some("n".into()),
        }
    }

    fn judge(now: i64, nodes: &NodeLeases) -> Judge<'_> {
        Judge {
            now: at(now),
            grace: SignedDuration::from_secs(2),
            nodes,
        }
    }

    #[test]
    fn a_pod_not_ready_for_the_grace_is_out_unless_its_container_just_started() {
        let nodes = NodeLeases::default();
        let frozen = pod(false, Some(0), Some(-600));
        assert_eq!(
            judge(1, &nodes).out(&frozen),
            (None, Some(Duration::from_secs(1)))
        );
        let (out, _) = judge(2, &nodes).out(&frozen);
        assert_eq!(out, Some((UnavailableReason::NotReady, Some(at(0)))));

        // A crashed container restarted in the same pod, or a new pod's: not Ready until its
        // worker's first read and the kubelet's next probe.
        let restarted = pod(false, Some(0), Some(1));
        let (out, change) = judge(5, &nodes).out(&restarted);
        assert_eq!(out, None, "within the start window");
        assert_eq!(change, Some(Duration::from_secs(11)));
        let (out, _) = judge(16, &nodes).out(&restarted);
        assert_eq!(
            out,
            Some((UnavailableReason::NotReady, Some(at(0)))),
            "never turned Ready, or crash-looping"
        );

        // Ready after its start, then NotReady: the grace alone.
        let failed_later = pod(false, Some(10), Some(1));
        let (out, _) = judge(12, &nodes).out(&failed_later);
        assert_eq!(out, Some((UnavailableReason::NotReady, Some(at(10)))));

        // No container has run yet (its image is pulling): there is no worker to judge.
        let pulling = WorkerPod {
            started: None,
            ran: false,
            ..pod(false, Some(0), None)
        };
        assert_eq!(judge(600, &nodes).out(&pulling), (None, None));

        assert_eq!(
            judge(100, &nodes).out(&pod(true, None, Some(0))),
            (None, None)
        );
    }

    #[test]
    fn a_worker_on_a_silent_node_is_out_even_while_its_pod_says_ready() {
        // Another node renews: the view is current.
        let nodes = NodeLeases::new([("n".to_owned(), at(0)), ("m".to_owned(), at(19))]);
        let ready = pod(true, None, Some(-600));
        assert_eq!(
            judge(5, &nodes).out(&ready),
            (None, Some(Duration::from_secs(15))),
            "looked at again when the node would turn silent"
        );
        let (out, _) = judge(20, &nodes).out(&ready);
        assert_eq!(out, Some((UnavailableReason::NodeLeaseSilent, Some(at(0)))));
    }
}
