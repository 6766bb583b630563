//! The round protocol's cluster over kube: the snapshot a reconcile starts from (the caches)
//! and the requests its steps make (fenced ConfigMap writes, live pod lists, uid-preconditioned
//! deletes), each checked against this replica's leadership.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;
use swarm_protocol::names::{HANDOFF_ANNOTATION, PENDING_REFRESH_ANNOTATION, VERSION_ANNOTATION};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info};

use super::context::pool_objects;
use super::turns::Turn;
use super::workloads::{WorkloadSnapshot, Workloads};
use super::{Context, fenced_write};
use crate::Error;
use crate::api::crd::{RolloutPolicy, SwarmPool};
use crate::drive::{Cluster, Deleted, SliceWrite, SliceWritten, Written};
use crate::planner::Observed;
use crate::planner::rollout::PodDelete;
use crate::runtime::pool_metrics::PoolCounter;
use crate::state::cached::{Cacheable, CachedPod};
use crate::state::jobs_source::Unresolved;
use crate::state::lease::Acks;
use crate::state::node_leases::NodeLeases;
use crate::state::pod_summary::PodSummary;
use crate::state::revokes::RevokeWaits;
use crate::state::slice_summary::SliceSummary;
use crate::state::trim;
use swarm_protocol::names::{MANAGER, POOL_LABEL, WORKER_LABEL};

/// How many of one pool's workers' ConfigMaps are written at once.
const SLICE_WRITES_AT_ONCE: usize = 16;

/// How many workers' ConfigMaps the whole operator writes at once, over all reconciles. The
/// client speaks HTTP/1.1, so each request in flight holds a connection of its own, and the
/// pool keeps each connection it opened, with its TLS and read buffers, for 90 s after its last
/// use: eight reconciles writing 16 each held about 140 connections through a rollout.
pub(super) const SLICE_WRITES_IN_FLIGHT: usize = 32;

/// How many workers' ConfigMaps one page of a live list holds.
const SLICES_PER_PAGE: u32 = 250;

/// Sends `batch`, up to [`SLICE_WRITES_AT_ONCE`] at a time, each within the operator's
/// [`SLICE_WRITES_IN_FLIGHT`].
async fn send_slice_writes(
    ctx: &Context,
    config_maps: &Api<ConfigMap>,
    slices: &Api<SliceSummary>,
    batch: Vec<SliceWrite>,
) -> Result<Vec<SliceWritten>, Error> {
    let results: Vec<Result<SliceWritten, Error>> = futures::stream::iter(batch)
        .map(|write| async move {
            let _permit = ctx
                .slice_writes
                .acquire()
                .await
                .expect("the slice write permits are never closed");
            // The permit may have come after this replica lost its lease.
            ctx.may_write()?;
            write_slice(config_maps, slices, write).await
        })
        .buffered(SLICE_WRITES_AT_ONCE)
        .collect()
        .await;
    let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let applied = results
        .iter()
        .filter(|r| matches!(r, SliceWritten::Applied(_)))
        .count();
    ctx.metrics.config_writes.inc_by(applied as u64);
    debug!(applied, "wrote workers' ConfigMaps");
    Ok(results)
}

/// One write of a worker's own ConfigMap, fenced by the copy it was planned on: a create when
/// there was none (which fails if one exists by then), else an apply over that copy's
/// resourceVersion, or a delete with it as precondition. A conflict reads what is there now.
/// Responses are read as [`SliceSummary`]: a pool's first rollout writes one per worker.
async fn write_slice(
    config_maps: &Api<ConfigMap>,
    api: &Api<SliceSummary>,
    write: SliceWrite,
) -> Result<SliceWritten, Error> {
    let SliceWrite {
        name,
        based_on,
        desired,
    } = write;
    let result = match (desired, based_on) {
        (Some(desired), None) => {
            let params = PostParams {
                field_manager: Some(MANAGER.to_owned()),
                ..PostParams::default()
            };
            config_maps
                .create(&params, &desired)
                .await
                .map(|cm| Some(SliceSummary::from(&cm)))
        }
        (Some(mut desired), Some(version)) => {
            desired.metadata.resource_version = Some(version);
            let params = PatchParams::apply(MANAGER).force();
            api.patch(&name, &params, &Patch::Apply(&desired))
                .await
                .map(Some)
        }
        (None, version) => {
            let params = DeleteParams::default().preconditions(Preconditions {
                uid: None,
                resource_version: version,
            });
            match api.delete(&name, &params).await {
                Ok(_) => Ok(None),
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
                Err(error) => Err(error),
            }
        }
    };
    match result {
        Ok(now) => Ok(SliceWritten::Applied(now.map(|mut cm| {
            trim::slice(&mut cm);
            cm
        }))),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
            debug!(configmap = %name, "worker's ConfigMap changed since read; planning again");
            let now = api
                .get_opt(&name)
                .await
                .map_err(|source| Error::GetConfigMap {
                    name: name.clone(),
                    source,
                })?;
            Ok(SliceWritten::Conflict(now.map(|mut cm| {
                trim::slice(&mut cm);
                cm
            })))
        }
        Err(source) => Err(Error::ApplyConfigMap { name, source }),
    }
}

/// What the caches hold for one pool's namespace, for the planner.
pub(super) struct Snapshot<'a> {
    pool: &'a SwarmPool,
    jobs_unresolved: Option<&'a Unresolved>,
    workloads: WorkloadSnapshot,
    other_pools: Vec<Arc<SwarmPool>>,
    config_map: Option<ConfigMap>,
    worker_config_maps: Vec<SliceSummary>,
    deleting: BTreeSet<String>,
    acks: Acks,
    node_leases: NodeLeases,
    /// The drive replaces it in every round with the revoke clock's reading.
    revokes: RevokeWaits,
}

impl<'a> Snapshot<'a> {
    /// `pool` with its jobs resolved, or why they could not be.
    pub(super) fn of(
        ctx: &Context,
        pool: &'a SwarmPool,
        jobs_unresolved: Option<&'a Unresolved>,
        namespace: &str,
        config_map: Option<ConfigMap>,
    ) -> Self {
        let here = |meta: &kube::api::ObjectMeta| meta.namespace.as_deref() == Some(namespace);
        Snapshot {
            pool,
            jobs_unresolved,
            workloads: ctx.workloads.snapshot(namespace),
            other_pools: ctx
                .pools
                .state_filter(|p| here(&p.metadata) && p.metadata.uid != pool.metadata.uid),
            config_map,
            worker_config_maps: pool_objects(&ctx.worker_config_maps, namespace, &pool.name_any()),
            deleting: ctx.deleting(&ObjectRef::from_obj(pool)),
            acks: if pool.spec.rollout.policy == RolloutPolicy::Acknowledge {
                ctx.acks(namespace, &pool.name_any())
            } else {
                Acks::default()
            },
            node_leases: ctx.node_leases(),
            revokes: RevokeWaits::default(),
        }
    }

    pub(super) fn observed(&self) -> Observed<'_> {
        let mut observed = Observed {
            pool: self.pool,
            jobs_unresolved: self.jobs_unresolved,
            // Filled from the workload snapshot below.
            statefulsets: Vec::new(),
            deployments: Vec::new(),
            replica_sets: Vec::new(),
            pods: Vec::new(),
            other_pools: self.other_pools.iter().map(AsRef::as_ref).collect(),
            pods_are_live: false,
            config_map: self.config_map.as_ref(),
            worker_config_maps: self.worker_config_maps.iter().collect(),
            slices_are_live: false,
            deleting: &self.deleting,
            acks: &self.acks,
            revokes: &self.revokes,
            node_leases: &self.node_leases,
            now: Timestamp::now(),
        };
        self.workloads.fill(&mut observed);
        observed
    }
}

/// The round protocol's actions for one pool, as requests to the API server. Every write and
/// delete first checks that this replica still leads.
pub(super) struct KubeCluster<'a> {
    ctx: &'a Context,
    pool: &'a SwarmPool,
    key: ObjectRef<SwarmPool>,
    namespace: &'a str,
    config_map_name: String,
    config_maps: Api<ConfigMap>,
    slices: Api<SliceSummary>,
    pods: Api<PodSummary>,
    /// This reconcile's turn, lent out during a large batch of writes.
    turn: Turn<'a>,
}

impl<'a> KubeCluster<'a> {
    pub(super) fn new(
        ctx: &'a Context,
        pool: &'a SwarmPool,
        namespace: &'a str,
        turn: Turn<'a>,
    ) -> Self {
        KubeCluster {
            turn,
            ctx,
            pool,
            key: ObjectRef::from_obj(pool),
            namespace,
            config_map_name: pool.config_map_name(),
            config_maps: Api::namespaced(ctx.client.clone(), namespace),
            slices: Api::namespaced(ctx.client.clone(), namespace),
            pods: Api::namespaced(ctx.client.clone(), namespace),
        }
    }
}

impl KubeCluster<'_> {
    /// The ConfigMap a reconcile starts from: as of this operator's last write, from the cache
    /// when it holds that write, else from the API server.
    pub(super) async fn starting_config_map(&mut self) -> Result<Option<ConfigMap>, Error> {
        match self
            .ctx
            .current_cached_config_map(&self.key, &self.config_map_name)
        {
            Some(cached) => Ok(Some(cached)),
            None => self.read().await,
        }
    }
}

impl Cluster for KubeCluster<'_> {
    type Error = Error;

    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    /// The caches can lag: the deletion of a pool's ConfigMap (by the garbage collector, after
    /// the pool is gone) may be seen before the deletion of the pool itself.
    async fn pool_is_live(&mut self) -> Result<bool, Error> {
        let pools: Api<SwarmPool> = Api::namespaced(self.ctx.client.clone(), self.namespace);
        let name = self.pool.name_any();
        let live = pools
            .get_opt(&name)
            .await
            .map_err(|source| Error::GetPool { name, source })?;
        Ok(live.is_some_and(|live| {
            live.metadata.uid == self.pool.metadata.uid
                && live.metadata.deletion_timestamp.is_none()
        }))
    }

    async fn write(
        &mut self,
        current: Option<&ConfigMap>,
        desired: ConfigMap,
    ) -> Result<Written, Error> {
        self.ctx.may_write()?;
        let applied = match fenced_write::write_config_map(&self.config_maps, current, desired)
            .await
        {
            Ok(applied) => applied,
            // Planned on a copy that is no longer current (or on "none" while one the cache
            // does not hold exists).
            Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
                debug!(configmap = %self.config_map_name, "ConfigMap changed since read; planning again");
                return Ok(Written::Conflict);
            }
            Err(source) => {
                return Err(Error::ApplyConfigMap {
                    name: self.config_map_name.clone(),
                    source,
                });
            }
        };
        self.ctx.remember_written(&self.key, &applied);
        self.ctx.metrics.config_writes.inc();
        let annotation = |key: &str| applied.annotations().get(key).cloned();
        info!(
            configmap = %self.config_map_name,
            version = annotation(VERSION_ANNOTATION),
            stale = annotation(PENDING_REFRESH_ANNOTATION),
            holders = annotation(HANDOFF_ANNOTATION),
            "wrote ConfigMap"
        );
        Ok(Written::Applied(applied))
    }

    async fn read(&mut self) -> Result<Option<ConfigMap>, Error> {
        let name = &self.config_map_name;
        self.config_maps
            .get_opt(name)
            .await
            .map_err(|source| Error::GetConfigMap {
                name: name.clone(),
                source,
            })
    }

    /// The pods by the selector of the pool's workload kind
    /// ([`super::workloads::WatchedWorkload::live_pods_selector`]), the named ones kept.
    async fn list_live(&mut self, names: &BTreeSet<String>) -> Result<Vec<CachedPod>, Error> {
        let kind = self.pool.spec.workload_kind;
        let Some(selector) = Workloads::live_pods_selector(kind, names) else {
            return Ok(Vec::new());
        };
        let list = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|source| Error::ListPods {
                namespace: self.namespace.to_owned(),
                source,
            })?;
        Ok(list
            .items
            .into_iter()
            .filter(|pod| {
                pod.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| names.contains(n))
            })
            .map(|pod| pod.cached())
            .collect())
    }

    fn revoke_waits<'s>(&mut self, slices: impl Iterator<Item = &'s SliceSummary>) -> RevokeWaits {
        self.ctx.revokes.waits(
            self.namespace,
            &self.pool.name_any(),
            slices,
            Instant::now(),
        )
    }

    /// From the Lease cache, which fills while a reconcile writes.
    fn acks(&mut self) -> Option<Acks> {
        (self.pool.spec.rollout.policy == RolloutPolicy::Acknowledge)
            .then(|| self.ctx.acks(self.namespace, &self.pool.name_any()))
    }

    /// In pages of [`SLICES_PER_PAGE`]: one response of a 1,000-worker pool's ConfigMaps is
    /// several MiB of text, held whole while it is read.
    async fn list_slices(&mut self) -> Result<Vec<SliceSummary>, Error> {
        let selector = format!("{POOL_LABEL}={},{WORKER_LABEL}", self.pool.name_any());
        let mut params = ListParams::default()
            .labels(&selector)
            .limit(SLICES_PER_PAGE);
        let mut slices = Vec::new();
        loop {
            let page = self
                .slices
                .list(&params)
                .await
                .map_err(|source| Error::GetConfigMap {
                    name: selector.clone(),
                    source,
                })?;
            slices.extend(page.items.into_iter().map(|mut cm| {
                trim::slice(&mut cm);
                cm
            }));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(slices),
            }
        }
    }

    /// A first rollout writes one per worker.
    async fn write_slices(&mut self, batch: Vec<SliceWrite>) -> Result<Vec<SliceWritten>, Error> {
        self.ctx.may_write()?;
        // A first rollout of 1,000 workers writes for minutes: other pools plan meanwhile (the
        // writes themselves share SLICE_WRITES_IN_FLIGHT).
        if batch.len() <= SLICE_WRITES_AT_ONCE {
            return send_slice_writes(self.ctx, &self.config_maps, &self.slices, batch).await;
        }
        let writes = send_slice_writes(self.ctx, &self.config_maps, &self.slices, batch);
        self.turn.lent_during(writes).await
    }

    async fn delete(&mut self, delete: &PodDelete) -> Result<Deleted, Error> {
        self.ctx.may_write()?;
        let params = DeleteParams::default().preconditions(Preconditions {
            uid: Some(delete.uid.clone()),
            resource_version: None,
        });
        let deleted = match self.pods.delete(&delete.name, &params).await {
            Ok(_) => {
                let pool = self.pool.name_any();
                self.ctx.metrics.refreshed(self.namespace, &pool);
                // Under Acknowledge a pod is deleted only when its worker did not acknowledge.
                if self.pool.spec.rollout.policy == RolloutPolicy::Acknowledge {
                    let fallback = PoolCounter::AckFallbackDeletes;
                    self.ctx.metrics.count(fallback, self.namespace, &pool);
                }
                info!(pod = %delete.name, uid = %delete.uid, "deleted stale worker pod");
                Deleted::Deleted
            }
            // Gone or already replaced by a new instance: that is what the delete was for.
            Err(kube::Error::Api(status)) if status.is_not_found() || status.is_conflict() => {
                debug!(pod = %delete.name, uid = %delete.uid, "stale worker pod already replaced");
                Deleted::AlreadyGone
            }
            Err(source) => {
                return Err(Error::DeletePod {
                    name: delete.name.clone(),
                    source,
                });
            }
        };
        self.ctx
            .remember_deleting(&self.key, &delete.name, &delete.uid);
        Ok(deleted)
    }
}
