//! A worker's Lease as the operator keeps it: its identity, its pool, its holder, its renewal
//! and the version it acknowledges, nothing else.
//!
//! Under `Acknowledge` there is a Lease per worker in the cache. A k8s-openapi `Lease` keeps
//! its pool label and its acknowledged version in two maps, and a map of one entry allocates a
//! node for eleven (about 640 bytes each), so the cache and the live reads deserialize Leases
//! straight into this summary instead, with the label and the annotation as plain fields.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::state::object_meta::{read_meta, without_managed_fields};
use crate::state::served_as::served_as;
use swarm_protocol::names::{ACKED_VERSION_ANNOTATION, POOL_LABEL};

/// A worker Lease: identity in `metadata` (without labels and annotations), and what the
/// operator reads of the rest.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "LeaseFields")]
pub struct LeaseSummary {
    /// The Lease's metadata, without its labels and annotations.
    pub metadata: ObjectMeta,
    /// Its pool label ([`POOL_LABEL`]).
    pub pool: Option<String>,
    /// Its acknowledged version annotation ([`ACKED_VERSION_ANNOTATION`]), as written.
    pub acked: Option<String>,
    /// `spec.holderIdentity`: the uid of the pod instance that holds it.
    pub holder: Option<String>,
    /// `spec.renewTime`, on the worker's clock.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
}

impl From<&Lease> for LeaseSummary {
    fn from(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        LeaseFields {
            metadata: read_meta(&lease.metadata),
            spec: spec.map(|s| SpecFields {
                holder_identity: s.holder_identity.clone(),
                renew_time: s.renew_time.clone(),
                lease_duration_seconds: s.lease_duration_seconds,
            }),
        }
        .into()
    }
}

// Served as Leases: the API is the Leases' API, only the Rust type is smaller.
served_as!(LeaseSummary, Lease);

/// What a Lease is read as: `metadata`, and of `spec` the holder, renewal and duration.
#[derive(Deserialize)]
struct LeaseFields {
    #[serde(default, deserialize_with = "without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SpecFields>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields {
    #[serde(default)]
    holder_identity: Option<String>,
    #[serde(default)]
    renew_time: Option<MicroTime>,
    #[serde(default)]
    lease_duration_seconds: Option<i32>,
}

impl From<LeaseFields> for LeaseSummary {
    fn from(lease: LeaseFields) -> Self {
        let mut metadata = lease.metadata;
        let pool = metadata
            .labels
            .take()
            .and_then(|mut labels| labels.remove(POOL_LABEL));
        let acked = metadata
            .annotations
            .take()
            .and_then(|mut annotations| annotations.remove(ACKED_VERSION_ANNOTATION));
        let spec = lease.spec;
        LeaseSummary {
            metadata,
            pool,
            acked,
            holder: spec.as_ref().and_then(|s| s.holder_identity.clone()),
            renew_time: spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref().map(|t| t.0)),
            duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lease_is_read_as_its_pool_holder_renewal_and_acknowledgement() {
        let json = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "web-0",
                "namespace": "ns",
                "uid": "lease-uid",
                "labels": {POOL_LABEL: "web", "team": "video"},
                "annotations": {ACKED_VERSION_ANNOTATION: "7", "note": "kept by the worker"},
                "managedFields": [{"manager": "worker", "operation": "Update"}],
            },
            "spec": {
                "holderIdentity": "pod-uid",
                "renewTime": "2026-11-26T10:00:00.000000Z",
                "leaseDurationSeconds": 10,
                "leaseTransitions": 3,
                "acquireTime": "2026-11-26T09:00:00.000000Z",
            },
        });
        let from_json: LeaseSummary = serde_json::from_value(json.clone()).unwrap();
        let lease: Lease = serde_json::from_value(json).unwrap();
        assert_eq!(from_json, LeaseSummary::from(&lease));

        assert_eq!(from_json.metadata.name.as_deref(), Some("web-0"));
        assert_eq!(from_json.pool.as_deref(), Some("web"));
        assert_eq!(from_json.acked.as_deref(), Some("7"));
        assert_eq!(from_json.holder.as_deref(), Some("pod-uid"));
        assert_eq!(
            from_json.renew_time,
            Some("2026-11-26T10:00:00Z".parse().unwrap())
        );
        assert_eq!(from_json.duration_seconds, Some(10));
        assert_eq!(from_json.metadata.labels, None, "the pool is a field");
        assert_eq!(
            from_json.metadata.annotations, None,
            "the version is a field"
        );
    }

    #[test]
    fn a_lease_without_a_spec_or_labels_holds_nothing() {
        let summary: LeaseSummary =
            serde_json::from_value(json!({"metadata": {"name": "web-0"}})).unwrap();
        assert_eq!(
            summary,
            LeaseSummary {
                metadata: ObjectMeta {
                    name: Some("web-0".into()),
                    ..ObjectMeta::default()
                },
                ..LeaseSummary::default()
            }
        );
    }
}
