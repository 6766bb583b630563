//! A worker's Lease as the operator reads it (`rollout.policy: Acknowledge`): named like the
//! worker's pod, held by the pod instance's uid, with the config version it runs in the
//! [`ACKED_VERSION_ANNOTATION`].

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::names::ACKED_VERSION_ANNOTATION;

/// What one worker's Lease says: the pod instance that wrote it, and the version it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// `spec.holderIdentity`: the uid of the pod instance.
    pub holder: String,
    /// The config version whose entry that instance runs exactly.
    pub version: u64,
}

/// The acknowledgements of a pool's workers, by pod name, and which of their Leases expired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acks {
    by_pod: BTreeMap<String, Ack>,
    /// Pod name -> the holder of its Lease, for the Leases not renewed for their duration plus
    /// the pool's grace, as this operator observed (see `controller::lease_clock`).
    expired: BTreeMap<String, String>,
    /// When the next of the other Leases expires if it is not renewed.
    next_expiry: Option<Timestamp>,
}

impl Acks {
    /// The acknowledgements of these Leases; a Lease without a holder or a readable version
    /// acknowledges nothing.
    pub fn from_leases<'a>(leases: impl IntoIterator<Item = &'a Lease>) -> Self {
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

    /// Records that the Lease of `pod`, held by instance `holder`, expired.
    pub fn mark_expired(&mut self, pod: impl Into<String>, holder: impl Into<String>) {
        self.expired.insert(pod.into(), holder.into());
    }

    /// Records that a Lease expires at `at` unless renewed.
    pub fn note_expiry(&mut self, at: Timestamp) {
        self.next_expiry = Some(self.next_expiry.map_or(at, |next| next.min(at)));
    }

    /// Whether the Lease of `pod` held by instance `uid` expired: that instance has fenced
    /// itself, so it runs no job and counts as gone.
    pub fn is_expired(&self, pod: &str, uid: &str) -> bool {
        !uid.is_empty() && self.expired.get(pod).is_some_and(|holder| holder == uid)
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
pub fn ack_of(lease: &Lease) -> Option<Ack> {
    let holder = lease.spec.as_ref()?.holder_identity.clone()?;
    let version = lease
        .annotations()
        .get(ACKED_VERSION_ANNOTATION)?
        .trim()
        .parse()
        .ok()?;
    Some(Ack { holder, version })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(name: &str, holder: Option<&str>, version: Option<&str>) -> Lease {
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
