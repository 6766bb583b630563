//! What the watch caches keep of each object: only the fields the planner and the trigger
//! mappers read. With 10,000 worker pods the pod cache is most of the operator's memory, so
//! every dropped field counts.

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::crd::SwarmPool;
use crate::state::lease_summary::LeaseSummary;
use crate::state::pod_summary::PodSummary;
use crate::state::slice_summary::SliceSummary;

/// A pod as the planner reads it: identity, controlling owner, creation and deletion (its
/// Ready condition is all [`PodSummary`] keeps of the rest). Labels are matched by the watch's
/// label selector server-side; nothing reads them afterwards.
pub fn pod(pod: &mut PodSummary) {
    trim_meta(&mut pod.metadata);
    pod.metadata.labels = None;
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

/// A Deployment as the planner reads it: identity, labels (for pool selectors) and replicas.
pub fn deployment(deployment: &mut Deployment) {
    trim_meta(&mut deployment.metadata);
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    deployment.spec = Some(DeploymentSpec {
        replicas,
        ..DeploymentSpec::default()
    });
    deployment.status = None;
}

/// A ReplicaSet as the planner reads it: identity and its controlling Deployment.
pub fn replica_set(rs: &mut ReplicaSet) {
    trim_meta(&mut rs.metadata);
    rs.metadata.labels = None;
    rs.spec = None;
    rs.status = None;
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

/// A worker's own ConfigMap as the planner reads it: what [`SliceSummary`] keeps, without its
/// uid (a write is fenced by its resourceVersion).
pub fn slice(cm: &mut SliceSummary) {
    trim_meta(&mut cm.metadata);
    trim_cached_meta(&mut cm.metadata);
    cm.metadata.uid = None;
}

/// A ConfigMap a pool reads jobs from: its identity, labels and data, and only the keys of its
/// binary data (named when a source's key is missing).
pub fn jobs_source(cm: &mut ConfigMap) {
    trim_meta(&mut cm.metadata);
    cm.metadata.owner_references = None;
    cm.binary_data = cm.binary_data.take().map(|binary| {
        binary
            .into_keys()
            .map(|key| (key, ByteString(Vec::new())))
            .collect()
    });
}

/// A worker's Lease as the planner reads it: its name and what [`LeaseSummary`] keeps (its
/// holder is a pod's uid; its own uid nobody reads).
pub fn lease(lease: &mut LeaseSummary) {
    trim_meta(&mut lease.metadata);
    trim_cached_meta(&mut lease.metadata);
    lease.metadata.owner_references = None;
    lease.metadata.uid = None;
}

/// What the caches of Leases and slices also drop (see [`crate::state::cached`]): fields
/// nothing reads.
fn trim_cached_meta(meta: &mut ObjectMeta) {
    meta.generation = None;
    meta.deletion_grace_period_seconds = None;
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
    use std::collections::BTreeMap;

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
