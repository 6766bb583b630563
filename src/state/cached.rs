//! Worker pods, Leases and ConfigMaps as the watch caches keep them: the summaries' fields, with
//! the metadata in fields or a struct of their own instead of an `ObjectMeta`.
//!
//! An `ObjectMeta` is 360 bytes before any field is set (fifteen optional fields, five of them
//! maps or lists). The caches hold a pod per worker, and under `Acknowledge` a Lease and a
//! ConfigMap as well: 30,000 objects at 100 pools of 100 workers. The trims (see
//! `controller::trim`) leave each of them six of those fields at most. [`CachedMeta`] keeps
//! what a trimmed Lease or slice can still have, [`CachedPod`] what the planner reads of a pod;
//! the cache's key keeps name and namespace only (a reflector's key otherwise copies the
//! resourceVersion and uid of every object as well).
//!
//! A reconcile reads its pool's Leases and slices (selected by their pool label) back as
//! summaries (`From<&CachedLease>`, `From<&CachedSlice>`), so the planner sees what it always
//! saw. Pods are read as they are cached ([`CachedPod`]), never converted back: a reconcile
//! reads every pod of its namespace, which may hold many pools, and converting them all on
//! each reconcile cost more than it saved.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::reflector::Lookup;

use crate::state::lease_summary::LeaseSummary;
use crate::state::pod_summary::{PodSummary, ReadyCondition};
use crate::state::slice_summary::SliceSummary;

/// A summary with a smaller form for the watch caches.
pub trait Cacheable: Resource<DynamicType = ()> + Sized {
    /// What the cache keeps.
    type Cached: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static;

    /// The cached form of `self`, whose metadata the trims have already cut to the fields the
    /// cached form has (any other field is dropped).
    fn cached(&self) -> Self::Cached;
}

/// The metadata fields a trimmed Lease or slice can still have set, each as in `ObjectMeta`
/// (the trims drop their uid and owner references: see `controller::trim`).
#[derive(Clone, Debug, Default, PartialEq)]
#[allow(missing_docs)]
pub struct CachedMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub resource_version: Option<String>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
}

impl From<&ObjectMeta> for CachedMeta {
    fn from(meta: &ObjectMeta) -> Self {
        CachedMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            resource_version: meta.resource_version.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
        }
    }
}

impl From<&CachedMeta> for ObjectMeta {
    fn from(meta: &CachedMeta) -> Self {
        ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            resource_version: meta.resource_version.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
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
}

/// The summary again.
impl From<&CachedLease> for LeaseSummary {
    fn from(cached: &CachedLease) -> Self {
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
}

/// The summary again.
impl From<&CachedSlice> for SliceSummary {
    fn from(cached: &CachedSlice) -> Self {
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

/// A cached object labelled with its pool, as worker Leases and slices are.
pub trait Pooled {
    /// Its namespace.
    fn namespace(&self) -> Option<&str>;
    /// Its pool label.
    fn pool(&self) -> Option<&str>;
}

impl Pooled for CachedLease {
    fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }
    fn pool(&self) -> Option<&str> {
        self.pool.as_deref()
    }
}

impl Pooled for CachedSlice {
    fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }
    fn pool(&self) -> Option<&str> {
        self.pool.as_deref()
    }
}

/// A worker pod as the pod caches keep it and the planner reads it: a [`PodSummary`] without
/// an `ObjectMeta` (360 bytes before any field is set), of whose fields the planner reads
/// name, namespace, uid, creation, deletion and the controlling owner's uid. With 10,000
/// worker pods this is a large share of the operator's memory. Live lists are read the same
/// way, so a plan reads every pod alike.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    /// `metadata.name`.
    pub name: Box<str>,
    /// `metadata.namespace`.
    pub namespace: Box<str>,
    /// `metadata.uid`: which instance of the named pod this is.
    pub uid: Box<str>,
    /// The uid of the pod's controlling owner (a StatefulSet or a ReplicaSet).
    pub controller_uid: Option<Box<str>>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// The pod has a `metadata.deletionTimestamp`: it is terminating.
    pub terminating: bool,
    /// See [`PodSummary::ready`].
    pub ready: Option<ReadyCondition>,
    /// See [`PodSummary::node`].
    pub node: Option<Box<str>>,
    /// See [`PodSummary::started`].
    pub started: Option<Timestamp>,
    /// See [`PodSummary::ran`].
    pub ran: bool,
    /// See [`PodSummary::finished`].
    pub finished: bool,
}

impl Cacheable for PodSummary {
    type Cached = CachedPod;

    fn cached(&self) -> CachedPod {
        let meta = &self.metadata;
        let text = |field: &Option<String>| field.as_deref().unwrap_or_default().into();
        CachedPod {
            name: text(&meta.name),
            namespace: text(&meta.namespace),
            uid: text(&meta.uid),
            controller_uid: meta
                .owner_references
                .iter()
                .flatten()
                .find(|owner| owner.controller == Some(true))
                .map(|owner| owner.uid.as_str().into()),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            terminating: meta.deletion_timestamp.is_some(),
            ready: self.ready.clone(),
            node: self.node.as_deref().map(Into::into),
            started: self.started.as_ref().map(|t| t.0),
            ran: self.ran,
            finished: self.finished,
        }
    }
}

impl From<&Pod> for CachedPod {
    fn from(pod: &Pod) -> Self {
        PodSummary::from(pod).cached()
    }
}

/// Implements [`Lookup`] for a cached form: the summary's kind, and a key of name and
/// namespace (nothing reads a cache key's resourceVersion or uid, so they are not copied).
macro_rules! looked_up_as {
    ($cached:ty, $summary:ty, |$it:ident| ($name:expr, $namespace:expr)) => {
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
                let $it = self;
                $name.map(Cow::Borrowed)
            }
            fn namespace(&self) -> Option<Cow<'_, str>> {
                let $it = self;
                $namespace.map(Cow::Borrowed)
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

looked_up_as!(CachedLease, LeaseSummary, |it| (
    it.meta.name.as_deref(),
    it.meta.namespace.as_deref()
));
looked_up_as!(CachedSlice, SliceSummary, |it| (
    it.meta.name.as_deref(),
    it.meta.namespace.as_deref()
));
looked_up_as!(CachedPod, PodSummary, |it| (
    Some(&*it.name),
    Some(&*it.namespace)
));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::trim;
    use serde_json::json;

    fn round_trip<T>(trimmed: T)
    where
        T: Cacheable + PartialEq + std::fmt::Debug + for<'a> From<&'a T::Cached>,
    {
        assert_eq!(T::from(&trimmed.cached()), trimmed);
    }

    #[test]
    fn a_trimmed_lease_and_slice_read_back_as_they_were_cached() {
        let mut lease: LeaseSummary = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "l", "resourceVersion": "3",
                "deletionGracePeriodSeconds": 1,
                "labels": {swarm_protocol::names::POOL_LABEL: "web"},
                "annotations": {swarm_protocol::names::ACKED_VERSION_ANNOTATION: "4"}},
            "spec": {"holderIdentity": "u", "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 10},
        }))
        .unwrap();
        trim::lease(&mut lease);
        assert!(lease.acked.is_some() && lease.renew_time.is_some());
        round_trip(lease);

        let mut slice: SliceSummary = serde_json::from_value(json!({
            "metadata": {"name": "web-config.web-0", "namespace": "ns", "resourceVersion": "5",
                "labels": {swarm_protocol::names::POOL_LABEL: "web", swarm_protocol::names::WORKER_LABEL: "web-0"},
                "annotations": {swarm_protocol::names::FENCED_AT_ANNOTATION: "2"},
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
