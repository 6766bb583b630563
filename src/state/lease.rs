//! A worker's Lease as the operator reads it (`rollout.policy: Acknowledge`): named like the
//! worker's pod, held by the pod instance's uid, with the config version it runs in the
//! [`ACKED_VERSION_ANNOTATION`](swarm_protocol::names::ACKED_VERSION_ANNOTATION).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

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

/// A Lease judged expired: the renewal it was last seen with, and whether a live read still
/// showed that renewal.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expiry {
    renewal: Renewal,
    confirmed: Confirmed,
}

/// Whether a live read confirmed an expiry, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Confirmed {
    /// Only the cache judged it.
    No,
    /// By a read made before the last config write.
    BeforeLastWrite,
    /// By a read made after the last config write.
    SinceLastWrite,
}

/// The acknowledgements of a pool's workers, by pod name, and which of their Leases expired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acks {
    by_pod: BTreeMap<String, Ack>,
    /// Pod name -> the Leases not renewed for their duration plus the pool's grace, as this
    /// operator observed (see `controller::lease_clock`).
    expired: BTreeMap<String, Expiry>,
    /// When the next of the other Leases expires if it is not renewed.
    next_expiry: Option<Timestamp>,
}

impl Acks {
    /// The acknowledgements of these Leases; a Lease without a holder or a readable version
    /// acknowledges nothing.
    pub fn from_leases<'a>(leases: impl IntoIterator<Item = &'a LeaseSummary>) -> Self {
        Self::new(leases.into_iter().filter_map(|lease| {
            let ack = ack_of(lease)?;
            Some((lease.name_any(), ack))
        }))
    }

    /// Acknowledgements of `(pod name, ack)` pairs.
    pub fn new(acks: impl IntoIterator<Item = (String, Ack)>) -> Self {
        Self {
            by_pod: acks.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Records that the Lease of `pod`, last seen with `renewal`, expired.
    pub fn mark_expired(&mut self, pod: impl Into<String>, renewal: Renewal) {
        let expiry = Expiry {
            renewal,
            confirmed: Confirmed::No,
        };
        self.expired.insert(pod.into(), expiry);
    }

    /// Whether some Lease was judged expired.
    pub fn has_expired(&self) -> bool {
        !self.expired.is_empty()
    }

    /// These acknowledgements with their expiries checked against `live`, the pool's Leases as
    /// a live read returns them: a Lease renewed since it was judged expired (the cache lagged)
    /// is not expired; the others are confirmed. A Lease the read does not return was not
    /// renewed either (its worker would have created it).
    pub fn confirmed_by<'a>(&self, live: impl IntoIterator<Item = &'a LeaseSummary>) -> Acks {
        let live: BTreeMap<String, Option<Renewal>> = live
            .into_iter()
            .map(|lease| (lease.name_any(), Renewal::of(lease)))
            .collect();
        let mut confirmed = self.clone();
        confirmed.expired.retain(|pod, expiry| {
            let renewed = live
                .get(pod)
                .is_some_and(|now| now.as_ref() != Some(&expiry.renewal));
            expiry.confirmed = Confirmed::SinceLastWrite;
            !renewed
        });
        confirmed
    }

    /// Records that the config was written: the confirmations so far were read before it.
    pub fn written(&mut self) {
        for expiry in self.expired.values_mut() {
            if expiry.confirmed == Confirmed::SinceLastWrite {
                expiry.confirmed = Confirmed::BeforeLastWrite;
            }
        }
    }

    /// Records that a Lease expires at `at` unless renewed.
    pub fn note_expiry(&mut self, at: Timestamp) {
        self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
    }

    /// Whether the Lease of `pod` held by instance `uid` expired: that instance has fenced
    /// itself, so it runs no job and counts as gone.
    pub fn is_expired(&self, pod: &str, uid: &str) -> bool {
        !uid.is_empty()
            && self
                .expired
                .get(pod)
                .is_some_and(|e| e.renewal.holder == uid)
    }

    /// Whether the Lease of `pod` held by instance `uid` expired and a live read confirmed it
    /// ([`Acks::confirmed_by`]): a lagging cache can miss renewals, never invent them. Such a
    /// worker is not a member.
    pub fn is_expiry_confirmed(&self, pod: &str, uid: &str) -> bool {
        self.is_expired(pod, uid) && self.expired[pod].confirmed != Confirmed::No
    }

    /// Whether a live read made after the last config write confirmed the expiry: only then may
    /// the jobs that write revoked from that instance run elsewhere. Should the worker renew
    /// after the read, it reads the config again before it runs anything, and finds them
    /// revoked.
    pub fn is_expiry_confirmed_since_write(&self, pod: &str, uid: &str) -> bool {
        self.is_expired(pod, uid) && self.expired[pod].confirmed == Confirmed::SinceLastWrite
    }

    /// When the next Lease expires unless renewed, if any may.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.next_expiry
    }

    /// Records what the Lease of `pod` says now.
    pub fn insert(&mut self, pod: impl Into<String>, ack: Ack) {
        self.by_pod.insert(pod.into(), ack);
    }

    /// The version the instance `uid` of `pod` acknowledged, if its Lease is held by it: a
    /// Lease left by another instance of the same name says nothing about this one.
    pub fn version_of(&self, pod: &str, uid: &str) -> Option<u64> {
        self.by_pod
            .get(pod)
            .filter(|ack| !uid.is_empty() && ack.holder == uid)
            .map(|ack| ack.version)
    }

    /// Whether the instance `uid` of `pod` acknowledged `version` or a later one.
    pub fn covers(&self, pod: &str, uid: &str, version: u64) -> bool {
        self.version_of(pod, uid).is_some_and(|v| v >= version)
    }
}

/// The acknowledgement a Lease carries.
pub fn ack_of(lease: &LeaseSummary) -> Option<Ack> {
    let holder = lease.holder.clone()?;
    let version = lease.acked.as_deref()?.trim().parse().ok()?;
    Some(Ack { holder, version })
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
        let (stale, fresh) = (renewed("w-0", "uid-0", 100), renewed("w-1", "uid-1", 100));
        let mut acks = Acks::from_leases([&stale, &fresh]);
        for lease in [&stale, &fresh] {
            acks.mark_expired(lease.name_any(), Renewal::of(lease).unwrap());
        }
        acks.mark_expired("w-2", Renewal::of(&renewed("w-2", "uid-2", 90)).unwrap());
        assert!(acks.is_expired("w-0", "uid-0") && !acks.is_expiry_confirmed("w-0", "uid-0"));

        // w-1 renewed after the cache last saw it; w-2's Lease is gone.
        let live = [stale.clone(), renewed("w-1", "uid-1", 101)];
        let confirmed = acks.confirmed_by(&live);
        assert!(confirmed.is_expiry_confirmed("w-0", "uid-0"));
        assert!(!confirmed.is_expired("w-1", "uid-1"), "renewed since");
        assert!(confirmed.is_expiry_confirmed("w-2", "uid-2"), "not renewed");
        assert!(
            !confirmed.is_expiry_confirmed("w-0", "uid-9"),
            "another instance"
        );
        assert!(confirmed.is_expiry_confirmed_since_write("w-0", "uid-0"));

        let mut written = confirmed.clone();
        written.written();
        assert!(
            written.is_expiry_confirmed("w-0", "uid-0"),
            "still no member"
        );
        assert!(!written.is_expiry_confirmed_since_write("w-0", "uid-0"));
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
        assert_eq!(acks.version_of("w-0", "uid-0"), Some(7));
        assert!(acks.covers("w-0", "uid-0", 7));
        assert!(!acks.covers("w-0", "uid-0", 8));
        assert_eq!(
            acks.version_of("w-0", "uid-other"),
            None,
            "another instance's Lease"
        );
        assert_eq!(acks.version_of("w-0", ""), None, "an unresolved instance");
        for pod in ["w-1", "w-2", "w-3"] {
            assert_eq!(
                acks.version_of(pod, &format!("uid-{}", &pod[2..])),
                None,
                "{pod}"
            );
        }
    }
}
