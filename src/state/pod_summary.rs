//! A worker pod as the operator keeps it: its metadata, its node, its Ready condition, when its
//! containers last started and whether it has finished, nothing else.
//!
//! With 10,000 worker pods the pod cache is most of the operator's memory. A `Pod` from
//! k8s-openapi is 2.4 KB before any of its fields is set (its spec and status are inline), so
//! the cache and the live lists deserialize pods straight into this summary instead: the
//! fields of a pod's spec and status other than the phase and the conditions are skipped as
//! they are read, never allocated.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

use crate::state::object_meta::{read_meta, without_managed_fields};
use crate::state::served_as::served_as;

/// A pod: identity, owners, creation and deletion in `metadata`, its Ready condition, and
/// whether it has finished.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "PodFields")]
pub struct PodSummary {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    /// The pod's `Ready` condition, from `status.conditions`; `None` when it has none yet.
    pub ready: Option<ReadyCondition>,
    /// `spec.nodeName`: the node it runs on, once scheduled.
    pub node: Option<String>,
    /// When its most recently started container started (`state.running.startedAt` of a
    /// running container): a new or restarted worker is not Ready until it has read its entry.
    pub started: Option<Time>,
    /// Some container of the pod has run: one runs, has terminated or has restarted. Until
    /// then (its image still pulling, say) no worker in it can have read anything.
    pub ran: bool,
    /// The pod's phase is `Failed` or `Succeeded` (evicted, say): every container has stopped
    /// and the kubelet never starts one again, so the pod runs nothing though it stays in the
    /// API until it is deleted.
    pub finished: bool,
}

/// The part of a pod's `Ready` condition the planner reads.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadyCondition {
    /// The condition's status is `True`.
    pub is_true: bool,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
}

impl From<&Pod> for PodSummary {
    fn from(pod: &Pod) -> Self {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| ReadyCondition {
                is_true: c.status == "True",
                last_transition_time: c.last_transition_time.clone(),
            });
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let containers = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten();
        let started = containers
            .clone()
            .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
            .max_by_key(|t| t.0);
        let ran = containers.clone().any(|c| {
            let state = c.state.as_ref();
            c.restart_count > 0
                || state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        });
        PodSummary {
            metadata: read_meta(&pod.metadata),
            ready,
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            started,
            ran,
            finished: is_finished(phase),
        }
    }
}

// Served as pods: the API is the pods' API, only the Rust type is smaller.
served_as!(PodSummary, Pod);

/// Whether a pod phase is terminal.
fn is_finished(phase: Option<&str>) -> bool {
    matches!(phase, Some("Failed" | "Succeeded"))
}

/// What a pod is read as: `metadata`, of `spec` the node, and of `status` the phase, the
/// conditions and when each running container started; every other field is skipped unread.
#[derive(Deserialize)]
struct PodFields {
    #[serde(default, deserialize_with = "without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SpecFields>,
    #[serde(default)]
    status: Option<StatusFields>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecFields {
    #[serde(default)]
    node_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusFields {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<ConditionFields>>,
    #[serde(default)]
    container_statuses: Option<Vec<ContainerStatusFields>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatusFields {
    #[serde(default)]
    restart_count: i32,
    #[serde(default)]
    state: Option<ContainerStateFields>,
}

#[derive(Deserialize)]
struct ContainerStateFields {
    #[serde(default)]
    running: Option<RunningFields>,
    #[serde(default)]
    terminated: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunningFields {
    #[serde(default, rename = "startedAt")]
    started_at: Option<Time>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionFields {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    last_transition_time: Option<Time>,
}

impl From<PodFields> for PodSummary {
    fn from(pod: PodFields) -> Self {
        let (phase, conditions, containers) = pod
            .status
            .map(|s| (s.phase, s.conditions, s.container_statuses))
            .unwrap_or_default();
        let containers = containers.unwrap_or_default();
        let ran = containers.iter().any(|c| {
            let state = c.state.as_ref();
            c.restart_count > 0
                || state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
        });
        let started = containers
            .into_iter()
            .filter_map(|c| c.state?.running?.started_at)
            .max_by_key(|t| t.0);
        PodSummary {
            metadata: pod.metadata,
            node: pod.spec.and_then(|s| s.node_name),
            started,
            ran,
            ready: conditions
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
                .map(|c| ReadyCondition {
                    is_true: c.status == "True",
                    last_transition_time: c.last_transition_time,
                }),
            finished: is_finished(phase.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::{Resource, ResourceExt};
    use serde_json::json;

    fn pod_json(conditions: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-0",
                "namespace": "ns",
                "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {"a": "b"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                    "uid": "s-1", "controller": true
                }],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
            },
            "spec": {"nodeName": "node-a", "containers": [{"name": "worker", "image": "busybox"}]},
            "status": {"phase": "Running", "conditions": conditions, "containerStatuses": [
                {"name": "worker", "ready": false, "restartCount": 1, "state": {"running": {"startedAt": "2026-01-01T00:00:03Z"}}},
                {"name": "sidecar", "ready": true, "restartCount": 2, "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}},
                {"name": "never-restarted", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}}},
                {"name": "done", "ready": false, "state": {"terminated": {"exitCode": 0}}}
            ]}
        })
    }

    #[test]
    fn reads_the_ready_condition_and_skips_the_rest_of_the_status() {
        let json = pod_json(json!([
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:02Z"}
        ]));
        let mut summary: PodSummary = serde_json::from_value(json.clone()).expect("summary");
        let pod: Pod = serde_json::from_value(json).expect("pod");
        assert_eq!(
            summary,
            PodSummary::from(&pod),
            "same as converting a full Pod"
        );
        let ready = summary.ready.clone().expect("a Ready condition");
        assert!(!ready.is_true);
        assert_eq!(
            ready.last_transition_time,
            Some(Time("2026-01-01T00:00:02Z".parse().expect("time")))
        );
        assert_eq!(summary.node.as_deref(), Some("node-a"));
        assert_eq!(
            summary.started,
            Some(Time("2026-01-01T00:00:04Z".parse().expect("time"))),
            "the latest start of a running container"
        );
        assert!(summary.ran);

        crate::state::trim::pod(&mut summary);
        assert_eq!(summary.metadata.labels, None);
        assert_eq!(summary.metadata.annotations, None);
        assert_eq!(summary.metadata.managed_fields, None);
        assert_eq!(summary.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(summary.owner_references()[0].uid, "s-1");
        assert!(summary.metadata.creation_timestamp.is_some());
    }

    #[test]
    fn a_pod_without_status_or_ready_condition_has_none() {
        let mut json = pod_json(json!([{"type": "PodScheduled", "status": "True"}]));
        let summary: PodSummary = serde_json::from_value(json.clone()).expect("summary");
        assert_eq!(summary.ready, None);
        json.as_object_mut().expect("object").remove("status");
        let summary: PodSummary = serde_json::from_value(json).expect("summary");
        assert_eq!(summary.ready, None);
        let ready: PodSummary =
            serde_json::from_value(pod_json(json!([{"type": "Ready", "status": "True"}])))
                .expect("summary");
        assert_eq!(
            ready.ready,
            Some(ReadyCondition {
                is_true: true,
                last_transition_time: None
            })
        );
    }

    #[test]
    fn a_failed_or_succeeded_pod_is_finished() {
        for (phase, finished) in [
            ("Pending", false),
            ("Running", false),
            ("Unknown", false),
            ("Failed", true),
            ("Succeeded", true),
        ] {
            let mut json = pod_json(json!([]));
            json["status"]["phase"] = json!(phase);
            let summary: PodSummary = serde_json::from_value(json.clone()).expect("summary");
            let pod: Pod = serde_json::from_value(json).expect("pod");
            assert_eq!(summary.finished, finished, "{phase}");
            assert_eq!(summary, PodSummary::from(&pod), "{phase}");
        }
        let mut json = pod_json(json!([]));
        json.as_object_mut().expect("object").remove("status");
        let summary: PodSummary = serde_json::from_value(json).expect("summary");
        assert!(!summary.finished, "a pod without status has not finished");
    }

    #[test]
    fn is_served_as_pods() {
        assert_eq!(
            PodSummary::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
        assert_eq!(PodSummary::kind(&()), "Pod");
    }

    #[test]
    fn is_a_fraction_of_a_pod_in_memory() {
        assert!(size_of::<PodSummary>() * 3 < size_of::<Pod>());
    }
}
