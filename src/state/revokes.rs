//! When this operator first knew each worker's own ConfigMap to show each config version
//! (`rollout.policy: Acknowledge`), on its monotonic clock: where the revoke wait starts.
//!
//! A worker runs a job only within the permit of a fence read, a quorum GET of its own
//! ConfigMap sent less than its permit ago. Once that ConfigMap shows a version that revoked a
//! job, every read sent afterwards shows the revoke, and every read sent before lapses within
//! [`fence::revoke_wait`] on this clock. So a job revoked in version `V` from a worker that has
//! not acknowledged `V` is free once the wait has passed since this operator first knew the
//! worker's ConfigMap to show `V` or later: from the answer to its own write, or from a read or
//! the cache showing it (both come after the write that made it so). An operator that starts
//! or takes over knows nothing yet, so every wait starts again at its first sight.
//!
//! Forgetting an entry only ever makes a wait longer: the oldest are dropped first.
//!
//! [`fence::revoke_wait`]: swarm_protocol::fence::revoke_wait

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::slice_summary::SliceSummary;
use crate::state::worker_slices::Slice;

/// Versions remembered per worker: a worker holds jobs revoked in at most a few versions.
const VERSIONS_KEPT: usize = 8;

/// One worker's ConfigMap as this operator knew it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Shown {
    /// The resourceVersion last noted, so that an unchanged copy is not parsed again.
    resource_version: Option<String>,
    /// Config versions it was known to show and when first, by version.
    since: BTreeMap<u64, Instant>,
}

/// The workers' ConfigMaps of one pool as this operator came to know them. Shared with the
/// readings taken of it ([`RevokeLog::at`]), copied only if one is still held when it changes:
/// the drive reads it every round of every reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevokeLog {
    by_pod: Arc<BTreeMap<String, Shown>>,
}

impl RevokeLog {
    /// Notes that at `now` the workers' ConfigMaps `slices` (written, read or cached copies:
    /// all of the pool's) showed what they show, and forgets the workers without one.
    pub fn note<'a>(&mut self, slices: impl IntoIterator<Item = &'a SliceSummary>, now: Instant) {
        let by_pod = Arc::make_mut(&mut self.by_pod);
        let mut seen = std::collections::BTreeSet::new();
        for cm in slices {
            let Some(pod) = cm.worker.as_deref() else {
                continue;
            };
            seen.insert(pod);
            if !by_pod.contains_key(pod) {
                by_pod.insert(pod.to_owned(), Shown::default());
            }
            let shown = by_pod.get_mut(pod).expect("inserted above");
            if cm.metadata.resource_version.is_some()
                && shown.resource_version == cm.metadata.resource_version
            {
                continue;
            }
            shown
                .resource_version
                .clone_from(&cm.metadata.resource_version);
            shown
                .since
                .entry(Slice::read(cm, pod).version)
                .or_insert(now);
            while shown.since.len() > VERSIONS_KEPT {
                shown.since.pop_first();
            }
        }
        by_pod.retain(|pod, _| seen.contains(pod.as_str()));
    }

    /// What the planner reads, at `now`.
    pub fn at(&self, now: Instant) -> RevokeWaits {
        RevokeWaits {
            now,
            log: self.clone(),
        }
    }
}

/// The revoke log of one pool read at one instant: for how long each worker's ConfigMap has
/// been known to show a version. Pure: the instant is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevokeWaits {
    now: Instant,
    log: RevokeLog,
}

impl Default for RevokeWaits {
    fn default() -> Self {
        RevokeLog::default().at(Instant::now())
    }
}

impl RevokeWaits {
    /// How long the ConfigMap of `pod` has been known to show `version` or a later one; `None`
    /// if it never was.
    pub fn shown_for(&self, pod: &str, version: u64) -> Option<Duration> {
        let since = self
            .log
            .by_pod
            .get(pod)?
            .since
            .range(version..)
            .map(|(_, at)| *at)
            .min()?;
        Some(self.now.saturating_duration_since(since))
    }

    /// What is left of a wait of `wait` for `pod` at `version`: zero once over, `None` while the
    /// wait has not started (the ConfigMap is not known to show that version yet).
    pub fn left(&self, pod: &str, version: u64, wait: Duration) -> Option<Duration> {
        self.shown_for(pod, version)
            .map(|shown| wait.saturating_sub(shown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(pod: &str, version: u64, resource_version: &str) -> SliceSummary {
        let config = format!(
            "version: {version}\nworkloads:\n  {pod}:\n    version: {version}\n    jobs: []\n"
        );
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("cm.{pod}"),
                "resourceVersion": resource_version,
                "labels": {"swarm.io/pool": "p", "swarm.io/worker": pod},
            },
            "data": {"config.yml": config},
        }))
        .unwrap()
    }

    #[test]
    fn a_wait_starts_when_a_version_at_or_past_the_revoke_is_first_known() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut log = RevokeLog::default();
        log.note([&slice("w-0", 3, "10")], t0);
        log.note([&slice("w-0", 3, "10")], t0 + s(5));
        log.note([&slice("w-0", 5, "11")], t0 + s(7));
        let waits = log.at(t0 + s(10));
        assert_eq!(waits.shown_for("w-0", 2), Some(s(10)));
        assert_eq!(
            waits.shown_for("w-0", 3),
            Some(s(10)),
            "first known, not last"
        );
        assert_eq!(
            waits.shown_for("w-0", 4),
            Some(s(3)),
            "a later version counts"
        );
        assert_eq!(
            waits.shown_for("w-0", 6),
            None,
            "not shown yet: no wait runs"
        );
        assert_eq!(waits.left("w-0", 4, s(5)), Some(s(2)));
        assert_eq!(waits.left("w-0", 3, s(5)), Some(Duration::ZERO));
        assert_eq!(waits.shown_for("w-1", 1), None);
    }

    #[test]
    fn forgetting_only_lengthens_a_wait() {
        let t0 = Instant::now();
        let mut log = RevokeLog::default();
        for version in 1..=20 {
            let at = t0 + Duration::from_secs(version);
            log.note([&slice("w-0", version, &version.to_string())], at);
        }
        let waits = log.at(t0 + Duration::from_secs(30));
        assert_eq!(waits.shown_for("w-0", 20), Some(Duration::from_secs(10)));
        let oldest_kept = waits.shown_for("w-0", 1).unwrap();
        assert!(oldest_kept <= Duration::from_secs(29), "{oldest_kept:?}");
    }
}
