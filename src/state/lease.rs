//! A worker's Lease as the operator reads it (`rollout.policy: Acknowledge`): named like the
//! worker's pod, held by the pod instance's uid, with the config version it runs in the
//! [`ACKED_VERSION_ANNOTATION`](swarm_protocol::names::ACKED_VERSION_ANNOTATION) and its permit
//! in `leaseDurationSeconds`. Workers write it only to acknowledge: it says nothing of whether
//! they are alive (their pod's readiness does), so nothing here expires.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use swarm_protocol::fence;

use crate::state::lease_summary::LeaseSummary;

/// What one worker's Lease says: the pod instance that wrote it, and the version it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// `spec.holderIdentity`: the uid of the pod instance.
    pub holder: String,
    /// The config version whose entry that instance runs exactly.
    pub version: u64,
}

/// What a worker Lease means for one pod instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerLeaseState {
    /// No Lease held by this instance: it acknowledged nothing.
    Unheld,
    /// Held by this instance, which runs the version `acked` if any.
    Held {
        /// The config version the instance acknowledged.
        acked: Option<u64>,
    },
}

impl WorkerLeaseState {
    /// The config version the instance acknowledged.
    pub fn acked(self) -> Option<u64> {
        match self {
            Self::Unheld => None,
            Self::Held { acked } => acked,
        }
    }

    /// Whether the instance acknowledged `version` or a later one.
    pub fn covers(self, version: u64) -> bool {
        self.acked().is_some_and(|v| v >= version)
    }
}

/// One Lease as read: its holder, acknowledged version and the permit its worker declares.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    holder: String,
    acked: Option<u64>,
    permit: Option<Duration>,
}

/// The worker Leases of a pool, by pod name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acks {
    by_pod: BTreeMap<String, Held>,
}

impl Acks {
    /// The Leases among these that have a holder.
    pub fn from_leases<'a>(leases: impl IntoIterator<Item = &'a LeaseSummary>) -> Self {
        let by_pod = leases
            .into_iter()
            .filter_map(|lease| {
                let held = Held {
                    holder: lease.holder.clone()?,
                    acked: lease.acked.as_deref().and_then(|v| v.trim().parse().ok()),
                    permit: lease
                        .duration_seconds
                        .and_then(|s| u64::try_from(s).ok())
                        .filter(|&s| s > 0)
                        .map(Duration::from_secs),
                };
                Some((lease.name_any(), held))
            })
            .collect();
        Self { by_pod }
    }

    /// Acknowledgements of `(pod name, ack)` pairs, with the default permit (a what-if).
    pub fn new(acks: impl IntoIterator<Item = (String, Ack)>) -> Self {
        let mut all = Self::default();
        for (pod, ack) in acks {
            all.insert(pod, ack);
        }
        all
    }

    /// The state of the Lease of `pod` for its pod instance `uid`.
    pub fn state(&self, pod: &str, uid: &str) -> WorkerLeaseState {
        match self.held_by(pod, uid) {
            Some(held) => WorkerLeaseState::Held { acked: held.acked },
            None => WorkerLeaseState::Unheld,
        }
    }

    /// The permit the worker of `pod` instance `uid` declares in its Lease: how long a read of
    /// its ConfigMap lets it run jobs. [`fence::DEFAULT_PERMIT`] when its Lease does not say.
    pub fn permit(&self, pod: &str, uid: &str) -> Duration {
        self.held_by(pod, uid)
            .and_then(|held| held.permit)
            .unwrap_or(fence::DEFAULT_PERMIT)
    }

    fn held_by(&self, pod: &str, uid: &str) -> Option<&Held> {
        self.by_pod
            .get(pod)
            .filter(|held| !uid.is_empty() && held.holder == uid)
    }

    /// Records that the Lease of `pod` now says `ack`, with the permit it said before if its
    /// holder is the same.
    pub fn insert(&mut self, pod: impl Into<String>, ack: Ack) {
        let pod = pod.into();
        let permit = self
            .by_pod
            .get(&pod)
            .filter(|held| held.holder == ack.holder)
            .and_then(|held| held.permit);
        let held = Held {
            holder: ack.holder,
            acked: Some(ack.version),
            permit,
        };
        self.by_pod.insert(pod, held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use swarm_protocol::names::ACKED_VERSION_ANNOTATION;

    fn lease(name: &str, holder: Option<&str>, version: Option<&str>) -> LeaseSummary {
        let mut annotations = serde_json::Map::new();
        if let Some(v) = version {
            annotations.insert(ACKED_VERSION_ANNOTATION.into(), json!(v));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 12},
        }))
        .unwrap()
    }

    #[test]
    fn a_lease_acknowledges_for_its_holder_only() {
        let leases = [
            lease("w-0", Some("uid-0"), Some("7")),
            lease("w-1", Some("uid-1"), None),
            lease("w-2", None, Some("3")),
            lease("w-3", Some("uid-3"), Some("seven")),
        ];
        let acks = Acks::from_leases(&leases);
        assert_eq!(acks.state("w-0", "uid-0").acked(), Some(7));
        assert!(acks.state("w-0", "uid-0").covers(7));
        assert!(!acks.state("w-0", "uid-0").covers(8));
        assert_eq!(
            acks.state("w-0", "uid-other"),
            WorkerLeaseState::Unheld,
            "another instance's Lease"
        );
        assert_eq!(
            acks.state("w-0", ""),
            WorkerLeaseState::Unheld,
            "an unresolved instance"
        );
        for pod in ["w-1", "w-2", "w-3"] {
            assert_eq!(
                acks.state(pod, &format!("uid-{}", &pod[2..])).acked(),
                None,
                "{pod}"
            );
        }
    }

    #[test]
    fn the_permit_is_the_holders_declaration_else_the_default() {
        let acks = Acks::from_leases(&[lease("w-0", Some("uid-0"), Some("7"))]);
        assert_eq!(acks.permit("w-0", "uid-0"), Duration::from_secs(12));
        assert_eq!(acks.permit("w-0", "uid-1"), fence::DEFAULT_PERMIT);
        assert_eq!(acks.permit("w-9", "uid-9"), fence::DEFAULT_PERMIT);
        let mut acks = acks;
        let ack = |holder: &str| Ack {
            holder: holder.into(),
            version: 8,
        };
        acks.insert("w-0", ack("uid-0"));
        assert_eq!(acks.permit("w-0", "uid-0"), Duration::from_secs(12));
        acks.insert("w-0", ack("uid-1"));
        assert_eq!(acks.permit("w-0", "uid-1"), fence::DEFAULT_PERMIT);
    }
}
