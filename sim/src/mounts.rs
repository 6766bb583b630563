//! What each pod instance mounted when it started, served at `GET /kube-sim/v1/mounts`.
//!
//! The kubelet stand-in snapshots every ConfigMap a pod mounts at the moment its containers
//! start, the way a worker reads its configuration once at start-up. Tests compare these
//! snapshots with what the operator intended each worker to run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

/// Path of the inspection endpoint.
pub const MOUNTS_PATH: &str = "/kube-sim/v1/mounts";

/// The content of one mounted ConfigMap as of the pod's start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MountedConfigMap {
    /// The ConfigMap's `metadata.resourceVersion` when it was read.
    pub resource_version: String,
    /// The keys the volume projects (all of `data` unless the volume lists `items`).
    pub data: BTreeMap<String, String>,
}

/// One started pod instance and the ConfigMaps it mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMounts {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub pod: String,
    /// `metadata.uid` of this pod instance; a re-created pod is a new entry.
    pub uid: String,
    /// When the containers started (RFC 3339), equal to the pod's `status.startTime`.
    pub started_at: String,
    /// Mounted ConfigMaps by name; an optional volume whose ConfigMap was missing is absent.
    pub config_maps: BTreeMap<String, MountedConfigMap>,
}

/// Shared record of the mounts of every live, started pod, keyed by pod uid.
#[derive(Clone, Default)]
pub struct Mounts {
    by_uid: Arc<Mutex<BTreeMap<String, PodMounts>>>,
}

impl Mounts {
    /// Records (or replaces) the mounts of one pod instance.
    pub fn record(&self, mounts: PodMounts) {
        self.lock().insert(mounts.uid.clone(), mounts);
    }

    /// Drops the record of a pod instance that no longer exists.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Keeps only the records whose uid satisfies `live`.
    pub fn retain(&self, mut live: impl FnMut(&str) -> bool) {
        self.lock().retain(|uid, _| live(uid));
    }

    /// The mounts of one pod instance, if it has started.
    pub fn get(&self, uid: &str) -> Option<PodMounts> {
        self.lock().get(uid).cloned()
    }

    /// Every record, ordered by namespace, then pod name, then uid.
    pub fn snapshot(&self) -> Vec<PodMounts> {
        let mut all: Vec<PodMounts> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| (&a.namespace, &a.pod, &a.uid).cmp(&(&b.namespace, &b.pod, &b.uid)));
        all
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PodMounts>> {
        // A panic while holding the lock cannot leave the map half-written: every mutation is
        // a single insert or remove, so the poisoned data is still consistent.
        self.by_uid
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The router serving `GET /kube-sim/v1/mounts` as a JSON list of [`PodMounts`].
pub fn routes(mounts: Mounts) -> Router {
    Router::new()
        .route(MOUNTS_PATH, get(list_mounts))
        .with_state(mounts)
}

async fn list_mounts(State(mounts): State<Mounts>) -> Json<Vec<PodMounts>> {
    Json(mounts.snapshot())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str) -> PodMounts {
        PodMounts {
            namespace: ns.into(),
            pod: name.into(),
            uid: uid.into(),
            started_at: "2024-01-01T00:00:00Z".into(),
            config_maps: BTreeMap::from([(
                "cfg".to_string(),
                MountedConfigMap {
                    resource_version: "7".into(),
                    data: BTreeMap::from([("config.yml".to_string(), "jobs: []".to_string())]),
                },
            )]),
        }
    }

    #[test]
    fn snapshot_is_ordered_by_namespace_then_pod() {
        let mounts = Mounts::default();
        mounts.record(pod("b", "w-0", "u3"));
        mounts.record(pod("a", "w-1", "u1"));
        mounts.record(pod("a", "w-0", "u2"));
        let names: Vec<_> = mounts
            .snapshot()
            .into_iter()
            .map(|m| format!("{}/{}", m.namespace, m.pod))
            .collect();
        assert_eq!(names, ["a/w-0", "a/w-1", "b/w-0"]);
    }

    #[test]
    fn forgotten_pod_instances_are_not_listed() {
        let mounts = Mounts::default();
        mounts.record(pod("a", "w-0", "u1"));
        mounts.record(pod("a", "w-1", "u2"));
        mounts.forget("u1");
        mounts.retain(|uid| uid != "u2");
        assert!(mounts.snapshot().is_empty());
    }

    #[test]
    fn serializes_with_the_documented_field_names() {
        let json = serde_json::to_value(pod("a", "w-0", "u1")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "namespace": "a", "pod": "w-0", "uid": "u1",
                "startedAt": "2024-01-01T00:00:00Z",
                "configMaps": {"cfg": {"resourceVersion": "7", "data": {"config.yml": "jobs: []"}}}
            })
        );
    }
}
