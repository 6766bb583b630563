//! The watches: each fills a reflector cache the reconciles read and feeds the same events to
//! the controller as triggers, so a reconcile never runs on a cache older than its trigger.
//! Errors stop at the cache, logged and recorded in its health.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use super::context::Written;
use super::relisting_watch::relisting_watcher;
use super::triggers::pools_for_workload;
use super::workloads::{WatchedWorkload, Workloads};
use super::{changes, jobs_sources};
use crate::api::crd::SwarmPool;
use crate::runtime::cache_health::{Cache, CacheHealth, Cause};
use crate::runtime::metrics::Metrics;
use crate::state::cached::{Cacheable, CachedLease, CachedPod, CachedSlice};
use crate::state::lease_summary::LeaseSummary;
use crate::state::pod_summary::PodSummary;
use crate::state::slice_summary::SliceSummary;
use crate::state::trim;
use swarm_protocol::names::{JOBS_SOURCE_LABEL, POOL_LABEL, WORKER_LABEL};

/// The caches the reconciles read, filled by the watches that trigger them.
pub(super) struct Caches {
    pub(super) pools: Store<SwarmPool>,
    pub(super) config_maps: Store<ConfigMap>,
    pub(super) worker_config_maps: Store<CachedSlice>,
    pub(super) jobs_sources: Store<ConfigMap>,
    pub(super) workloads: Workloads,
    pub(super) leases: Store<CachedLease>,
    /// The kubelets' node Leases; `None` for an operator of one namespace, which may not read
    /// them.
    pub(super) node_leases: Option<Store<CachedLease>>,
}

/// Where the watches list and watch (a namespace, or all), and the health they report to.
pub(super) struct WatchScope<'a> {
    client: &'a Client,
    namespace: Option<&'a str>,
    health: &'a CacheHealth,
}

impl WatchScope<'_> {
    /// A [`cached_watch`] of `K` within this scope.
    pub(super) fn cached<K>(
        &self,
        config: watcher::Config,
        trim: fn(&mut K),
        cache: Cache,
    ) -> (
        Store<K>,
        impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    )
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + Hash + Clone,
    {
        let api = scoped(self.client, self.namespace);
        cached_watch(api, config, trim, cache, self.health)
    }

    /// A [`compact_cached_watch`] of `K` within this scope.
    pub(super) fn compact<K>(
        &self,
        config: watcher::Config,
        trim: fn(&mut K),
        cache: Cache,
    ) -> (
        Store<K::Cached>,
        impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    )
    where
        K: Cacheable
            + Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
        <K as Resource>::DynamicType: Default,
    {
        let api = scoped(self.client, self.namespace);
        compact_cached_watch(api, config, trim, cache, self.health)
    }

    /// The watch of the pods that carry `label`: a workload kind's pods, in the form the cache
    /// keeps.
    pub(super) fn pods(
        &self,
        label: &str,
        cache: Cache,
    ) -> (
        Store<CachedPod>,
        impl Stream<Item = watcher::Result<watcher::Event<PodSummary>>> + Send + 'static,
    ) {
        self.compact(watcher::Config::default().labels(label), trim::pod, cache)
    }
}

/// Starts the watches of the pools, of the ConfigMaps they own and of every workload and pod
/// mapped to them: the controller they trigger (which starts every triggered reconcile at once:
/// each waits for its turn in [`super::reconcile`]), and the caches they fill.
pub(super) fn watch(
    client: &Client,
    namespace: Option<&str>,
    metrics: &Metrics,
    health: &CacheHealth,
    written: &Written,
) -> (Controller<SwarmPool>, Caches) {
    let scope = WatchScope {
        client,
        namespace,
        health,
    };
    let (controller, pools, config_maps, worker_config_maps) =
        watch_pools(&scope, metrics, written);
    let (controller, workloads) = Workloads::watch(controller, &scope, &pools);
    let (controller, leases) = watch_leases(controller, &scope);
    let (controller, node_leases) = watch_node_leases(controller, &scope);
    let (controller, jobs_sources) = watch_jobs_sources(controller, &scope, &pools);
    let caches = Caches {
        pools,
        config_maps,
        worker_config_maps,
        jobs_sources,
        workloads,
        leases,
        node_leases,
    };
    (controller, caches)
}

/// Starts the watches of the pools and of their ConfigMaps: the controller they trigger, and
/// the caches of pools, of their ConfigMaps and of their workers' own.
fn watch_pools(
    scope: &WatchScope,
    metrics: &Metrics,
    written: &Written,
) -> (
    Controller<SwarmPool>,
    Store<SwarmPool>,
    Store<ConfigMap>,
    Store<CachedSlice>,
) {
    let (pool_store, pools) = scope.cached(watcher::Config::default(), trim::pool, Cache::Pools);
    let written = written.clone();
    let pools = changes_only(pools, move |pool| pool_fingerprint(pool, &written)).applied_objects();
    metrics.pools.watch(pool_store.clone());
    // The pools' ConfigMaps and the workers' own in two caches: a pool of 1,000 workers under
    // `Acknowledge` has 1,000 of the latter, kept as the smaller `SliceSummary`.
    let (cm_store, config_maps) = scope.cached(
        watcher::Config::default().labels(&format!("{POOL_LABEL},!{WORKER_LABEL}")),
        trim::config_map,
        Cache::ConfigMaps,
    );
    let (slice_store, slices) = scope.compact::<SliceSummary>(
        watcher::Config::default().labels(&format!("{POOL_LABEL},{WORKER_LABEL}")),
        trim::slice,
        Cache::WorkerConfigMaps,
    );
    let controller = Controller::for_stream(pools, pool_store.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .owns_stream(config_maps.touched_objects())
        // A worker's ConfigMap names its pool in a label; its owner reference is not kept.
        .watches_stream(slices.touched_objects(), |slice| {
            let pool = slice.pool.as_deref()?;
            Some(ObjectRef::new(pool).within(slice.namespace()?.as_str()))
        });
    (controller, pool_store, cm_store, slice_store)
}

/// Starts the watch of the workers' Leases: `controller` with its trigger, and the cache.
fn watch_leases(
    controller: Controller<SwarmPool>,
    scope: &WatchScope,
) -> (Controller<SwarmPool>, Store<CachedLease>) {
    let (lease_store, leases) = scope.compact::<LeaseSummary>(
        watcher::Config::default().labels(POOL_LABEL),
        trim::lease,
        Cache::Leases,
    );
    // A worker writes its Lease only to acknowledge, and an acknowledgement may free jobs in
    // transit: every change wakes the Lease's pool.
    let lease_changes = leases.filter_map(|event| {
        let lease = match event {
            Ok(
                watcher::Event::Apply(lease)
                | watcher::Event::InitApply(lease)
                | watcher::Event::Delete(lease),
            ) => Some(lease),
            _ => None,
        };
        std::future::ready(lease.map(Ok::<_, watcher::Error>))
    });
    let controller = controller.watches_stream(lease_changes, |lease| {
        let pool = lease.pool.as_deref()?;
        Some(ObjectRef::new(pool).within(lease.namespace()?.as_str()))
    });
    (controller, lease_store)
}

/// The namespace of the kubelets' node Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Starts the watch of the kubelets' node Leases, for an operator of every namespace (one of a
/// single namespace may not read them, and goes by its workers' readiness alone).
fn watch_node_leases(
    controller: Controller<SwarmPool>,
    scope: &WatchScope,
) -> (Controller<SwarmPool>, Option<Store<CachedLease>>) {
    if scope.namespace.is_some() {
        return (controller, None);
    }
    let api = Api::namespaced(scope.client.clone(), NODE_LEASE_NAMESPACE);
    let (store, leases) = compact_cached_watch::<LeaseSummary>(
        api,
        watcher::Config::default(),
        trim::lease,
        Cache::NodeLeases,
        scope.health,
    );
    // The controller polls the watch; a renewal wakes no pool: a pool whose workers run on a
    // node looks again when that node's Lease would turn silent (see `Membership`).
    let never =
        leases.filter_map(|_| std::future::ready(None::<Result<LeaseSummary, watcher::Error>>));
    let controller =
        controller.watches_stream(never, |_: LeaseSummary| None::<ObjectRef<SwarmPool>>);
    (controller, Some(store))
}

/// Starts the watch of the ConfigMaps pools read jobs from, in a watch of their own (see
/// [`jobs_sources`]): `controller` with its trigger, and the cache.
fn watch_jobs_sources(
    controller: Controller<SwarmPool>,
    scope: &WatchScope,
    pools: &Store<SwarmPool>,
) -> (Controller<SwarmPool>, Store<ConfigMap>) {
    let (jobs_source_store, jobs_source_maps) = scope.cached(
        watcher::Config::default().labels(JOBS_SOURCE_LABEL),
        trim::jobs_source,
        Cache::JobsSources,
    );
    let by_source = pools.clone();
    let controller = controller.watches_stream(jobs_source_maps.touched_objects(), move |cm| {
        jobs_sources::pools_for_jobs_source(&by_source.state(), &cm)
    });
    (controller, jobs_source_store)
}

/// Wires one workload kind's triggers: a change to one of its workloads wakes the pools of the
/// kind that select it or reported it, a change to one of its pods the pools `caches` map it
/// to ([`WatchedWorkload::pools_for_pod`]).
pub(super) fn workload_triggers<C: WatchedWorkload>(
    controller: Controller<SwarmPool>,
    pools: &Store<SwarmPool>,
    caches: &C,
    workloads: impl Stream<Item = watcher::Result<watcher::Event<C::Workload>>> + Send + 'static,
    pods: impl Stream<Item = watcher::Result<watcher::Event<PodSummary>>> + Send + 'static,
) -> Controller<SwarmPool>
where
    C::Workload: Resource<DynamicType = ()> + Serialize + Clone + DeserializeOwned + Debug + Send,
{
    let by_workload = pools.clone();
    let by_pod = (pools.clone(), caches.clone());
    let workloads = changes_only(workloads, changes::content);
    let pods = changes_only(pods, changes::pod);
    controller
        .watches_stream(workloads.touched_objects(), move |workload| {
            pools_for_workload(&by_workload.state(), &workload)
        })
        .watches_stream(pods.touched_objects(), move |pod| {
            let (pools, caches) = &by_pod;
            caches.pools_for_pod(&pools.state(), &pod)
        })
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
pub(super) fn changes_only<K: Resource>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    fingerprint: impl Fn(&K) -> u64,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> {
    let mut keep = changes::only_changes(fingerprint);
    events.filter(move |event| std::future::ready(event.as_ref().is_ok_and(&mut keep)))
}

/// What a pool's reconcile reads of it: its metadata (its `generation` stands for its spec) and
/// its status, unless that is the status this operator last wrote, whose arrival changes
/// nothing.
pub(super) fn pool_fingerprint(pool: &SwarmPool, written: &Written) -> u64 {
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
pub(super) fn record_health<K>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::{LastWrites, StatusWrite};
    use crate::controller::triggers::tests::pool;

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
}
