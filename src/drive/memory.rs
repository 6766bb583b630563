//! A cluster in memory, for the what-if commands and the tests: the API server's side of the
//! round protocol (fenced server-side apply, live lists by name, uid-preconditioned deletes)
//! over a ConfigMap and a list of pods that its owner changes between reconciles.

use std::collections::BTreeSet;
use std::future::{Future, ready};
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Cluster, Deleted, SliceWrite, SliceWritten, Unsettled, Written};
use crate::planner::rollout::PodDelete;
use crate::state::cached::{Cacheable, CachedPod};
use crate::state::config_map::pool_config;
use crate::state::lease::{Ack, Acks};
use crate::state::pod_summary::PodSummary;
use crate::state::revokes::{RevokeLog, RevokeWaits};
use crate::state::slice_summary::SliceSummary;
use swarm_protocol::config::{CONFIG_KEY, WorkerConfig};
use swarm_protocol::slices::INDEX_KEY;

/// The API objects one pool's reconcile touches.
#[derive(Clone, Debug, Default)]
pub struct MemoryCluster {
    /// The time the planner decides at.
    pub now: Timestamp,
    /// The operator's monotonic clock (`None`: the process's own): the revoke waits run on it.
    pub instant: Option<Instant>,
    /// Since when the operator has known each worker's ConfigMap to show each version: one
    /// operator process's memory, lost when it restarts.
    pub revokes: RevokeLog,
    /// The pool exists (false: it was deleted since the caches saw it).
    pub pool_exists: bool,
    /// The pool's ConfigMap.
    pub config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps.
    pub slices: Vec<ConfigMap>,
    /// The pods of the pool's namespace as the API server has them.
    pub pods: Vec<PodSummary>,
    /// Every write of the pool's ConfigMap that went through, as written, in order.
    pub written: Vec<ConfigMap>,
    /// Every write of a worker's own ConfigMap that went through, in order (`None`: a delete).
    pub slices_written: Vec<(String, Option<ConfigMap>)>,
    /// The worker config after each write or batch of writes that went through.
    pub configs: Vec<WorkerConfig>,
    /// Every delete asked for, whether or not it found its pod.
    pub delete_requests: Vec<PodDelete>,
    /// Live lists served.
    pub live_lists: usize,
    /// When set, the operator process dies right after this many more writes and deletes:
    /// the action is done, its caller sees [`MemoryError::Crashed`].
    pub crash_after: Option<usize>,
    /// How long each write (or batch of workers' ConfigMap writes) takes: both clocks advance
    /// by it, as under an API server that answers slowly.
    pub write_takes: SignedDuration,
    /// The acknowledgements as the operator's Lease cache holds them at the start, and the
    /// workers (pod, instance uid) that acknowledge each of their entries as soon as it is
    /// written; `None`: nothing is acknowledged during a reconcile.
    pub acking: Option<(Acks, Vec<(String, String)>)>,
}

/// Why an action on a [`MemoryCluster`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The operator process died (see [`MemoryCluster::crash_after`]).
    #[error("the operator crashed")]
    Crashed,
    /// The rounds did not settle.
    #[error(transparent)]
    Unsettled(#[from] Unsettled),
}

impl MemoryCluster {
    /// A cluster with the pool, at `now`.
    pub fn new(now: Timestamp) -> Self {
        MemoryCluster {
            now,
            pool_exists: true,
            ..MemoryCluster::default()
        }
    }

    /// Counts a write or delete against [`MemoryCluster::crash_after`].
    fn survive(&mut self) -> Result<(), MemoryError> {
        if let Some(left) = &mut self.crash_after {
            *left = left.saturating_sub(1);
            if *left == 0 {
                return Err(MemoryError::Crashed);
            }
        }
        Ok(())
    }

    fn next_resource_version(&self) -> String {
        let last = self
            .config_map
            .iter()
            .chain(&self.slices)
            .filter_map(|cm| cm.metadata.resource_version.as_deref()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        (last + 1).to_string()
    }

    /// A write took [`MemoryCluster::write_takes`].
    fn take_time(&mut self) {
        self.now += self.write_takes;
        if let Some(instant) = &mut self.instant {
            *instant += self.write_takes.unsigned_abs();
        }
    }

    /// Records the worker config as it now is.
    fn record_config(&mut self) {
        let config = self
            .config_map
            .as_ref()
            .and_then(|cm| pool_config(cm, &self.slice_summaries()));
        self.configs.extend(config);
    }

    /// The workers' own ConfigMaps as the operator reads them.
    pub fn slice_summaries(&self) -> Vec<SliceSummary> {
        self.slices.iter().map(SliceSummary::from).collect()
    }

    /// One slice write, as the API server would take it.
    fn write_slice(&mut self, write: SliceWrite) -> Result<SliceWritten, MemoryError> {
        let at = self
            .slices
            .iter()
            .position(|cm| cm.metadata.name.as_deref() == Some(write.name.as_str()));
        let now = at.map(|i| self.slices[i].clone());
        let version = write.based_on.as_ref();
        if version
            != now
                .as_ref()
                .and_then(|cm| cm.metadata.resource_version.as_ref())
        {
            return Ok(SliceWritten::Conflict(now.as_ref().map(SliceSummary::from)));
        }
        let resource_version = self.next_resource_version();
        let result = match write.desired {
            Some(desired) => {
                let mut applied = now;
                server_side_apply(&mut applied, desired);
                let mut applied = applied.expect("just applied");
                applied.metadata.resource_version = Some(resource_version);
                match at {
                    Some(i) => self.slices[i] = applied.clone(),
                    None => self.slices.push(applied.clone()),
                }
                self.slices_written
                    .push((write.name, Some(applied.clone())));
                SliceWritten::Applied(Some(SliceSummary::from(&applied)))
            }
            None => {
                if let Some(i) = at {
                    self.slices.remove(i);
                }
                self.slices_written.push((write.name, None));
                SliceWritten::Applied(None)
            }
        };
        self.survive().map(|()| result)
    }
}

impl Cluster for MemoryCluster {
    type Error = MemoryError;

    fn now(&self) -> Timestamp {
        self.now
    }

    fn pool_is_live(&mut self) -> impl Future<Output = Result<bool, MemoryError>> + Send {
        ready(Ok(self.pool_exists))
    }

    fn write(
        &mut self,
        current: Option<&ConfigMap>,
        desired: ConfigMap,
    ) -> impl Future<Output = Result<Written, MemoryError>> + Send {
        let fenced =
            |cm: Option<&ConfigMap>| cm.and_then(|cm| cm.metadata.resource_version.clone());
        let result = if fenced(current) != fenced(self.config_map.as_ref())
            || current.is_none() != self.config_map.is_none()
        {
            Ok(Written::Conflict)
        } else {
            let version = self.next_resource_version();
            self.written.push(desired.clone());
            server_side_apply(&mut self.config_map, desired);
            if let Some(cm) = &mut self.config_map {
                cm.metadata.resource_version = Some(version);
            }
            let applied = self.config_map.clone().expect("just applied");
            self.record_config();
            self.take_time();
            self.survive().map(|()| Written::Applied(applied))
        };
        ready(result)
    }

    fn read(&mut self) -> impl Future<Output = Result<Option<ConfigMap>, MemoryError>> + Send {
        ready(Ok(self.config_map.clone()))
    }

    fn list_live(
        &mut self,
        names: &BTreeSet<String>,
    ) -> impl Future<Output = Result<Vec<CachedPod>, MemoryError>> + Send {
        self.live_lists += 1;
        let pods = self
            .pods
            .iter()
            .filter(|pod| {
                pod.metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| names.contains(name))
            })
            .map(Cacheable::cached)
            .collect();
        ready(Ok(pods))
    }

    fn revoke_waits<'s>(&mut self, slices: impl Iterator<Item = &'s SliceSummary>) -> RevokeWaits {
        let now = self.instant.unwrap_or_else(Instant::now);
        self.revokes.note(slices, now);
        self.revokes.at(now)
    }

    fn acks(&mut self) -> Option<Acks> {
        let (cached, acking) = self.acking.as_ref()?;
        let mut acks = cached.clone();
        if let Some(config) = self.configs.last() {
            for (pod, uid) in acking {
                let version = config.workload(pod).map_or(config.version, |w| w.version);
                let ack = Ack {
                    holder: uid.clone(),
                    version,
                };
                acks.insert(pod.clone(), ack);
            }
        }
        Some(acks)
    }

    fn list_slices(
        &mut self,
    ) -> impl Future<Output = Result<Vec<SliceSummary>, MemoryError>> + Send {
        self.live_lists += 1;
        ready(Ok(self.slice_summaries()))
    }

    fn write_slices(
        &mut self,
        batch: Vec<SliceWrite>,
    ) -> impl Future<Output = Result<Vec<SliceWritten>, MemoryError>> + Send {
        let results = batch
            .into_iter()
            .map(|write| self.write_slice(write))
            .collect();
        self.record_config();
        self.take_time();
        ready(results)
    }

    fn delete(
        &mut self,
        delete: &PodDelete,
    ) -> impl Future<Output = Result<Deleted, MemoryError>> + Send {
        self.delete_requests.push(delete.clone());
        let now = self.now;
        let found = self.pods.iter_mut().find(|p| {
            p.metadata.name.as_deref() == Some(delete.name.as_str())
                && p.metadata.uid.as_deref() == Some(delete.uid.as_str())
        });
        let deleted = match found {
            Some(pod) => {
                pod.metadata.deletion_timestamp.get_or_insert(Time(now));
                Deleted::Deleted
            }
            None => Deleted::AlreadyGone,
        };
        ready(self.survive().map(|()| deleted))
    }
}

/// Runs a reconcile to its end: every future of a [`MemoryCluster`] is ready at once.
pub fn block_on<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// The API server's server-side apply of the operator's fields onto `current` (created when
/// there is none): data, labels and annotations merge by key (the config keys the operator
/// stops setting are removed), owner references by uid, and everything else is kept.
pub fn server_side_apply(current: &mut Option<ConfigMap>, desired: ConfigMap) {
    let cm = current.get_or_insert_with(|| ConfigMap {
        metadata: ObjectMeta {
            name: desired.metadata.name.clone(),
            namespace: desired.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    let data = cm.data.get_or_insert_default();
    // The keys that hold the config are the operator's: one it no longer sets is removed, as
    // server-side apply removes a field its manager stops applying.
    let desired_data = desired.data.unwrap_or_default();
    for key in [CONFIG_KEY, INDEX_KEY] {
        if !desired_data.contains_key(key) {
            data.remove(key);
        }
    }
    data.extend(desired_data);
    cm.metadata
        .labels
        .get_or_insert_default()
        .extend(desired.metadata.labels.unwrap_or_default());
    cm.metadata
        .annotations
        .get_or_insert_default()
        .extend(desired.metadata.annotations.unwrap_or_default());
    let refs = cm.metadata.owner_references.get_or_insert_default();
    for r in desired.metadata.owner_references.unwrap_or_default() {
        if !refs.iter().any(|have| have.uid == r.uid) {
            refs.push(r);
        }
    }
}
