//! A cluster in memory, for the what-if commands and the tests: the API server's side of the
//! round protocol (fenced server-side apply, live lists by name, uid-preconditioned deletes)
//! over a ConfigMap and a list of pods that its owner changes between reconciles.

use std::collections::BTreeSet;
use std::future::{Future, ready};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::{Cluster, Deleted, Unsettled, Written};
use crate::pod_summary::PodSummary;
use crate::rollout::PodDelete;

/// The API objects one pool's reconcile touches.
#[derive(Clone, Debug, Default)]
pub struct MemoryCluster {
    /// The time the planner decides at.
    pub now: Timestamp,
    /// The pool exists (false: it was deleted since the caches saw it).
    pub pool_exists: bool,
    /// The pool's ConfigMap.
    pub config_map: Option<ConfigMap>,
    /// The pods of the pool's namespace as the API server has them.
    pub pods: Vec<PodSummary>,
    /// The pool's worker Leases as the API server has them.
    pub leases: Vec<Lease>,
    /// Every ConfigMap write that went through, as written, in order.
    pub written: Vec<ConfigMap>,
    /// Every delete asked for, whether or not it found its pod.
    pub delete_requests: Vec<PodDelete>,
    /// Live lists served.
    pub live_lists: usize,
    /// When set, the operator process dies right after this many more writes and deletes:
    /// the action is done, its caller sees [`MemoryError::Crashed`].
    pub crash_after: Option<usize>,
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
            .as_ref()
            .and_then(|cm| cm.metadata.resource_version.as_deref())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        (last + 1).to_string()
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
    ) -> impl Future<Output = Result<Vec<PodSummary>, MemoryError>> + Send {
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
            .cloned()
            .collect();
        ready(Ok(pods))
    }

    fn live_leases(&mut self) -> impl Future<Output = Result<Vec<Lease>, MemoryError>> + Send {
        self.live_lists += 1;
        ready(Ok(self.leases.clone()))
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
/// there is none): data, labels and annotations merge by key, owner references by uid, and
/// everything else is kept.
pub fn server_side_apply(current: &mut Option<ConfigMap>, desired: ConfigMap) {
    let cm = current.get_or_insert_with(|| ConfigMap {
        metadata: ObjectMeta {
            name: desired.metadata.name.clone(),
            namespace: desired.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    cm.data
        .get_or_insert_default()
        .extend(desired.data.unwrap_or_default());
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
