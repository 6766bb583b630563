//! What the watch caches keep of each object: only the fields the planner and the trigger
//! mappers read. With 10,000 worker pods the pod cache is most of the operator's memory, so
//! every dropped field counts.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::SwarmPool;

/// A pod as the planner reads it: identity, controlling owner, creation and deletion, and its
/// Ready condition (status and transition time).
pub fn pod(pod: &mut Pod) {
    trim_meta(&mut pod.metadata);
    // Matched by the watch's label selector server-side; nothing reads them afterwards.
    pod.metadata.labels = None;
    pod.spec = None;
    let ready = pod
        .status
        .take()
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .map(|c| PodCondition {
            type_: c.type_,
            status: c.status,
            last_transition_time: c.last_transition_time,
            ..PodCondition::default()
        });
    pod.status = Some(PodStatus {
        conditions: ready.map(|c| vec![c]),
        ..PodStatus::default()
    });
}

/// A StatefulSet as the planner reads it: identity, labels (for pool selectors) and replicas.
pub fn statefulset(sts: &mut StatefulSet) {
    trim_meta(&mut sts.metadata);
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas);
    sts.spec = Some(StatefulSetSpec {
        replicas,
        ..StatefulSetSpec::default()
    });
    sts.status = None;
}

/// A pool without the bookkeeping of the tools that wrote it (managed fields and kubectl's
/// last-applied annotation each repeat the spec).
pub fn pool(pool: &mut SwarmPool) {
    pool.metadata.managed_fields = None;
    pool.metadata.annotations = None;
}

/// A ConfigMap without the server-side apply bookkeeping, which can be as large as its data.
pub fn config_map(cm: &mut ConfigMap) {
    cm.metadata.managed_fields = None;
}

fn trim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.generate_name = None;
    meta.finalizers = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use std::collections::BTreeMap;

    #[test]
    fn trimmed_pods_keep_what_the_planner_reads() {
        let time = Time("2026-01-01T00:00:00Z".parse().expect("timestamp"));
        let mut p = Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                annotations: Some(BTreeMap::from([("a".to_owned(), "b".to_owned())])),
                labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                owner_references: Some(vec![OwnerReference {
                    name: "web".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                creation_timestamp: Some(time.clone()),
                deletion_timestamp: Some(time.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(Default::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.0.0.1".into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        ..PodCondition::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: "False".into(),
                        last_transition_time: Some(time.clone()),
                        message: Some("containers not ready".into()),
                        ..PodCondition::default()
                    },
                ]),
                ..PodStatus::default()
            }),
        };
        pod(&mut p);
        assert!(p.spec.is_none());
        assert!(p.metadata.annotations.is_none() && p.metadata.labels.is_none());
        assert_eq!(p.metadata.uid.as_deref(), Some("u"));
        assert_eq!(p.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(p.metadata.creation_timestamp, Some(time.clone()));
        assert_eq!(p.metadata.deletion_timestamp, Some(time.clone()));
        let status = p.status.expect("status kept");
        assert!(status.phase.is_none() && status.pod_ip.is_none());
        assert_eq!(
            status.conditions,
            Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                last_transition_time: Some(time),
                ..PodCondition::default()
            }])
        );
    }

    #[test]
    fn trimmed_statefulsets_keep_labels_and_replicas() {
        let mut sts = StatefulSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some("u".into()),
                labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                annotations: Some(BTreeMap::from([("a".to_owned(), "b".to_owned())])),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                service_name: Some("web".into()),
                ..StatefulSetSpec::default()
            }),
            status: Some(Default::default()),
        };
        statefulset(&mut sts);
        assert_eq!(sts.spec.as_ref().and_then(|s| s.replicas), Some(3));
        assert!(sts.spec.and_then(|s| s.service_name).is_none());
        assert!(sts.status.is_none() && sts.metadata.annotations.is_none());
        assert_eq!(sts.metadata.labels.map(|l| l.len()), Some(1));
        assert_eq!(sts.metadata.uid.as_deref(), Some("u"));
    }
}
