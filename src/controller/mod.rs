//! The controller: watches, caches, the reconcile loop and its error policy.
//!
//! Triggers: SwarmPools; ConfigMaps they own, and those they read jobs from
//! ([`jobs_sources`]); workloads and their pods, mapped to the pools that select them (a pod
//! through its controlling StatefulSet, or through its ReplicaSet's Deployment). Everything
//! is read from reflector caches that feed the same streams that trigger reconciles, so a
//! reconcile never runs on a cache older than its trigger, and an idle operator sends no
//! requests. The caches keep only what the planner reads ([`crate::state::trim`]).
//!
//! The ConfigMap holds the config version and the rollout bookkeeping, so a decision must not
//! be taken on a copy older than this operator's own last write: the cached copy is used when
//! it is that write (or there was none), and read with a GET otherwise. Every write is fenced
//! by the copy it was decided on, so a decision on a stale copy fails with a conflict, and the
//! reconcile reads the ConfigMap again and decides anew.
//!
//! The modules: `watches` (the watches, their caches and triggers), `workloads` (one module
//! per workload kind: its caches, watches, pod mapping and live list), `triggers` (which pools
//! a workload or its pods wake, for every kind), `context` (what is remembered of each pool
//! between reconciles), `reconcile` (one reconcile, its status and its retries), `turns`
//! (the fair turns reconciles take), `events`,
//! and `kube_cluster` (the round protocol's requests over kube).

pub mod changes;
mod context;
mod events;
pub mod fenced_write;
pub mod jobs_sources;
mod kube_cluster;
mod reconcile;
pub mod relisting_watch;
pub mod revoke_clock;
mod triggers;
mod turns;
mod watches;
mod workloads;

use std::sync::{Arc, Mutex};
use swarm_protocol::names::MANAGER;

use futures::StreamExt;
use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::Semaphore;
use tracing::{debug, info};

use crate::runtime::http::HttpState;
use crate::runtime::leader::LeaseGuard;
use crate::runtime::metrics::Metrics;
use context::Written;
use revoke_clock::RevokeClock;

pub use context::Context;
pub use reconcile::backoff_delay;

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
    let (controller, caches) = watches::watch(&client, ns, &metrics, &health, &written);

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
            controller: MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        },
        pools: caches.pools,
        workloads: caches.workloads,
        config_maps: caches.config_maps,
        worker_config_maps: caches.worker_config_maps,
        jobs_sources: caches.jobs_sources,
        leases: caches.leases,
        node_leases: caches.node_leases,
        health,
        metrics,
        failures: Mutex::default(),
        deleting: Mutex::default(),
        written,
        revokes: RevokeClock::default(),
        lease,
        turns: turns::Turns::new(usize::from(concurrency)),
        slice_writes: Semaphore::new(kube_cluster::SLICE_WRITES_IN_FLIGHT),
    });
    controller
        .reconcile_all_on(health_changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, context)
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
