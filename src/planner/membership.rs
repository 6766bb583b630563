//! Step 1c of the pipeline: which workers take part in the assignment (`rollout.policy:
//! Acknowledge`; under the other policies every worker does).

use std::collections::BTreeSet;

use super::Observed;
use super::acknowledge;
use super::validate::Valid;
use crate::api::crd::RolloutPolicy;

/// Who takes part in this plan's assignment and handoff.
pub(super) struct Membership {
    /// Whether the pool runs under `rollout.policy: Acknowledge`; nothing else applies if not.
    pub acknowledge: bool,
    /// Positions of the workers whose Lease expired, as a live read confirmed: not members.
    pub expired: BTreeSet<usize>,
    /// Workers given no job and whose jobs are revoked: terminating, or their Lease expired.
    pub terminating: BTreeSet<String>,
    /// Workers not ready for jobs: their pod is not Ready, or its instance acknowledged no
    /// version yet (its worker process is not up, or does not speak the protocol).
    pub unready: BTreeSet<String>,
}

impl Membership {
    /// The membership of `valid.workers` as `o` shows them.
    pub fn of(o: &Observed, valid: &Valid) -> Membership {
        let acknowledge = o.pool.spec.rollout.policy == RolloutPolicy::Acknowledge;
        if !acknowledge {
            return Membership {
                acknowledge,
                expired: BTreeSet::new(),
                terminating: BTreeSet::new(),
                unready: BTreeSet::new(),
            };
        }
        // A worker whose Lease expired (as read live) gets no job, and its jobs go to the
        // others (it stopped them when it could not renew).
        let expired: BTreeSet<usize> = acknowledge::expired_workers(&valid.workers, o.acks)
            .into_iter()
            .map(|(position, _)| position)
            .collect();
        let terminating = valid
            .workers
            .iter()
            .enumerate()
            .filter(|(position, (_, pod))| {
                expired.contains(position) || pod.is_some_and(|p| p.terminating)
            })
            .map(|(_, (name, _))| name.to_owned())
            .collect();
        let unready = valid
            .workers
            .iter()
            .filter(|(name, pod)| {
                pod.is_none_or(|p| {
                    !p.terminating && (!p.ready || o.acks.state(name, &p.uid).acked().is_none())
                })
            })
            .map(|(name, _)| name.to_owned())
            .collect();
        Membership {
            acknowledge,
            expired,
            terminating,
            unready,
        }
    }
}
