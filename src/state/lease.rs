//! A worker's Lease as the operator reads it (`rollout.policy: Acknowledge`): named like the
//! worker's pod, held by the pod instance's uid, with the config version it runs in the
//! [`ACKED_VERSION_ANNOTATION`](swarm_protocol::names::ACKED_VERSION_ANNOTATION). What a Lease means for
//! a pod instance (acknowledged, expired, confirmed) is its [`WorkerLeaseState`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::state::lease_state::{LiveRead, ObservedLease, Timed, WorkerLeaseState};
use crate::state::lease_summary::LeaseSummary;

/// What one worker's Lease says: the pod instance that wrote it, and the version it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// `spec.holderIdentity`: the uid of the pod instance.
    pub holder: String,
    /// The config version whose entry that instance runs exactly.
    pub version: u64,
}

/// What a worker's Lease says of its last renewal: any write by its worker changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// `spec.holderIdentity`.
    pub holder: String,
    /// `spec.renewTime`, as the worker wrote it (its own clock: compared, never measured).
    pub renew_time: Option<Timestamp>,
    /// The acknowledged version, as written.
    pub acked: Option<String>,
}

impl Renewal {
    /// The renewal a Lease records; `None` without a holder.
    pub fn of(lease: &LeaseSummary) -> Option<Renewal> {
        Some(Renewal {
            holder: lease.holder.clone()?,
            renew_time: lease.renew_time,
            acked: lease.acked.clone(),
        })
    }
}

/// The worker Leases of a pool, by pod name, as this operator observed and judged them: each
/// instance's state is [`WorkerLeaseState::of`] its Lease at the reading they were judged at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acks {
    by_pod: BTreeMap<String, ObservedLease>,
    /// The monotonic reading the Leases were judged at (see `controller::lease_clock`).
    judged_at: Option<Instant>,
    /// When the next of the Leases not expired expires if it is not renewed.
    next_expiry: Option<Timestamp>,
}

impl Acks {
    /// The Leases among these that have a holder, not timed yet.
    pub fn from_leases<'a>(leases: impl IntoIterator<Item = &'a LeaseSummary>) -> Self {
        Self {
            by_pod: leases
                .into_iter()
                .filter_map(|lease| {
                    Some((lease.name_any(), ObservedLease::new(Renewal::of(lease)?)))
                })
                .collect(),
            ..Self::default()
        }
    }

    /// Acknowledgements of `(pod name, ack)` pairs, never expiring (a what-if).
    pub fn new(acks: impl IntoIterator<Item = (String, Ack)>) -> Self {
        let mut all = Self::default();
        for (pod, ack) in acks {
            all.insert(pod, ack);
        }
        all
    }

    /// The state of the Lease of `pod` for its pod instance `uid`.
    pub fn state(&self, pod: &str, uid: &str) -> WorkerLeaseState {
        WorkerLeaseState::of(self.by_pod.get(pod), uid, self.judged_at)
    }

    /// Records the Lease of `pod` as observed.
    pub fn observe(&mut self, pod: impl Into<String>, lease: ObservedLease) {
        self.by_pod.insert(pod.into(), lease);
    }

    /// Records the monotonic reading the Leases were judged at.
    pub fn judged_at(&mut self, now: Instant) {
        self.judged_at = Some(now);
    }

    /// Records that the Lease of `pod`, saying `renewal`, expired (or, if nothing was judged
    /// yet, was judged expired at `at`).
    pub fn mark_expired(&mut self, pod: impl Into<String>, renewal: Renewal, at: Instant) {
        let now = *self.judged_at.get_or_insert(at);
        let lease = ObservedLease {
            timed: Some(Timed {
                unchanged_since: now,
                lasts: Duration::ZERO,
            }),
            ..ObservedLease::new(renewal)
        };
        self.observe(pod, lease);
    }

    /// Whether some Lease was judged expired, for its own holder.
    pub fn has_expired(&self) -> bool {
        self.expired().next().is_some()
    }

    /// The Leases judged expired, by pod name.
    fn expired(&self) -> impl Iterator<Item = (&String, &ObservedLease)> {
        self.by_pod.iter().filter(|(_, lease)| {
            WorkerLeaseState::of(Some(lease), &lease.renewal.holder, self.judged_at).is_expired()
        })
    }

    /// These Leases with their expiries checked against `live`, the pool's Leases as a live
    /// read returns them: a Lease renewed since it was judged expired (the cache lagged) is not
    /// expired; the others are confirmed. A Lease the read does not return was not renewed
    /// either (its worker would have created it).
    pub fn confirmed_by<'a>(&self, live: impl IntoIterator<Item = &'a LeaseSummary>) -> Acks {
        let live: BTreeMap<String, Option<Renewal>> = live
            .into_iter()
            .map(|lease| (lease.name_any(), Renewal::of(lease)))
            .collect();
        let expired: Vec<String> = self.expired().map(|(pod, _)| pod.clone()).collect();
        let mut confirmed = self.clone();
        for pod in expired {
            let lease = confirmed.by_pod.get_mut(&pod).expect("listed above");
            let renewed = live
                .get(&pod)
                .is_some_and(|now| now.as_ref() != Some(&lease.renewal));
            lease.live = if renewed {
                LiveRead::Renewed
            } else {
                LiveRead::UnchangedSinceWrite
            };
        }
        confirmed
    }

    /// Records that the config was written: the confirmations so far were read before it.
    pub fn written(&mut self) {
        for lease in self.by_pod.values_mut() {
            if lease.live == LiveRead::UnchangedSinceWrite {
                lease.live = LiveRead::UnchangedBeforeWrite;
            }
        }
    }

    /// Records that a Lease expires at `at` unless renewed.
    pub fn note_expiry(&mut self, at: Timestamp) {
        self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
    }

    /// When the next Lease expires unless renewed, if any may.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.next_expiry
    }

    /// Records that the Lease of `pod` now says `ack`, timed as before if its holder is the
    /// same.
    pub fn insert(&mut self, pod: impl Into<String>, ack: Ack) {
        let pod = pod.into();
        let previous = self
            .by_pod
            .remove(&pod)
            .filter(|l| l.renewal.holder == ack.holder);
        let renewal = Renewal {
            renew_time: previous.as_ref().and_then(|l| l.renewal.renew_time),
            holder: ack.holder,
            acked: Some(ack.version.to_string()),
        };
        let lease = ObservedLease {
            timed: previous.as_ref().and_then(|l| l.timed),
            live: previous.map_or(LiveRead::None, |l| l.live),
            ..ObservedLease::new(renewal)
        };
        self.by_pod.insert(pod, lease);
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
            "spec": {"holderIdentity": holder},
        }))
        .unwrap()
    }

    fn renewed(name: &str, holder: &str, second: i64) -> LeaseSummary {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {ACKED_VERSION_ANNOTATION: "3"}},
            "spec": {"holderIdentity": holder, "renewTime": format!("{}", Timestamp::from_second(second).unwrap())},
        }))
        .unwrap()
    }

    #[test]
    fn a_live_read_confirms_an_expiry_unless_the_lease_was_renewed_since() {
        use WorkerLeaseState::*;
        let (stale, fresh) = (renewed("w-0", "uid-0", 100), renewed("w-1", "uid-1", 100));
        let mut acks = Acks::from_leases([&stale, &fresh]);
        let at = Instant::now();
        for lease in [&stale, &fresh] {
            acks.mark_expired(lease.name_any(), Renewal::of(lease).unwrap(), at);
        }
        let gone = Renewal::of(&renewed("w-2", "uid-2", 90)).unwrap();
        acks.mark_expired("w-2", gone, at);
        let acked = Some(3);
        assert_eq!(acks.state("w-0", "uid-0"), ExpiredUnconfirmed { acked });
        assert!(acks.has_expired());

        // w-1 renewed after the cache last saw it; w-2's Lease is gone.
        let live = [stale.clone(), renewed("w-1", "uid-1", 101)];
        let confirmed = acks.confirmed_by(&live);
        assert_eq!(confirmed.state("w-0", "uid-0"), ExpiredConfirmed { acked });
        assert_eq!(
            confirmed.state("w-1", "uid-1"),
            Live { acked },
            "renewed since"
        );
        assert_eq!(
            confirmed.state("w-2", "uid-2"),
            ExpiredConfirmed { acked },
            "not renewed"
        );
        assert_eq!(confirmed.state("w-0", "uid-9"), Unheld, "another instance");

        let mut written = confirmed.clone();
        written.written();
        assert_eq!(
            written.state("w-0", "uid-0"),
            ExpiredConfirmedBeforeWrite { acked },
            "still no member"
        );
        assert!(written.has_expired());
        assert!(!Acks::from_leases([&stale]).has_expired(), "never judged");
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
    fn an_acknowledgement_keeps_the_timing_of_its_holder_only() {
        let mut acks = Acks::new([(
            "w-0".to_owned(),
            Ack {
                holder: "uid-0".into(),
                version: 2,
            },
        )]);
        acks.mark_expired(
            "w-0",
            Renewal::of(&renewed("w-0", "uid-0", 100)).unwrap(),
            Instant::now(),
        );
        acks.insert(
            "w-0",
            Ack {
                holder: "uid-0".into(),
                version: 4,
            },
        );
        let expired = WorkerLeaseState::ExpiredUnconfirmed { acked: Some(4) };
        assert_eq!(acks.state("w-0", "uid-0"), expired);
        acks.insert(
            "w-0",
            Ack {
                holder: "uid-1".into(),
                version: 4,
            },
        );
        assert_eq!(
            acks.state("w-0", "uid-1"),
            WorkerLeaseState::Live { acked: Some(4) }
        );
    }
}
