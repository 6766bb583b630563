//! The worker's Lease: proof of life for its pod instance and the version it acknowledges.
//!
//! [`renewed`] builds the Lease a worker writes from the one it read; the operator reads the
//! acknowledgement back with [`acked_version`]. Name, holder, owner reference, label and
//! annotation are as `docs/worker-protocol.md` describes them.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use crate::names::{ACKED_VERSION_ANNOTATION, POOL_LABEL};

/// The pod instance a Lease belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Pod name, also the Lease's name.
    pub pod: String,
    /// Namespace of the pod and the Lease.
    pub namespace: String,
    /// Pod uid: the holder identity.
    pub uid: String,
    /// The SwarmPool.
    pub pool: String,
}

/// The Lease to write for `holder` at `now`, acknowledging `acked`, given the Lease read from
/// the API (`None` when there is none).
///
/// A Lease held by another uid was left by a previous pod of the same name: it is taken over,
/// with a new acquire time, this pod as owner instead of that one, and no acknowledgement but
/// this instance's own. Labels, annotations and owners that are not the protocol's are kept.
pub fn renewed(
    current: Option<&Lease>,
    holder: &Holder,
    acked: Option<u64>,
    duration: Duration,
    now: Timestamp,
) -> Lease {
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(holder.pod.clone()),
            namespace: Some(holder.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let mut spec = lease.spec.take().unwrap_or_default();
    let ours = spec.holder_identity.as_deref() == Some(holder.uid.as_str());
    if !ours {
        if spec.holder_identity.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(holder.uid.clone());
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.acquire_time.get_or_insert(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds =
        Some(i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX));
    lease.spec = Some(spec);

    let metadata = &mut lease.metadata;
    metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POOL_LABEL.into(), holder.pool.clone());
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    // The annotation speaks for this process only: a version acknowledged by a previous pod
    // instance (or a previous run of this container) says nothing about what runs now.
    match acked {
        Some(version) => {
            annotations.insert(ACKED_VERSION_ANNOTATION.into(), version.to_string());
        }
        None => {
            annotations.remove(ACKED_VERSION_ANNOTATION);
        }
    }
    let owners = metadata.owner_references.get_or_insert_with(Vec::new);
    owners.retain(|owner| !(owner.kind == "Pod" && owner.uid != holder.uid));
    if !owners.iter().any(|owner| owner.uid == holder.uid) {
        owners.push(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: holder.pod.clone(),
            uid: holder.uid.clone(),
            ..OwnerReference::default()
        });
    }
    lease
}

/// The acknowledged version of a Lease, if it has a readable one.
pub fn acked_version(lease: &Lease) -> Option<u64> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(ACKED_VERSION_ANNOTATION)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    use super::*;

    fn holder() -> Holder {
        Holder {
            pod: "w-0".into(),
            namespace: "ns".into(),
            uid: "uid-new".into(),
            pool: "pool".into(),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn spec(lease: &Lease) -> &LeaseSpec {
        lease.spec.as_ref().unwrap()
    }

    #[test]
    fn a_new_lease_names_the_pod_as_holder_and_owner() {
        let now = at("2026-01-01T00:00:00Z");
        let lease = renewed(None, &holder(), None, Duration::from_secs(10), now);
        assert_eq!(lease.metadata.name.as_deref(), Some("w-0"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(spec(&lease).holder_identity.as_deref(), Some("uid-new"));
        assert_eq!(spec(&lease).lease_duration_seconds, Some(10));
        assert_eq!(spec(&lease).acquire_time, Some(MicroTime(now)));
        assert_eq!(spec(&lease).renew_time, Some(MicroTime(now)));
        assert_eq!(spec(&lease).lease_transitions, None);
        assert_eq!(
            lease.metadata.labels.as_ref().unwrap()[POOL_LABEL],
            "pool".to_string()
        );
        assert_eq!(acked_version(&lease), None, "nothing acknowledged yet");
        let owners = lease.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].api_version.as_str(), owners[0].kind.as_str()),
            ("v1", "Pod")
        );
        assert_eq!(
            (owners[0].name.as_str(), owners[0].uid.as_str()),
            ("w-0", "uid-new")
        );
    }

    #[test]
    fn a_renewal_moves_renew_time_and_the_acknowledgement_only() {
        let first = renewed(
            None,
            &holder(),
            Some(3),
            Duration::from_secs(10),
            at("2026-01-01T00:00:00Z"),
        );
        let later = at("2026-01-01T00:00:02.5Z");
        let second = renewed(
            Some(&first),
            &holder(),
            Some(4),
            Duration::from_secs(10),
            later,
        );
        assert_eq!(spec(&second).acquire_time, spec(&first).acquire_time);
        assert_eq!(spec(&second).renew_time, Some(MicroTime(later)));
        assert_eq!(spec(&second).lease_transitions, None);
        assert_eq!(acked_version(&second), Some(4));
        assert_eq!(second.metadata.owner_references.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_lease_left_by_a_previous_pod_instance_is_taken_over_without_its_acknowledgement() {
        let previous = Holder {
            uid: "uid-old".into(),
            ..holder()
        };
        let mut left = renewed(
            None,
            &previous,
            Some(9),
            Duration::from_secs(30),
            at("2026-01-01T00:00:00Z"),
        );
        left.metadata.resource_version = Some("42".into());
        left.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("other/annotation".into(), "kept".into());
        let now = at("2026-01-01T00:05:00Z");
        let taken = renewed(Some(&left), &holder(), None, Duration::from_secs(10), now);
        assert_eq!(spec(&taken).holder_identity.as_deref(), Some("uid-new"));
        assert_eq!(spec(&taken).acquire_time, Some(MicroTime(now)));
        assert_eq!(spec(&taken).lease_transitions, Some(1));
        assert_eq!(spec(&taken).lease_duration_seconds, Some(10));
        assert_eq!(
            acked_version(&taken),
            None,
            "the old instance's 9 is not ours"
        );
        assert_eq!(
            taken.metadata.annotations.as_ref().unwrap()["other/annotation"],
            "kept"
        );
        let owners = taken.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1, "the old pod is no owner any more");
        assert_eq!(owners[0].uid, "uid-new");
        assert_eq!(
            taken.metadata.resource_version.as_deref(),
            Some("42"),
            "the write is a read-modify-write"
        );
        let acked = renewed(
            Some(&taken),
            &holder(),
            Some(11),
            Duration::from_secs(10),
            now,
        );
        assert_eq!(acked_version(&acked), Some(11));
        assert_eq!(spec(&acked).lease_transitions, Some(1));
    }

    #[test]
    fn owners_that_are_not_pods_are_kept() {
        let mut left = renewed(
            None,
            &holder(),
            None,
            Duration::from_secs(10),
            at("2026-01-01T00:00:00Z"),
        );
        left.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(OwnerReference {
                api_version: "swarm.io/v1".into(),
                kind: "SwarmPool".into(),
                name: "pool".into(),
                uid: "pool-uid".into(),
                ..OwnerReference::default()
            });
        let again = renewed(
            Some(&left),
            &holder(),
            None,
            Duration::from_secs(10),
            at("2026-01-01T00:00:01Z"),
        );
        assert_eq!(again.metadata.owner_references.as_ref().unwrap().len(), 2);
    }
}
