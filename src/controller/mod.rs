//! The controller: watches, caches, the reconcile loop and its error policy.
//!
//! Triggers: SwarmPools; ConfigMaps they own, and those they read jobs from
//! ([`jobs_sources`]); StatefulSets, Deployments, ReplicaSets and Pods
//! mapped to the pools that select them (a pod through its controlling StatefulSet, or through
//! its ReplicaSet's Deployment). Everything is read from reflector
//! caches that feed the same streams that trigger reconciles, so a reconcile never runs on a
//! cache older than its trigger, and an idle operator sends no requests. The caches keep only
//! what the planner reads ([`crate::trim`]).
//!
//! The ConfigMap holds the config version and the rollout bookkeeping, so a decision must not
//! be taken on a copy older than this operator's own last write: the cached copy is used when
//! it is that write (or there was none), and read with a GET otherwise. Every write is fenced
//! by the copy it was decided on, so a decision on a stale copy fails with a conflict, and the
//! reconcile reads the ConfigMap again and decides anew.

pub mod cache_health;
pub mod changes;
pub mod fenced_write;
pub mod jobs_sources;
mod kube_cluster;
pub mod lease_clock;
pub mod relisting_watch;
pub mod trim;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::Semaphore;
use tracing::{debug, info, instrument, warn};

use crate::Error;
use crate::cache_health::{Cache, CacheHealth, Cause, STALE_AFTER, StaleCache};
use crate::conditions;
use crate::crd::{Phase, SwarmPool, SwarmPoolStatus, WorkloadKind};
use crate::drive::{Driven, Journal, drive};
use crate::http::HttpState;
use crate::leader::LeaseGuard;
use crate::metrics::Metrics;
use crate::names::{JOBS_SOURCE_LABEL, WORKER_LABEL};
use crate::planner::{self, POOL_LABEL, PlannedEvent};
use crate::pod_summary::PodSummary;
use crate::pool_metrics::PoolCounter;
use crate::state::cached::{Cacheable, CachedLease, CachedPod, CachedSlice, Pooled};
use crate::state::jobs_source::{self, Found};
use crate::state::lease::Acks;
use crate::state::lease_summary::LeaseSummary;
use crate::state::slice_summary::SliceSummary;
use jobs_sources::Source;
use kube_cluster::{KubeCluster, Snapshot};
use lease_clock::{ClockReading, LeaseClock};
use relisting_watch::relisting_watcher;

pub use crate::names::{DEPLOYMENT_POD_LABEL, MANAGER as FIELD_MANAGER, STATEFULSET_POD_LABEL};
/// How long a requested pod deletion is remembered in case the cache has not seen it yet.
const DELETING_MEMORY: Duration = Duration::from_secs(600);
/// First and last retry delay of the per-pool backoff for transient errors. The cap is short:
/// a pool whose reconciles failed while the API server was away must not wait minutes once it
/// is back (the watches' relists also trigger it at once).
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How often a pool is reconsidered while a cache is stale, to report it and to resume.
const STALE_RECHECK: Duration = Duration::from_secs(5);

/// State shared by all reconciles.
pub struct Context {
    client: Client,
    reporter: Reporter,
    pools: Store<SwarmPool>,
    statefulsets: Store<StatefulSet>,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: PodCaches,
    /// The pools' ConfigMaps.
    config_maps: Store<ConfigMap>,
    /// The workers' own ConfigMaps (labels `swarm.io/pool` and `swarm.io/worker`).
    worker_config_maps: Store<CachedSlice>,
    /// The ConfigMaps pools read jobs from (label `swarm.io/jobs-source`).
    jobs_sources: Store<ConfigMap>,
    /// The workers' Leases (label `swarm.io/pool`).
    leases: Store<CachedLease>,
    /// When each worker Lease was last seen renewed, for expiry.
    lease_clock: Arc<LeaseClock>,
    /// Whether each cache has completed its initial list and follows the cluster: reconciles
    /// wait for the first list, so an empty cache right after start is never taken for "no
    /// StatefulSet, no pods", and decide nothing while a watch fails.
    health: CacheHealth,
    metrics: Metrics,
    /// Consecutive failures per pool, for the backoff.
    failures: Mutex<HashMap<ObjectRef<SwarmPool>, u32>>,
    /// Pod deletions requested, per pool, by uid, until the cache shows them (see
    /// [`Context::deleting`]).
    deleting: Mutex<HashMap<ObjectRef<SwarmPool>, BTreeMap<String, RequestedDelete>>>,
    /// This operator's last writes, per pool (shared with the pool watch, which leaves out
    /// this operator's own status writes coming back).
    written: Written,
    /// Checked before every write: a leader that may have lost its lease writes nothing.
    lease: LeaseGuard,
    /// The turns of reconciles (`--max-concurrent-reconciles` of them), handed out in the
    /// order asked (see [`reconcile`]).
    turns: Semaphore,
    /// The workers' ConfigMap writes in flight, over all reconciles
    /// ([`kube_cluster::SLICE_WRITES_IN_FLIGHT`]).
    slice_writes: Semaphore,
}

impl Context {
    /// `Ok` while this replica may write.
    fn may_write(&self) -> Result<(), Error> {
        if self.lease.is_valid() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }
}

/// The objects of `pool` in `namespace` in a cache of worker Leases or slices, read back as
/// summaries for the planner.
fn pool_objects<C, S>(cache: &Store<C>, namespace: &str, pool: &str) -> Vec<S>
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

/// The two pod caches: a StatefulSet's pods and a Deployment's carry different labels, and a
/// watch selects by one label selector.
#[derive(Clone)]
struct PodCaches {
    statefulset: Store<CachedPod>,
    deployment: Store<CachedPod>,
}

impl PodCaches {
    fn get(&self, key: &ObjectRef<CachedPod>) -> Option<Arc<CachedPod>> {
        self.statefulset
            .get(key)
            .or_else(|| self.deployment.get(key))
    }

    /// The cached pods of `namespace`, from both caches, as the planner reads them.
    fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedPod>> {
        let here = |pod: &CachedPod| &*pod.namespace == namespace;
        let mut pods = self.statefulset.state_filter(here);
        pods.extend(self.deployment.state_filter(here));
        pods
    }
}

/// A pod deletion this operator requested (keyed by the pod's uid).
struct RequestedDelete {
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
type Written = Arc<Mutex<HashMap<ObjectRef<SwarmPool>, LastWrites>>>;

/// What this operator last wrote for one pool, to tell its own writes from a cache that has
/// not caught up with them.
#[derive(Default)]
struct LastWrites {
    /// The resourceVersion the API server gave the ConfigMap write.
    config_map: Option<String>,
    status: Option<StatusWrite>,
}

/// A status this operator wrote, and the resourceVersion of the pool it was decided on.
struct StatusWrite {
    based_on: Option<String>,
    status: SwarmPoolStatus,
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
    if pool.status.as_ref() == Some(desired) {
        return true;
    }
    last.is_some_and(|last| {
        last.based_on.is_some()
            && last.based_on == pool.metadata.resource_version
            && last.status == *desired
    })
}

impl Context {
    /// What the pool's worker Leases acknowledge, and which expired (`grace` past their
    /// duration without a renewal, on this operator's clock).
    fn acks(&self, namespace: &str, pool: &str, grace: Duration) -> Acks {
        let leases: Vec<LeaseSummary> = pool_objects(&self.leases, namespace, pool);
        let mut acks = Acks::from_leases(&leases);
        let now = ClockReading {
            monotonic: Instant::now(),
            wall: Timestamp::now(),
        };
        self.lease_clock
            .judge(namespace, pool, &leases, grace, now, &mut acks);
        acks
    }

    /// The uids of `pool`'s pods whose deletion was requested and the pod cache has not shown
    /// yet. A request is forgotten once the cache shows it took effect, so a rollout of
    /// thousands of pods leaves nothing behind; else after [`DELETING_MEMORY`].
    fn deleting(&self, pool: &ObjectRef<SwarmPool>) -> BTreeSet<String> {
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
            let cached = self.pods.get(&ObjectRef::new(&r.name).within(namespace));
            !deletion_observed(uid, cached.as_deref())
        });
        let uids = requested.keys().cloned().collect();
        if requested.is_empty() {
            all.remove(pool);
        }
        uids
    }

    fn remember_deleting(&self, pool: &ObjectRef<SwarmPool>, name: &str, uid: &str) {
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
    fn current_cached_config_map(
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
    fn remember_written(&self, pool: &ObjectRef<SwarmPool>, cm: &ConfigMap) {
        self.last_writes(pool, |last| {
            last.config_map = cm.metadata.resource_version.clone();
        });
    }

    /// Whether `desired` needs no write for `pool` (see [`status_is_reported`]). Once the cache
    /// holds a newer pool than the last write was based on, that write is forgotten: it no
    /// longer tells anything the cached status does not.
    fn status_is_reported(&self, pool: &SwarmPool, desired: &SwarmPoolStatus) -> bool {
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

    /// Remembers a status written for `pool`, decided on the pool as the cache held it.
    fn remember_status(&self, pool: &SwarmPool, status: &SwarmPoolStatus) {
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

    fn record_failure(&self, pool: &ObjectRef<SwarmPool>) -> u32 {
        let mut failures = self.failures.lock().expect("failures lock poisoned");
        let n = failures.entry(pool.clone()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    fn record_success(&self, pool: &ObjectRef<SwarmPool>) {
        self.failures
            .lock()
            .expect("failures lock poisoned")
            .remove(pool);
    }
}

/// Retry delay after `failures` consecutive failures: 1s, 2s, 4s, ... capped at 30 s.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_MIN.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

/// The retry delay after a failed reconcile: the backoff, plus a jitter of up to a quarter so
/// pools that failed together do not retry together, and at least what the server asked for
/// with `Retry-After` (`429 Too Many Requests`).
fn retry_delay(failures: u32, error: &Error) -> Duration {
    let delay = backoff_delay(failures);
    let jitter = delay.mul_f64(rand_fraction() / 4.0);
    let asked = error
        .api_error()
        .and_then(relisting_watch::retry_after)
        .unwrap_or_default();
    (delay + jitter).max(asked)
}

/// A number in [0, 1) that differs between calls, for jitter.
fn rand_fraction() -> f64 {
    (crate::random_bits() >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs the controller until `shutdown` resolves: watches in `namespace` (all when `None`),
/// reconciles at most `concurrency` pools at once, marks `http` ready once the caches have
/// synced.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    concurrency: u16,
    metrics: Metrics,
    http: Arc<HttpState>,
    lease: LeaseGuard,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let health = metrics.caches.clone();
    http.follow_caches(health.clone());

    let written = Written::default();
    let (controller, caches) = watch(&client, ns, &metrics, &health, &written);

    {
        let health = health.clone();
        tokio::spawn(async move {
            health.wait_synced().await;
            info!("caches synced; reconciling");
        });
    }
    // Every pool is reconsidered when a cache starts failing or lists again: to report that
    // the status may be out of date, and to act on a cache that follows the cluster again.
    let health_changes = futures::stream::unfold(health.subscribe(), |mut changes| async move {
        changes.changed().await.ok()?;
        Some(((), changes))
    });

    let context = Arc::new(Context {
        client: client.clone(),
        reporter: Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        },
        pools: caches.pools,
        statefulsets: caches.statefulsets,
        deployments: caches.deployments,
        replica_sets: caches.replica_sets,
        pods: caches.pods,
        config_maps: caches.config_maps,
        worker_config_maps: caches.worker_config_maps,
        jobs_sources: caches.jobs_sources,
        leases: caches.leases,
        health,
        metrics,
        failures: Mutex::default(),
        deleting: Mutex::default(),
        written,
        lease_clock: caches.lease_clock,
        lease,
        turns: Semaphore::new(usize::from(concurrency)),
        slice_writes: Semaphore::new(kube_cluster::SLICE_WRITES_IN_FLIGHT),
    });
    controller
        .reconcile_all_on(health_changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((pool, _)) => {
                    debug!(pool = %pool.name, namespace = ?pool.namespace, "reconciled")
                }
                Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                Err(error) => debug!(%error, "controller event"),
            }
        })
        .await;
    info!("controller stopped");
}

/// The caches the reconciles read, filled by the watches that trigger them.
struct Caches {
    pools: Store<SwarmPool>,
    config_maps: Store<ConfigMap>,
    worker_config_maps: Store<CachedSlice>,
    jobs_sources: Store<ConfigMap>,
    statefulsets: Store<StatefulSet>,
    deployments: Store<Deployment>,
    replica_sets: Store<ReplicaSet>,
    pods: PodCaches,
    leases: Store<CachedLease>,
    lease_clock: Arc<LeaseClock>,
}

/// Starts the watches of the pools, of the ConfigMaps they own and of every workload and pod
/// mapped to them: the controller they trigger (which starts every triggered reconcile at once:
/// each waits for its turn in [`reconcile`]), and the caches they fill.
fn watch(
    client: &Client,
    ns: Option<&str>,
    metrics: &Metrics,
    health: &CacheHealth,
    written: &Written,
) -> (Controller<SwarmPool>, Caches) {
    let (pool_store, pools) = cached_watch(
        scoped::<SwarmPool>(client, ns),
        watcher::Config::default(),
        trim::pool,
        Cache::Pools,
        health,
    );
    let written = written.clone();
    let pools = changes_only(pools, move |pool| pool_fingerprint(pool, &written)).applied_objects();
    metrics.pools.watch(pool_store.clone());
    // The pools' ConfigMaps and the workers' own in two caches: a pool of 1,000 workers under
    // `Acknowledge` has 1,000 of the latter, kept as the smaller `SliceSummary`.
    let (cm_store, config_maps) = cached_watch(
        scoped::<ConfigMap>(client, ns),
        watcher::Config::default().labels(&format!("{POOL_LABEL},!{WORKER_LABEL}")),
        trim::config_map,
        Cache::ConfigMaps,
        health,
    );
    let (slice_store, slices) = compact_cached_watch(
        scoped::<SliceSummary>(client, ns),
        watcher::Config::default().labels(&format!("{POOL_LABEL},{WORKER_LABEL}")),
        trim::slice,
        Cache::WorkerConfigMaps,
        health,
    );
    let controller = Controller::for_stream(pools, pool_store.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .owns_stream(config_maps.touched_objects())
        // A worker's ConfigMap names its pool in a label; its owner reference is not kept.
        .watches_stream(slices.touched_objects(), |slice| {
            let pool = slice.pool.as_deref()?;
            Some(ObjectRef::new(pool).within(slice.namespace()?.as_str()))
        });
    let (controller, sts_store, pod_store) =
        watch_statefulsets(controller, client, ns, health, &pool_store);
    let (controller, deployment_store, rs_store, deployment_pod_store) =
        watch_deployments(controller, client, ns, health, &pool_store);
    let (lease_store, leases) = compact_cached_watch(
        scoped::<LeaseSummary>(client, ns),
        watcher::Config::default().labels(POOL_LABEL),
        trim::lease,
        Cache::Leases,
        health,
    );
    // A worker's Lease names its pool; an acknowledgement may free jobs in transit, and a
    // renewal of an expired Lease makes its worker a member again. Renewals alone are timed as
    // they arrive and wake nothing: the pool looks again when the next Lease would expire.
    let lease_clock = Arc::new(LeaseClock::default());
    let clock = lease_clock.clone();
    let lease_changes = leases.filter_map(move |event| {
        let lease = match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                clock.observe(&lease, Instant::now()).then_some(lease)
            }
            Ok(watcher::Event::Delete(lease)) => {
                clock.forget(&lease);
                Some(lease)
            }
            _ => None,
        };
        std::future::ready(lease.map(Ok::<_, watcher::Error>))
    });
    let controller = controller.watches_stream(lease_changes, |lease| {
        let pool = lease.pool.as_deref()?;
        Some(ObjectRef::new(pool).within(lease.namespace()?.as_str()))
    });
    // The ConfigMaps pools read jobs from, in a watch of their own (see [`jobs_sources`]).
    let (jobs_source_store, jobs_source_maps) = cached_watch(
        scoped::<ConfigMap>(client, ns),
        watcher::Config::default().labels(JOBS_SOURCE_LABEL),
        trim::jobs_source,
        Cache::JobsSources,
        health,
    );
    let by_source = pool_store.clone();
    let controller = controller.watches_stream(jobs_source_maps.touched_objects(), move |cm| {
        jobs_sources::pools_for_jobs_source(&by_source.state(), &cm)
    });
    let caches = Caches {
        pools: pool_store,
        config_maps: cm_store,
        worker_config_maps: slice_store,
        jobs_sources: jobs_source_store,
        statefulsets: sts_store,
        deployments: deployment_store,
        replica_sets: rs_store,
        pods: PodCaches {
            statefulset: pod_store,
            deployment: deployment_pod_store,
        },
        leases: lease_store,
        lease_clock,
    };
    (controller, caches)
}

/// Starts the watches of StatefulSets and of their pods, each change triggering the pools
/// (in `pools`) it maps to: `controller` with those triggers, and the two caches.
fn watch_statefulsets(
    controller: Controller<SwarmPool>,
    client: &Client,
    ns: Option<&str>,
    health: &CacheHealth,
    pools: &Store<SwarmPool>,
) -> (Controller<SwarmPool>, Store<StatefulSet>, Store<CachedPod>) {
    let (sts_store, statefulsets) = cached_watch(
        scoped::<StatefulSet>(client, ns),
        watcher::Config::default(),
        trim::statefulset,
        Cache::StatefulSets,
        health,
    );
    let (pod_store, pods) = compact_cached_watch(
        scoped::<PodSummary>(client, ns),
        watcher::Config::default().labels(STATEFULSET_POD_LABEL),
        trim::pod,
        Cache::Pods,
        health,
    );
    let by_sts = pools.clone();
    let by_pod = (pools.clone(), sts_store.clone());
    let statefulsets = changes_only(statefulsets, changes::content);
    let pods = changes_only(pods, changes::pod);
    let controller = controller
        .watches_stream(statefulsets.touched_objects(), move |sts| {
            pools_for_statefulset(&by_sts.state(), &sts)
        })
        .watches_stream(pods.touched_objects(), move |pod| {
            let (pools, statefulsets) = &by_pod;
            pools_for_pod(&pools.state(), statefulsets, &pod)
        });
    (controller, sts_store, pod_store)
}

/// Starts the watches of Deployments, of their ReplicaSets and of their pods, each change
/// triggering the pools (in `pools`) it maps to: `controller` with those triggers, and the
/// three caches.
fn watch_deployments(
    controller: Controller<SwarmPool>,
    client: &Client,
    ns: Option<&str>,
    health: &CacheHealth,
    pools: &Store<SwarmPool>,
) -> (
    Controller<SwarmPool>,
    Store<Deployment>,
    Store<ReplicaSet>,
    Store<CachedPod>,
) {
    let (deployment_store, deployments) = cached_watch(
        scoped::<Deployment>(client, ns),
        watcher::Config::default(),
        trim::deployment,
        Cache::Deployments,
        health,
    );
    let (rs_store, replica_sets) = cached_watch(
        scoped::<ReplicaSet>(client, ns),
        watcher::Config::default(),
        trim::replica_set,
        Cache::ReplicaSets,
        health,
    );
    let (deployment_pod_store, deployment_pods) = compact_cached_watch(
        scoped::<PodSummary>(client, ns),
        watcher::Config::default().labels(DEPLOYMENT_POD_LABEL),
        trim::pod,
        Cache::DeploymentPods,
        health,
    );
    let deployments = changes_only(deployments, changes::content);
    let replica_sets = changes_only(replica_sets, changes::content);
    let deployment_pods = changes_only(deployment_pods, changes::pod);
    let by_deployment = pools.clone();
    let by_rs = (pools.clone(), deployment_store.clone());
    let by_deployment_pod = (pools.clone(), deployment_store.clone(), rs_store.clone());
    let controller = controller
        .watches_stream(deployments.touched_objects(), move |deployment| {
            pools_for_deployment(&by_deployment.state(), &deployment)
        })
        .watches_stream(replica_sets.touched_objects(), move |rs| {
            let (pools, deployments) = &by_rs;
            pools_for_owner(&pools.state(), deployments, &rs, rs.owner_references())
        })
        .watches_stream(deployment_pods.touched_objects(), move |pod| {
            let (pools, deployments, replica_sets) = &by_deployment_pod;
            pools_for_deployment_pod(&pools.state(), deployments, replica_sets, &pod)
        });
    (controller, deployment_store, rs_store, deployment_pod_store)
}

/// A watch of `api` kept in a store, each object trimmed by `trim`, its errors logged and its
/// successes and failures recorded in `health`: the store the reconciler reads, and the events
/// that trigger it. The watch starts over with a list after any failure
/// ([`relisting_watcher`]).
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    cache: Cache,
    health: &CacheHealth,
) -> (
    Store<K>,
    impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (store, writer) = reflector::store::<K>();
    let events = relisting_watcher(api, config).modify(trim).reflect(writer);
    (store, observed_events(events, cache, health))
}

/// [`cached_watch`] for a summary the cache keeps in its smaller form ([`Cacheable`]); the
/// events carry the whole summary.
fn compact_cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    cache: Cache,
    health: &CacheHealth,
) -> (
    Store<K::Cached>,
    impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
)
where
    K: Cacheable + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, mut writer) = reflector::store::<K::Cached>();
    let events = relisting_watcher(api, config)
        .modify(trim)
        .inspect_ok(move |event| writer.apply_watcher_event(&cached_event(event)));
    (store, observed_events(events, cache, health))
}

/// `event` with its object in the form a cache keeps.
fn cached_event<K: Cacheable>(event: &watcher::Event<K>) -> watcher::Event<K::Cached> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(object.cached()),
        watcher::Event::Delete(object) => watcher::Event::Delete(object.cached()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(object.cached()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A cache's watch events, errors logged and recorded in `health` and then left out.
fn observed_events<K: Send + 'static>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    cache: Cache,
    health: &CacheHealth,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static {
    health.register(cache);
    events
        .inspect(warn_on_watch_error(cache))
        .inspect(record_health(health.clone(), cache))
        // Errors stop here, logged and recorded. kube-runtime's controller splits its trigger
        // streams into items and errors, and after an error it polled them again only when
        // something else woke it (a reconcile's requeue): its caches fell minutes behind
        // after an API server restart, while nothing looked wrong.
        .filter_map(|event| std::future::ready(event.ok().map(Ok)))
}

/// The events of a watch (see [`cached_watch`]) that may change a plan, by `fingerprint`
/// ([`changes::only_changes`]).
fn changes_only<K: Resource>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    fingerprint: impl Fn(&K) -> u64,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> {
    let mut keep = changes::only_changes(fingerprint);
    events.filter(move |event| std::future::ready(event.as_ref().is_ok_and(&mut keep)))
}

/// What a pool's reconcile reads of it: its metadata (its `generation` stands for its spec) and
/// its status, unless that is the status this operator last wrote, whose arrival changes
/// nothing.
fn pool_fingerprint(pool: &SwarmPool, written: &Written) -> u64 {
    let mut meta = pool.metadata.clone();
    meta.resource_version = None;
    let own_status = written
        .lock()
        .expect("written lock poisoned")
        .get(&ObjectRef::from_obj(pool))
        .and_then(|last| last.status.as_ref())
        .is_some_and(|last| pool.status.as_ref() == Some(&last.status));
    let status = (!own_status).then(|| changes::hash_json(&pool.status));
    changes::hash_json(&(meta, status))
}

/// Logs a failed list or watch (the watcher retries with backoff); a missing SwarmPool
/// resource gets the fix, since a forgotten CRD install is the usual cause.
fn warn_on_watch_error<K>(cache: Cache) -> impl FnMut(&watcher::Result<watcher::Event<K>>) {
    move |event| {
        let Err(error) = event else { return };
        let not_found = matches!(
            error,
            watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.is_not_found()
        );
        if not_found && matches!(cache, Cache::Pools) {
            warn!(
                %error,
                "the SwarmPool resource is not served: install the CRD with `kubectl apply -f crds/` (or `swarm-operator crd | kubectl apply -f -`)"
            );
        } else {
            warn!(%cache, error = %crate::error_chain(error), "watch failed; listing again after a backoff");
        }
    }
}

/// Records in `health` each event of `cache`'s watch: a watch event or a completed list is a
/// success (only a list ends a failure), an error a failure.
fn record_health<K>(
    health: CacheHealth,
    cache: Cache,
) -> impl FnMut(&watcher::Result<watcher::Event<K>>) {
    move |event| {
        let now = Instant::now();
        match event {
            Ok(watcher::Event::InitDone) => health.succeeded(cache, true, now),
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                health.succeeded(cache, false, now)
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(error) => health.failed(cache, Cause::of(error), error.to_string(), now),
        }
    }
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Pools of `kind` in `namespace` that select `workload` by label, or that reported the
/// workload named `name` as theirs (so a relabelled, deleted or not yet cached workload still
/// reaches the pool that used it).
fn pools_of_workload<K: ResourceExt>(
    pools: &[Arc<SwarmPool>],
    kind: WorkloadKind,
    namespace: Option<&str>,
    name: &str,
    workload: Option<&K>,
) -> Vec<ObjectRef<SwarmPool>> {
    fn reported(pool: &SwarmPool, kind: WorkloadKind) -> Option<&str> {
        let status = pool.status.as_ref()?;
        match kind {
            WorkloadKind::StatefulSet => status.stateful_set.as_deref(),
            WorkloadKind::Deployment => status.workload.as_deref(),
        }
    }
    pools
        .iter()
        .filter(|pool| pool.metadata.namespace.as_deref() == namespace)
        .filter(|pool| pool.spec.workload_kind == kind)
        .filter(|pool| {
            workload.is_some_and(|w| planner::selects(&pool.spec.selector, w))
                || reported(pool, kind) == Some(name)
        })
        .map(|pool| ObjectRef::from_obj(pool.as_ref()))
        .collect()
}

/// StatefulSet pools that select `sts` by label, or reported it as theirs.
pub fn pools_for_statefulset(
    pools: &[Arc<SwarmPool>],
    sts: &StatefulSet,
) -> Vec<ObjectRef<SwarmPool>> {
    let namespace = sts.metadata.namespace.as_deref();
    pools_of_workload(
        pools,
        WorkloadKind::StatefulSet,
        namespace,
        &sts.name_any(),
        Some(sts),
    )
}

/// Name of the StatefulSet that controls `pod`, if one does.
pub fn controlling_statefulset(pod: &PodSummary) -> Option<&str> {
    pod.owner_references()
        .iter()
        .find(|r| {
            r.controller == Some(true) && r.kind == "StatefulSet" && r.api_version == "apps/v1"
        })
        .map(|r| r.name.as_str())
}

/// Pools whose workers include `pod`: through its controlling StatefulSet.
pub fn pools_for_pod(
    pools: &[Arc<SwarmPool>],
    statefulsets: &Store<StatefulSet>,
    pod: &PodSummary,
) -> Vec<ObjectRef<SwarmPool>> {
    let Some(sts_name) = controlling_statefulset(pod) else {
        return Vec::new();
    };
    let namespace = pod.metadata.namespace.as_deref();
    let sts = statefulsets.get(&ObjectRef::new(sts_name).within(namespace.unwrap_or_default()));
    pools_of_workload(
        pools,
        WorkloadKind::StatefulSet,
        namespace,
        sts_name,
        sts.as_deref(),
    )
}

/// Deployment pools that select `deployment` by label, or reported it as theirs.
pub fn pools_for_deployment(
    pools: &[Arc<SwarmPool>],
    deployment: &Deployment,
) -> Vec<ObjectRef<SwarmPool>> {
    let namespace = deployment.metadata.namespace.as_deref();
    pools_of_workload(
        pools,
        WorkloadKind::Deployment,
        namespace,
        &deployment.name_any(),
        Some(deployment),
    )
}

/// Pools of the Deployment named as controller in `owners` (of an object in `object`'s
/// namespace).
fn pools_for_owner(
    pools: &[Arc<SwarmPool>],
    deployments: &Store<Deployment>,
    object: &impl ResourceExt,
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Vec<ObjectRef<SwarmPool>> {
    let Some(owner) = owners
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == "Deployment")
    else {
        return Vec::new();
    };
    let namespace = object.namespace();
    let deployment = deployments
        .get(&ObjectRef::new(&owner.name).within(namespace.as_deref().unwrap_or_default()));
    pools_of_workload(
        pools,
        WorkloadKind::Deployment,
        namespace.as_deref(),
        &owner.name,
        deployment.as_deref(),
    )
}

/// Pools whose workers include `pod`: through its ReplicaSet's Deployment.
pub fn pools_for_deployment_pod(
    pools: &[Arc<SwarmPool>],
    deployments: &Store<Deployment>,
    replica_sets: &Store<ReplicaSet>,
    pod: &PodSummary,
) -> Vec<ObjectRef<SwarmPool>> {
    let Some(rs_name) = pod
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == "ReplicaSet")
        .map(|r| r.name.as_str())
    else {
        return Vec::new();
    };
    let namespace = pod.namespace().unwrap_or_default();
    match replica_sets.get(&ObjectRef::new(rs_name).within(&namespace)) {
        Some(rs) => pools_for_owner(pools, deployments, rs.as_ref(), rs.owner_references()),
        // The ReplicaSet is not cached yet (or gone): every Deployment pool of the namespace
        // looks, as one of them may have to grant what this pod held.
        None => pools
            .iter()
            .filter(|pool| pool.metadata.namespace.as_deref() == Some(namespace.as_str()))
            .filter(|pool| pool.spec.workload_kind == WorkloadKind::Deployment)
            .map(|pool| ObjectRef::from_obj(pool.as_ref()))
            .collect(),
    }
}

/// One reconcile: snapshot the caches, run the round protocol ([`drive`]) against the API
/// server, report the status. Events and metrics of what was done are published even when a
/// later step fails.
#[instrument(skip(pool, ctx), fields(pool = %pool.name_any(), namespace = pool.namespace().unwrap_or_default()))]
async fn reconcile(pool: Arc<SwarmPool>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Turns first come, first served. kube-runtime's own bound on concurrent reconciles keeps
    // the pools waiting for a slot in a hash set and takes the first in its iteration order, so
    // under load the same pools won every free slot: 100 pools created during each other's
    // rollouts waited up to a minute for their first reconcile. Its controller now starts
    // every reconcile at once, and tokio's semaphore queues them fairly.
    let _turn = ctx
        .turns
        .acquire()
        .await
        .expect("the turns are never closed");
    // The pool as it is now: it may have changed while this reconcile waited.
    let Some(pool) = ctx.pools.get(&ObjectRef::from_obj(pool.as_ref())) else {
        return Ok(Action::await_change());
    };
    let _timer = ctx.metrics.reconcile_started();
    let mut journal = Journal::default();
    let result = reconcile_pool(&pool, &ctx, &mut journal).await;
    ctx.metrics.granted(&journal.granted_after_seconds);
    publish_events(&ctx, &pool, journal.events).await;
    if result.is_ok() {
        ctx.record_success(&ObjectRef::from_obj(pool.as_ref()));
    }
    result
}

async fn reconcile_pool(
    pool: &SwarmPool,
    ctx: &Context,
    journal: &mut Journal,
) -> Result<Action, Error> {
    let namespace = pool.namespace().ok_or(Error::MissingNamespace)?;
    if let Some(wait) = not_ready_to_decide(ctx, pool).await? {
        return Ok(wait);
    }
    let sources = jobs_sources::look_up(ctx, pool, &namespace).await?;
    let (resolved, unresolved) = jobs_source::resolve(pool, |name| {
        sources.get(name).map_or(Found::Missing, Source::found)
    });
    let mut cluster = KubeCluster::new(ctx, pool, &namespace);
    let config_map = cluster.starting_config_map().await?;
    let snapshot = Snapshot::of(ctx, &resolved, unresolved.as_ref(), &namespace, config_map);
    let outcome = match drive(&mut cluster, &snapshot.observed(), journal).await? {
        Driven::Done(outcome) => outcome,
        Driven::PoolGone => return Ok(Action::await_change()),
    };
    if !ctx.status_is_reported(pool, &outcome.status) {
        if !patch_status(ctx, pool, &outcome.status).await? {
            // Deleted since the cache saw it: there is no status left to report.
            return Ok(Action::await_change());
        }
        debug!(phase = ?outcome.status.phase, "status updated");
    }
    Ok(Action::requeue(outcome.requeue_after))
}

/// When the pool must not be decided on now, what to do instead: a pool on its way out keeps
/// nothing (the garbage collector removes its ConfigMap, and re-creating it would undo the
/// user's delete); a stale cache may have missed changes, so the status says it is not known
/// and the watch's relist (which reconciles every pool) is awaited.
async fn not_ready_to_decide(ctx: &Context, pool: &SwarmPool) -> Result<Option<Action>, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Some(Action::await_change()));
    }
    ctx.health.wait_synced().await;
    let stale = ctx.health.stale(Instant::now());
    if !stale.is_empty() {
        report_stale(ctx, pool, &stale).await?;
        return Ok(Some(Action::requeue(STALE_RECHECK)));
    }
    if ctx.health.any_failing() {
        return Ok(Some(Action::requeue(STALE_AFTER)));
    }
    Ok(None)
}

/// Writes `status` as the pool's whole status; `false` when the pool is gone.
async fn patch_status(
    ctx: &Context,
    pool: &SwarmPool,
    status: &SwarmPoolStatus,
) -> Result<bool, Error> {
    ctx.may_write()?;
    let pools: Api<SwarmPool> =
        Api::namespaced(ctx.client.clone(), &pool.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": SwarmPool::api_version(&()),
        "kind": SwarmPool::kind(&()),
        "metadata": { "name": pool.name_any() },
        "status": status,
    });
    match pools
        .patch_status(
            &pool.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {
            ctx.remember_status(pool, status);
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
        Err(source) => Err(Error::PatchStatus { source }),
    }
}

/// Writes the pool's status as not known: phase `Degraded`, `Ready` and `Progressing` Unknown
/// and `Degraded` True, all with reason `StaleCache` and a message naming the stale caches;
/// the other fields keep their last values.
async fn report_stale(ctx: &Context, pool: &SwarmPool, stale: &[StaleCache]) -> Result<(), Error> {
    let now = Timestamp::now();
    let (headline, message) = stale_message(stale, now);
    let already_reported = pool.status.as_ref().is_some_and(|s| {
        s.phase == Some(Phase::Degraded)
            && s.conditions
                .iter()
                .any(|c| c.type_ == conditions::READY && c.message.starts_with(&headline))
    });
    if already_reported {
        return Ok(());
    }
    let mut status = pool.status.clone().unwrap_or_default();
    status.phase = Some(Phase::Degraded);
    status.conditions =
        conditions::unknown(&status.conditions, pool.metadata.generation, now, &message);
    warn!(pool = %pool.name_any(), %message, "reporting the pool's status as unknown");
    patch_status(ctx, pool, &status).await.map(|_| ())
}

/// The headline and the whole message of a stale status at `now`. The headline names each
/// stale cache and its kind of error, so a status is rewritten when the reason changes (the API
/// server is back but refuses the read) and not on every retry of the same failure.
fn stale_message(stale: &[StaleCache], now: Timestamp) -> (String, String) {
    let causes: Vec<String> = stale
        .iter()
        .map(|s| format!("{} ({})", s.cache, s.cause))
        .collect();
    let headline = format!("caches not following the cluster: {}; ", causes.join(", "));
    let details: Vec<String> = stale
        .iter()
        .map(|s| {
            let since = now.checked_sub(s.failing_for).unwrap_or(now);
            let since = since
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or(since);
            format!(
                "the {} watch has failed since {since}: {}",
                s.cache, s.error
            )
        })
        .collect();
    let message = format!(
        "{headline}{}; the rest of this status is the last known state",
        details.join("; ")
    );
    (headline, message)
}

/// Names in one set-based selector at most; beyond, every StatefulSet pod of the namespace is
/// listed (a long query would approach the API server's limit on request line length).
const MAX_NAMES_IN_SELECTOR: usize = 1000;

/// The label selector of a live list of the pods named `names`; `None` when there are none.
pub fn live_pods_selector(names: &BTreeSet<String>) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    if names.len() > MAX_NAMES_IN_SELECTOR {
        return Some(STATEFULSET_POD_LABEL.to_owned());
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Some(format!("{STATEFULSET_POD_LABEL} in ({})", names.join(",")))
}

/// Publishes events; a failure to publish is logged, never fails the reconcile.
async fn publish_events(ctx: &Context, pool: &SwarmPool, events: Vec<PlannedEvent>) {
    if events.is_empty() || ctx.may_write().is_err() {
        return;
    }
    // A recorder per reconcile: the recorder folds events with the same reason into one series
    // without updating the note, which would hide each new version and each refreshed pod.
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = pool.object_ref(&());
    let namespace = pool.namespace().unwrap_or_default();
    let acknowledged = events
        .iter()
        .filter(|e| e.reason == conditions::reason::WORKER_ACKNOWLEDGED)
        .count();
    for _ in 0..acknowledged {
        let counter = PoolCounter::Acknowledgements;
        ctx.metrics.count(counter, &namespace, &pool.name_any());
    }
    for event in crate::planner::coalesce_acknowledgements(events) {
        if event.warning {
            ctx.metrics.warned(event.reason);
        }
        let counted: &[PoolCounter] = match (event.reason, event.action) {
            (conditions::reason::ACK_TIMED_OUT, _) => &[PoolCounter::AckTimeouts],
            (conditions::reason::WORKER_LEASE_EXPIRED, crate::planner::FAILOVER) => {
                &[PoolCounter::LeaseExpiries, PoolCounter::Failovers]
            }
            (conditions::reason::WORKER_LEASE_EXPIRED, _) => &[PoolCounter::LeaseExpiries],
            _ => &[],
        };
        for counter in counted {
            ctx.metrics.count(*counter, &namespace, &pool.name_any());
        }
        let secondary = event
            .related_pod
            .as_ref()
            .map(|(name, uid)| ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(name.clone()),
                namespace: pool.namespace(),
                uid: Some(uid.clone()),
                ..ObjectReference::default()
            });
        let result = recorder
            .publish(
                &Event {
                    type_: if event.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: event.reason.to_owned(),
                    note: Some(event.note.clone()),
                    action: event.action.to_owned(),
                    secondary,
                },
                &reference,
            )
            .await;
        if let Err(error) = result {
            warn!(%error, reason = event.reason, "failed to publish event");
        }
    }
}

fn error_policy(pool: Arc<SwarmPool>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(pool.as_ref());
    let failures = ctx.record_failure(&key);
    let delay = retry_delay(failures, error);
    ctx.metrics.reconcile_failed(error);
    warn!(
        pool = %pool.name_any(),
        namespace = pool.namespace().unwrap_or_default(),
        error = %crate::error_chain(error),
        failures,
        retry_in_ms = delay.as_millis() as u64,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::SwarmPoolSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector, ObjectMeta, OwnerReference,
    };

    #[test]
    fn a_stale_status_is_rewritten_when_the_kind_of_error_changes_not_its_text() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let stale = |cause, error: &str| StaleCache {
            cache: Cache::Pods,
            failing_for: Duration::from_secs(30),
            cause,
            error: error.to_owned(),
        };
        let (down, message) = stale_message(&[stale(Cause::Transport, "connect to 10.0.0.1")], now);
        assert_eq!(
            message,
            "caches not following the cluster: statefulset-pods (connection failed); the \
             statefulset-pods watch has failed since 2026-01-01T00:00:30Z: connect to 10.0.0.1; \
             the rest of this status is the last known state"
        );
        let (retried, _) = stale_message(&[stale(Cause::Transport, "connect to 10.0.0.2")], now);
        assert_eq!(down, retried, "the same failure again is not news");
        let (refused, message) =
            stale_message(&[stale(Cause::Status(403), "pods is forbidden")], now);
        assert!(!message.starts_with(&down), "{message}");
        assert!(
            message.starts_with(&refused) && message.contains("HTTP 403"),
            "{message}"
        );
    }

    fn pool(name: &str, app: &str, reported: Option<&str>) -> Arc<SwarmPool> {
        let mut pool = SwarmPool::new(
            name,
            SwarmPoolSpec {
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                    ..LabelSelector::default()
                },
                workload_kind: Default::default(),
                jobs: vec![],
                jobs_from: Vec::new(),
                config_map: None,
                strategy: Default::default(),
                qos: None,
                rollout: Default::default(),
                paused: false,
            },
        );
        pool.metadata.namespace = Some("ns".into());
        pool.status = reported.map(|sts| SwarmPoolStatus {
            stateful_set: Some(sts.into()),
            ..SwarmPoolStatus::default()
        });
        Arc::new(pool)
    }

    #[test]
    fn the_operators_own_status_coming_back_wakes_no_pool_but_anyone_elses_does() {
        let written = Written::default();
        let mut keep = changes::only_changes(|p: &SwarmPool| pool_fingerprint(p, &written));
        let version = |rv: &str, status: &str| {
            let mut p = pool("p", "web", Some(status)).as_ref().clone();
            p.metadata.uid = Some("u".into());
            p.metadata.resource_version = Some(rv.into());
            p
        };
        let operator_writes = |p: &SwarmPool| {
            written.lock().unwrap().insert(
                ObjectRef::from_obj(p),
                LastWrites {
                    config_map: None,
                    status: Some(StatusWrite {
                        based_on: None,
                        status: p.status.clone().unwrap(),
                    }),
                },
            );
        };
        operator_writes(&version("1", "web-1"));
        assert!(
            keep(&watcher::Event::Apply(version("1", "web-1"))),
            "first sight"
        );
        operator_writes(&version("2", "web-2"));
        assert!(!keep(&watcher::Event::Apply(version("2", "web-2"))));
        // Someone else writes another status.
        assert!(keep(&watcher::Event::Apply(version("3", "other"))));
        // A new generation (the spec changed) wakes the pool whatever its status.
        let mut edited = version("4", "other");
        edited.metadata.generation = Some(2);
        assert!(keep(&watcher::Event::Apply(edited)));
    }

    fn sts(name: &str, app: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                ..ObjectMeta::default()
            },
            ..StatefulSet::default()
        }
    }

    fn names(refs: Vec<ObjectRef<SwarmPool>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_statefulset_triggers_the_pools_that_select_it_or_used_it() {
        let pools = [
            pool("a", "web", None),
            pool("b", "db", Some("web")),
            pool("c", "db", None),
        ];
        assert_eq!(
            names(pools_for_statefulset(&pools, &sts("web", "web"))),
            ["a", "b"]
        );
    }

    #[test]
    fn a_statefulset_in_another_namespace_triggers_nothing() {
        let pools = [pool("a", "web", None)];
        let mut other = sts("web", "web");
        other.metadata.namespace = Some("elsewhere".into());
        assert!(pools_for_statefulset(&pools, &other).is_empty());
    }

    #[test]
    fn a_pod_triggers_pools_through_its_controlling_statefulset() {
        let pools = [pool("a", "web", None), pool("c", "db", None)];
        let (store, mut writer) = reflector::store::<StatefulSet>();
        writer.apply_watcher_event(&watcher::Event::Apply(sts("web", "web")));
        let mut pod = PodSummary {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: "web".into(),
                    uid: "u".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..PodSummary::default()
        };
        assert_eq!(names(pools_for_pod(&pools, &store, &pod)), ["a"]);
        pod.metadata.owner_references = None;
        assert!(pools_for_pod(&pools, &store, &pod).is_empty());
    }

    #[test]
    fn workloads_trigger_only_pools_of_their_kind_and_an_uncached_one_reaches_its_reporters() {
        let deployment_pool = |name: &str, app: &str, reported: Option<&str>| {
            let mut pool = Arc::unwrap_or_clone(pool(name, app, None));
            pool.spec.workload_kind = WorkloadKind::Deployment;
            pool.status = reported.map(|d| SwarmPoolStatus {
                workload: Some(d.into()),
                ..SwarmPoolStatus::default()
            });
            Arc::new(pool)
        };
        let pools = [
            pool("sts-pool", "web", None),
            deployment_pool("d-pool", "web", None),
            deployment_pool("d-reporter", "db", Some("web")),
        ];
        assert_eq!(
            names(pools_for_statefulset(&pools, &sts("web", "web"))),
            ["sts-pool"]
        );
        let deployment = Deployment {
            metadata: sts("web", "web").metadata,
            ..Deployment::default()
        };
        assert_eq!(
            names(pools_for_deployment(&pools, &deployment)),
            ["d-pool", "d-reporter"]
        );
        // A ReplicaSet whose Deployment is not cached: only the pool that reported it hears.
        let (empty, _) = reflector::store::<Deployment>();
        let owner = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "d".into(),
            controller: Some(true),
            ..OwnerReference::default()
        };
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("ns".into()),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            ..ReplicaSet::default()
        };
        assert_eq!(
            names(pools_for_owner(&pools, &empty, &rs, rs.owner_references())),
            ["d-reporter"]
        );
    }

    #[test]
    fn watch_events_record_lists_events_and_failures_in_the_cache_health() {
        let health = CacheHealth::default();
        health.register(Cache::Pods);
        let mut record = record_health::<PodSummary>(health.clone(), Cache::Pods);
        record(&Ok(watcher::Event::Init));
        assert!(!health.all_synced(), "a list in progress is no sync");
        record(&Ok(watcher::Event::InitDone));
        assert!(health.all_synced());
        record(&Err(watcher::Error::NoResourceVersion));
        assert!(health.any_failing());
        record(&Ok(watcher::Event::Apply(PodSummary::default())));
        assert!(health.any_failing(), "only a complete list ends a failure");
        record(&Ok(watcher::Event::InitDone));
        assert!(!health.any_failing());
    }

    #[test]
    fn live_lists_select_the_named_pods_by_their_name_label() {
        let names = |n: usize| (0..n).map(|i| format!("w-{i}")).collect::<BTreeSet<_>>();
        assert_eq!(live_pods_selector(&names(0)), None);
        assert_eq!(
            live_pods_selector(&names(2)).as_deref(),
            Some("statefulset.kubernetes.io/pod-name in (w-0,w-1)")
        );
        assert_eq!(
            live_pods_selector(&names(MAX_NAMES_IN_SELECTOR + 1)).as_deref(),
            Some(STATEFULSET_POD_LABEL)
        );
    }

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_thirty_seconds() {
        assert_eq!(backoff_delay(1), Duration::from_secs(1));
        assert_eq!(backoff_delay(2), Duration::from_secs(2));
        assert_eq!(backoff_delay(5), Duration::from_secs(16));
        assert_eq!(backoff_delay(6), Duration::from_secs(30));
        assert_eq!(backoff_delay(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn a_retry_is_jittered_within_a_quarter_and_waits_at_least_what_the_server_asked() {
        let transient = Error::MissingNamespace;
        for _ in 0..50 {
            let delay = retry_delay(3, &transient);
            assert!(
                delay >= Duration::from_secs(4) && delay <= Duration::from_secs(5),
                "{delay:?}"
            );
        }
        let throttled = Error::PatchStatus {
            source: crate::relisting_watch::throttled(20),
        };
        assert_eq!(retry_delay(1, &throttled), Duration::from_secs(20));
    }

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
