//! What the controller remembers of each pool between reconciles, beside the caches: its own
//! last writes (so a lagging cache is not taken for someone else's change), the pod deletions
//! it requested (until the cache shows them), and consecutive failures (for the backoff).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use tokio::sync::Semaphore;

use super::revoke_clock::RevokeClock;
use super::workloads::Workloads;
use crate::Error;
use crate::api::crd::{SwarmPool, SwarmPoolStatus};
use crate::runtime::cache_health::CacheHealth;
use crate::runtime::leader::LeaseGuard;
use crate::runtime::metrics::Metrics;
use crate::state::cached::{CachedLease, CachedPod, CachedSlice, Pooled};
use crate::state::lease::Acks;
use crate::state::lease_summary::LeaseSummary;
use crate::state::node_leases::NodeLeases;

/// How long a requested pod deletion is remembered in case the cache has not seen it yet.
const DELETING_MEMORY: Duration = Duration::from_secs(600);

/// State shared by all reconciles.
pub struct Context {
    pub(super) client: Client,
    pub(super) reporter: Reporter,
    pub(super) pools: Store<SwarmPool>,
    /// The workloads of every kind and their pods.
    pub(super) workloads: Workloads,
    /// The pools' ConfigMaps.
    pub(super) config_maps: Store<ConfigMap>,
    /// The workers' own ConfigMaps (labels `swarm.io/pool` and `swarm.io/worker`).
    pub(super) worker_config_maps: Store<CachedSlice>,
    /// The ConfigMaps pools read jobs from (label `swarm.io/jobs-source`).
    pub(super) jobs_sources: Store<ConfigMap>,
    /// The workers' Leases (label `swarm.io/pool`).
    pub(super) leases: Store<CachedLease>,
    /// The kubelets' node Leases, if this operator may read them.
    pub(super) node_leases: Option<Store<CachedLease>>,
    /// Since when each worker's ConfigMap has shown each version: where revoke waits start.
    pub(super) revokes: RevokeClock,
    /// Whether each cache has completed its initial list and follows the cluster: reconciles
    /// wait for the first list, so an empty cache right after start is never taken for "no
    /// StatefulSet, no pods", and decide nothing while a watch fails.
    pub(super) health: CacheHealth,
    pub(super) metrics: Metrics,
    /// Consecutive failures per pool, for the backoff.
    pub(super) failures: Mutex<HashMap<ObjectRef<SwarmPool>, u32>>,
    /// Pod deletions requested, per pool, by uid, until the cache shows them (see
    /// [`Context::deleting`]).
    pub(super) deleting: Mutex<HashMap<ObjectRef<SwarmPool>, BTreeMap<String, RequestedDelete>>>,
    /// This operator's last writes, per pool (shared with the pool watch, which leaves out
    /// this operator's own status writes coming back).
    pub(super) written: Written,
    /// Checked before every write: a leader that may have lost its lease writes nothing.
    pub(super) lease: LeaseGuard,
    /// The turns of reconciles (`--max-concurrent-reconciles` of them).
    pub(super) turns: super::turns::Turns,
    /// The workers' ConfigMap writes in flight, over all reconciles
    /// ([`super::kube_cluster::SLICE_WRITES_IN_FLIGHT`]).
    pub(super) slice_writes: Semaphore,
}

impl Context {
    /// `Ok` while this replica may write.
    pub(super) fn may_write(&self) -> Result<(), Error> {
        if self.lease.is_valid() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }
}

/// The objects of `pool` in `namespace` in a cache of worker Leases or slices, read back as
/// summaries for the planner.
pub(super) fn pool_objects<C, S>(cache: &Store<C>, namespace: &str, pool: &str) -> Vec<S>
where
    C: Pooled + reflector::Lookup + Clone,
    C::DynamicType: Eq + Hash + Clone,
    S: for<'a> From<&'a C>,
{
    cache
        .state_filter(|object| {
            Pooled::namespace(object) == Some(namespace) && object.pool() == Some(pool)
        })
        .iter()
        .map(|object| S::from(object))
        .collect()
}

/// A pod deletion this operator requested (keyed by the pod's uid).
pub(super) struct RequestedDelete {
    name: String,
    at: Instant,
}

/// Whether the cached pod of a requested deletion's name shows that deletion took effect: the
/// instance terminating, or replaced by another. A pod the cache does not hold proves nothing
/// (the request may have been decided on a live list the cache has not caught up with).
fn deletion_observed(uid: &str, cached: Option<&CachedPod>) -> bool {
    cached.is_some_and(|pod| &*pod.uid != uid || pod.terminating)
}

/// This operator's last writes, per pool.
pub(super) type Written = Arc<Mutex<HashMap<ObjectRef<SwarmPool>, LastWrites>>>;

/// What this operator last wrote for one pool, to tell its own writes from a cache that has
/// not caught up with them.
#[derive(Default)]
pub(super) struct LastWrites {
    /// The resourceVersion the API server gave the ConfigMap write.
    pub(super) config_map: Option<String>,
    pub(super) status: Option<StatusWrite>,
}

/// A status this operator wrote, and the resourceVersion of the pool it was decided on.
pub(super) struct StatusWrite {
    pub(super) based_on: Option<String>,
    pub(super) status: SwarmPoolStatus,
}

/// The status this operator last wrote for `pool`, while the cache still holds the very version
/// that write was based on (the watch has not delivered the write yet): it, not the cached
/// status, is the pool's status now.
fn own_status<'a>(pool: &SwarmPool, last: Option<&'a StatusWrite>) -> Option<&'a SwarmPoolStatus> {
    last.filter(|last| last.based_on.is_some() && last.based_on == pool.metadata.resource_version)
        .map(|last| &last.status)
}

/// Whether `desired` is already the pool's status. The cached pool may predate this operator's
/// own last write (a reconcile can run before the watch delivers it): while the cache still
/// holds the very version that write was based on, the write stands for the status. A newer
/// version in the cache, whoever wrote it, is compared as it is.
fn status_is_reported(
    pool: &SwarmPool,
    desired: &SwarmPoolStatus,
    last: Option<&StatusWrite>,
) -> bool {
    own_status(pool, last).or(pool.status.as_ref()) == Some(desired)
}

impl Context {
    /// When each node's kubelet last renewed its Lease.
    pub(super) fn node_leases(&self) -> NodeLeases {
        let Some(store) = &self.node_leases else {
            return NodeLeases::default();
        };
        NodeLeases::new(store.state().iter().filter_map(|cached| {
            let lease = LeaseSummary::from(cached.as_ref());
            Some((lease.metadata.name?, lease.renew_time?))
        }))
    }

    /// What the pool's worker Leases acknowledge, and the permit each declares.
    pub(super) fn acks(&self, namespace: &str, pool: &str) -> Acks {
        let leases: Vec<LeaseSummary> = pool_objects(&self.leases, namespace, pool);
        Acks::from_leases(&leases)
    }

    /// The uids of `pool`'s pods whose deletion was requested and the pod cache has not shown
    /// yet. A request is forgotten once the cache shows it took effect, so a rollout of
    /// thousands of pods leaves nothing behind; else after [`DELETING_MEMORY`].
    pub(super) fn deleting(&self, pool: &ObjectRef<SwarmPool>) -> BTreeSet<String> {
        let mut all = self.deleting.lock().expect("deleting lock poisoned");
        all.retain(|_, requested| {
            requested.retain(|_, r| r.at.elapsed() < DELETING_MEMORY);
            !requested.is_empty()
        });
        let Some(requested) = all.get_mut(pool) else {
            return BTreeSet::new();
        };
        let namespace = pool.namespace.as_deref().unwrap_or_default();
        requested.retain(|uid, r| {
            let cached = self
                .workloads
                .pod(&ObjectRef::new(&r.name).within(namespace));
            !deletion_observed(uid, cached.as_deref())
        });
        let uids = requested.keys().cloned().collect();
        if requested.is_empty() {
            all.remove(pool);
        }
        uids
    }

    pub(super) fn remember_deleting(&self, pool: &ObjectRef<SwarmPool>, name: &str, uid: &str) {
        self.deleting
            .lock()
            .expect("deleting lock poisoned")
            .entry(pool.clone())
            .or_default()
            .insert(
                uid.to_owned(),
                RequestedDelete {
                    name: name.to_owned(),
                    at: Instant::now(),
                },
            );
    }

    /// The cached copy of the pool's ConfigMap `name` when it is this operator's last write (or
    /// there was none); `None` when it must be read from the API server. A ConfigMap the cache
    /// does not hold is read too: one without the pool label (a user's, or one to adopt) is
    /// never in the cache, and must be seen before anything is created over it.
    pub(super) fn current_cached_config_map(
        &self,
        pool: &ObjectRef<SwarmPool>,
        name: &str,
    ) -> Option<ConfigMap> {
        let namespace = pool.namespace.as_deref().unwrap_or_default();
        let cached = self
            .config_maps
            .get(&ObjectRef::new(name).within(namespace))?;
        let written = self
            .written
            .lock()
            .expect("written lock poisoned")
            .get(pool)
            .and_then(|last| last.config_map.clone());
        let current = written
            .is_none_or(|version| cached.metadata.resource_version.as_ref() == Some(&version));
        current.then(|| cached.as_ref().clone())
    }

    /// Remembers the version of a ConfigMap this operator wrote for `pool`; forgets pools that
    /// are gone, so the map stays as large as the set of pools.
    pub(super) fn remember_written(&self, pool: &ObjectRef<SwarmPool>, cm: &ConfigMap) {
        self.last_writes(pool, |last| {
            last.config_map = cm.metadata.resource_version.clone();
        });
    }

    /// Whether `desired` needs no write for `pool` (see [`status_is_reported`]). Once the cache
    /// holds a newer pool than the last write was based on, that write is forgotten: it no
    /// longer tells anything the cached status does not.
    pub(super) fn status_is_reported(&self, pool: &SwarmPool, desired: &SwarmPoolStatus) -> bool {
        let mut written = self.written.lock().expect("written lock poisoned");
        let Some(last) = written.get_mut(&ObjectRef::from_obj(pool)) else {
            return status_is_reported(pool, desired, None);
        };
        if last
            .status
            .as_ref()
            .is_some_and(|s| s.based_on != pool.metadata.resource_version)
        {
            last.status = None;
        }
        status_is_reported(pool, desired, last.status.as_ref())
    }

    /// `pool` with the status this operator last wrote for it when the cache has not caught up
    /// with that write, so that a reconcile compares what it decides with what it reported
    /// (a worker reported unavailable is not reported again, nor its event published twice).
    pub(super) fn with_own_status(&self, pool: Arc<SwarmPool>) -> Arc<SwarmPool> {
        let written = self.written.lock().expect("written lock poisoned");
        let last = written
            .get(&ObjectRef::from_obj(pool.as_ref()))
            .and_then(|last| last.status.as_ref());
        match own_status(&pool, last) {
            Some(status) if pool.status.as_ref() != Some(status) => {
                let mut own = pool.as_ref().clone();
                own.status = Some(status.clone());
                Arc::new(own)
            }
            _ => pool,
        }
    }

    /// Remembers a status written for `pool`, decided on the pool as the cache held it.
    pub(super) fn remember_status(&self, pool: &SwarmPool, status: &SwarmPoolStatus) {
        self.last_writes(&ObjectRef::from_obj(pool), |last| {
            last.status = Some(StatusWrite {
                based_on: pool.metadata.resource_version.clone(),
                status: status.clone(),
            });
        });
    }

    /// Updates one pool's record of last writes; forgets pools that are gone, so the map stays
    /// as large as the set of pools.
    fn last_writes(&self, pool: &ObjectRef<SwarmPool>, update: impl FnOnce(&mut LastWrites)) {
        let mut written = self.written.lock().expect("written lock poisoned");
        written.retain(|key, _| self.pools.get(key).is_some());
        update(written.entry(pool.clone()).or_default());
    }

    pub(super) fn record_failure(&self, pool: &ObjectRef<SwarmPool>) -> u32 {
        let mut failures = self.failures.lock().expect("failures lock poisoned");
        let n = failures.entry(pool.clone()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    pub(super) fn record_success(&self, pool: &ObjectRef<SwarmPool>) {
        self.failures
            .lock()
            .expect("failures lock poisoned")
            .remove(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::triggers::tests::pool;

    #[test]
    fn a_status_just_written_is_not_written_again_from_a_lagging_cache() {
        let status = |sts: &str| SwarmPoolStatus {
            stateful_set: Some(sts.into()),
            ..SwarmPoolStatus::default()
        };
        let mut cached = pool("p", "a", Some("old")).as_ref().clone();
        cached.metadata.resource_version = Some("7".into());
        let wrote = |based_on: &str, sts: &str| StatusWrite {
            based_on: Some(based_on.into()),
            status: status(sts),
        };

        assert_eq!(own_status(&cached, None), None);
        assert_eq!(
            own_status(&cached, Some(&wrote("7", "new"))),
            Some(&status("new")),
            "the write stands for the status until the cache catches up"
        );
        assert_eq!(own_status(&cached, Some(&wrote("6", "new"))), None);

        assert!(status_is_reported(&cached, &status("old"), None));
        assert!(!status_is_reported(&cached, &status("new"), None));
        // The cache still holds the version the write was decided on.
        assert!(status_is_reported(
            &cached,
            &status("new"),
            Some(&wrote("7", "new"))
        ));
        // Something else is wanted now than was written.
        assert!(!status_is_reported(
            &cached,
            &status("newer"),
            Some(&wrote("7", "new"))
        ));
        // The cache moved on (someone else wrote the status): it is the truth again.
        assert!(!status_is_reported(
            &cached,
            &status("new"),
            Some(&wrote("6", "new"))
        ));
        // A pool without a resourceVersion proves nothing.
        cached.metadata.resource_version = None;
        let unversioned = StatusWrite {
            based_on: None,
            status: status("new"),
        };
        assert!(!status_is_reported(
            &cached,
            &status("new"),
            Some(&unversioned)
        ));
    }

    #[test]
    fn a_requested_deletion_is_forgotten_once_the_cache_shows_it() {
        let pod = |uid: &str, terminating: bool| CachedPod {
            name: "web-0".into(),
            uid: uid.into(),
            terminating,
            ..CachedPod::default()
        };
        assert!(
            !deletion_observed("u1", None),
            "not in the cache: proves nothing"
        );
        assert!(
            !deletion_observed("u1", Some(&pod("u1", false))),
            "still running"
        );
        assert!(
            deletion_observed("u1", Some(&pod("u1", true))),
            "terminating"
        );
        assert!(deletion_observed("u1", Some(&pod("u2", false))), "replaced");
    }
}
