//! Worker Leases and worker ConfigMaps as the watch caches keep them: the summaries' fields,
//! with the metadata in a struct of its own instead of an `ObjectMeta`.
//!
//! An `ObjectMeta` is 360 bytes before any field is set (fifteen optional fields, five of them
//! maps or lists). Under `Acknowledge` the caches hold a Lease and a ConfigMap per worker,
//! 20,000 objects at 100 pools of 100 workers, and the trims (see `controller::trim`) leave
//! each of them six of those fields at most. [`CachedMeta`] keeps what any summary can still
//! have; the cache's key keeps name and namespace only (a reflector's key otherwise copies the
//! resourceVersion and uid of every object as well).
//!
//! A reconcile reads its pool's Leases and slices (selected by their pool label) back as
//! summaries ([`Cacheable::from_cached`]), so the planner sees what it always saw. Pods stay
//! whole in their cache: a reconcile reads every pod of its namespace, which may hold many
//! pools, and converting them all on each reconcile cost more than it saved.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::reflector::Lookup;

use crate::state::lease_summary::LeaseSummary;
use crate::state::slice_summary::SliceSummary;

/// A summary with a smaller form for the watch caches.
pub trait Cacheable: Resource<DynamicType = ()> + Sized {
    /// What the cache keeps.
    type Cached: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static;

    /// The cached form of `self`, whose metadata the trims have already cut to [`CachedMeta`]'s
    /// fields (any other field is dropped).
    fn cached(&self) -> Self::Cached;

    /// The summary again.
    fn from_cached(cached: &Self::Cached) -> Self;
}

/// The metadata fields a trimmed summary can still have set, each as in `ObjectMeta`.
#[derive(Clone, Debug, Default, PartialEq)]
#[allow(missing_docs)]
pub struct CachedMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

impl From<&ObjectMeta> for CachedMeta {
    fn from(meta: &ObjectMeta) -> Self {
        CachedMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            owner_references: meta.owner_references.clone(),
        }
    }
}

impl From<&CachedMeta> for ObjectMeta {
    fn from(meta: &CachedMeta) -> Self {
        ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            owner_references: meta.owner_references.clone(),
            ..ObjectMeta::default()
        }
    }
}

/// A [`LeaseSummary`] in a cache.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedLease {
    /// Its metadata.
    pub meta: CachedMeta,
    /// Its pool label.
    pub pool: Option<String>,
    acked: Option<String>,
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    duration_seconds: Option<i32>,
}

impl Cacheable for LeaseSummary {
    type Cached = CachedLease;

    fn cached(&self) -> CachedLease {
        CachedLease {
            meta: CachedMeta::from(&self.metadata),
            pool: self.pool.clone(),
            acked: self.acked.clone(),
            holder: self.holder.clone(),
            renew_time: self.renew_time,
            duration_seconds: self.duration_seconds,
        }
    }

    fn from_cached(cached: &CachedLease) -> Self {
        LeaseSummary {
            metadata: ObjectMeta::from(&cached.meta),
            pool: cached.pool.clone(),
            acked: cached.acked.clone(),
            holder: cached.holder.clone(),
            renew_time: cached.renew_time,
            duration_seconds: cached.duration_seconds,
        }
    }
}

/// A [`SliceSummary`] in a cache. Its `config.yml` is shared, not copied, when it is read back.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedSlice {
    /// Its metadata.
    pub meta: CachedMeta,
    /// Its pool label.
    pub pool: Option<String>,
    controller_uid: Option<String>,
    worker: Option<String>,
    fenced_at: Option<u64>,
    config: Option<std::sync::Arc<str>>,
}

impl Cacheable for SliceSummary {
    type Cached = CachedSlice;

    fn cached(&self) -> CachedSlice {
        CachedSlice {
            meta: CachedMeta::from(&self.metadata),
            pool: self.pool.clone(),
            controller_uid: self.controller_uid.clone(),
            worker: self.worker.clone(),
            fenced_at: self.fenced_at,
            config: self.config.clone(),
        }
    }

    fn from_cached(cached: &CachedSlice) -> Self {
        SliceSummary {
            metadata: ObjectMeta::from(&cached.meta),
            controller_uid: cached.controller_uid.clone(),
            pool: cached.pool.clone(),
            worker: cached.worker.clone(),
            fenced_at: cached.fenced_at,
            config: cached.config.clone(),
        }
    }
}

/// Implements [`Lookup`] for a cached form: the summary's kind, and a key of name and
/// namespace (nothing reads a cache key's resourceVersion or uid, so they are not copied).
macro_rules! looked_up_as {
    ($cached:ty, $summary:ty) => {
        impl Lookup for $cached {
            type DynamicType = ();

            fn kind(dt: &()) -> Cow<'_, str> {
                <$summary as Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$summary as Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$summary as Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$summary as Resource>::plural(dt)
            }
            fn name(&self) -> Option<Cow<'_, str>> {
                self.meta.name.as_deref().map(Cow::Borrowed)
            }
            fn namespace(&self) -> Option<Cow<'_, str>> {
                self.meta.namespace.as_deref().map(Cow::Borrowed)
            }
            fn resource_version(&self) -> Option<Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<Cow<'_, str>> {
                None
            }
        }
    };
}

looked_up_as!(CachedLease, LeaseSummary);
looked_up_as!(CachedSlice, SliceSummary);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trim;
    use serde_json::json;

    fn round_trip<T: Cacheable + PartialEq + std::fmt::Debug>(trimmed: T) {
        assert_eq!(T::from_cached(&trimmed.cached()), trimmed);
    }

    #[test]
    fn a_trimmed_lease_and_slice_read_back_as_they_were_cached() {
        let mut lease: LeaseSummary = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "l", "resourceVersion": "3",
                "deletionGracePeriodSeconds": 1,
                "labels": {crate::names::POOL_LABEL: "web"},
                "annotations": {crate::names::ACKED_VERSION_ANNOTATION: "4"}},
            "spec": {"holderIdentity": "u", "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 10},
        }))
        .unwrap();
        trim::lease(&mut lease);
        assert!(lease.acked.is_some() && lease.renew_time.is_some());
        round_trip(lease);

        let mut slice: SliceSummary = serde_json::from_value(json!({
            "metadata": {"name": "web-config.web-0", "namespace": "ns", "resourceVersion": "5",
                "labels": {crate::names::POOL_LABEL: "web", crate::names::WORKER_LABEL: "web-0"},
                "annotations": {crate::names::FENCED_AT_ANNOTATION: "2"},
                "ownerReferences": [{"apiVersion": "swarm.io/v1alpha1", "kind": "SwarmPool",
                    "name": "web", "uid": "p", "controller": true}]},
            "data": {"config.yml": "version: 7\n"},
        }))
        .unwrap();
        trim::slice(&mut slice);
        assert!(slice.fenced_at.is_some() && slice.controller_uid.is_some());
        round_trip(slice);
    }

    #[test]
    fn a_cache_key_is_the_name_and_namespace() {
        let lease = LeaseSummary {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                resource_version: Some("9".into()),
                ..ObjectMeta::default()
            },
            ..LeaseSummary::default()
        };
        let key = lease.cached().to_object_ref(());
        assert_eq!(
            key,
            kube::runtime::reflector::ObjectRef::new("web-0").within("ns")
        );
        assert_eq!((key.extra.resource_version, key.extra.uid), (None, None));
    }
}
