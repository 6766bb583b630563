//! Which pools a change wakes: the mappers from a workload, or an object it owns, to the pools
//! of its kind that select it or reported it. Written once, over [`Workload`]; each kind's
//! module (`workloads::*`) says which of its objects lead to which workload.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::crd::SwarmPool;
use crate::planner;
use crate::planner::validate::Workload;

/// Pools of `W`'s kind in `namespace` that select `workload` by label, or that reported the
/// workload named `name` as theirs (so a relabelled, deleted or not yet cached workload still
/// reaches the pool that used it).
pub(super) fn pools_of_workload<W: Workload>(
    pools: &[Arc<SwarmPool>],
    namespace: Option<&str>,
    name: &str,
    workload: Option<&W>,
) -> Vec<ObjectRef<SwarmPool>> {
    pools
        .iter()
        .filter(|pool| pool.metadata.namespace.as_deref() == namespace)
        .filter(|pool| pool.spec.workload_kind == W::KIND)
        .filter(|pool| {
            workload.is_some_and(|w| planner::selects(&pool.spec.selector, w))
                || pool.status.as_ref().and_then(W::reported) == Some(name)
        })
        .map(|pool| ObjectRef::from_obj(pool.as_ref()))
        .collect()
}

/// Pools of `W`'s kind that select `workload` by label, or reported it as theirs.
pub(super) fn pools_for_workload<W: Workload>(
    pools: &[Arc<SwarmPool>],
    workload: &W,
) -> Vec<ObjectRef<SwarmPool>> {
    let namespace = workload.meta().namespace.as_deref();
    pools_of_workload(pools, namespace, &workload.name_any(), Some(workload))
}

/// Every pool of `W`'s kind in `namespace`: for an object whose workload cannot be told yet.
pub(super) fn pools_of_kind<W: Workload>(
    pools: &[Arc<SwarmPool>],
    namespace: Option<&str>,
) -> Vec<ObjectRef<SwarmPool>> {
    pools
        .iter()
        .filter(|pool| pool.metadata.namespace.as_deref() == namespace)
        .filter(|pool| pool.spec.workload_kind == W::KIND)
        .map(|pool| ObjectRef::from_obj(pool.as_ref()))
        .collect()
}

/// The name of the `K` named as controller in `owners`, if one is.
pub(super) fn controller_of<K: Resource<DynamicType = ()>>(
    owners: &[OwnerReference],
) -> Option<&str> {
    owners
        .iter()
        .find(|r| {
            r.controller == Some(true)
                && r.kind == K::kind(&())
                && r.api_version == K::api_version(&())
        })
        .map(|r| r.name.as_str())
}

/// Pools of the `W` named as controller in `owners` (of an object in `namespace`), looked up
/// in `workloads`.
pub(super) fn pools_for_owner<W>(
    pools: &[Arc<SwarmPool>],
    workloads: &Store<W>,
    namespace: Option<&str>,
    owners: &[OwnerReference],
) -> Vec<ObjectRef<SwarmPool>>
where
    W: Workload + Resource<DynamicType = ()> + Clone,
{
    let Some(name) = controller_of::<W>(owners) else {
        return Vec::new();
    };
    let workload = workloads.get(&ObjectRef::new(name).within(namespace.unwrap_or_default()));
    pools_of_workload(pools, namespace, name, workload.as_deref())
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use kube::ResourceExt;
    use kube::runtime::{reflector, watcher};

    use super::*;
    use crate::api::crd::{SwarmPoolSpec, SwarmPoolStatus, WorkloadKind};
    use crate::state::pod_summary::PodSummary;

    /// A StatefulSet pool in namespace `ns` selecting `app=<app>`, that reported `reported`.
    pub(crate) fn pool(name: &str, app: &str, reported: Option<&str>) -> Arc<SwarmPool> {
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

    fn controlled_by(kind: &str, name: &str) -> Vec<OwnerReference> {
        vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]
    }

    #[test]
    fn a_statefulset_triggers_the_pools_that_select_it_or_used_it() {
        let pools = [
            pool("a", "web", None),
            pool("b", "db", Some("web")),
            pool("c", "db", None),
        ];
        assert_eq!(
            names(pools_for_workload(&pools, &sts("web", "web"))),
            ["a", "b"]
        );
    }

    #[test]
    fn a_statefulset_in_another_namespace_triggers_nothing() {
        let pools = [pool("a", "web", None)];
        let mut other = sts("web", "web");
        other.metadata.namespace = Some("elsewhere".into());
        assert!(pools_for_workload(&pools, &other).is_empty());
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
                owner_references: Some(controlled_by("StatefulSet", "web")),
                ..ObjectMeta::default()
            },
            ..PodSummary::default()
        };
        let of_pod = |pod: &PodSummary| {
            let namespace = pod.metadata.namespace.as_deref();
            pools_for_owner(&pools, &store, namespace, pod.owner_references())
        };
        assert_eq!(names(of_pod(&pod)), ["a"]);
        pod.metadata.owner_references = None;
        assert!(of_pod(&pod).is_empty());
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
            names(pools_for_workload(&pools, &sts("web", "web"))),
            ["sts-pool"]
        );
        let deployment = Deployment {
            metadata: sts("web", "web").metadata,
            ..Deployment::default()
        };
        assert_eq!(
            names(pools_for_workload(&pools, &deployment)),
            ["d-pool", "d-reporter"]
        );
        // A ReplicaSet whose Deployment is not cached: only the pool that reported it hears.
        let (empty, _) = reflector::store::<Deployment>();
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("ns".into()),
                owner_references: Some(controlled_by("Deployment", "web")),
                ..ObjectMeta::default()
            },
            ..ReplicaSet::default()
        };
        let namespace = rs.namespace();
        assert_eq!(
            names(pools_for_owner(
                &pools,
                &empty,
                namespace.as_deref(),
                rs.owner_references()
            )),
            ["d-reporter"]
        );
        assert_eq!(
            names(pools_of_kind::<Deployment>(&pools, Some("ns"))),
            ["d-pool", "d-reporter"]
        );
    }
}
