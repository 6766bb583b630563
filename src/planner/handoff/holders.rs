//! The holders of jobs in transit: recorded with each revoke, resolved against pods listed
//! live, and released when their instance is gone, or under `Acknowledge` when it acknowledges
//! the revoking version or its revoke wait is over.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use swarm_protocol::fence;

use super::{HandoffInput, Revokes};
use crate::state::records::{Holder, Holders};

impl Holders {
    /// Records `pod` as a holder whose instance is still to be resolved. A pod that held jobs
    /// before keeps its earliest revocation time.
    pub(super) fn mark(&mut self, pod: &str, now: Timestamp) {
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

/// The holders to go by (see [`current_holders`]), with those a live list shows gone marked
/// so, and whether pods must still be listed live: to resolve a holder, or to confirm one gone
/// that only the cache shows gone.
pub(super) fn observed_holders(
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

// The revoke wait itself is `swarm_protocol::fence`'s: these check what frees a holder.
#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::state::lease::{Ack, Acks};
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
