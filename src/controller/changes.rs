//! Which watch events wake a pool. Every event updates the caches; only one that may change a
//! plan triggers a reconcile: an object's first sight, its deletion, each object of a relist,
//! and an update that changes what the caches keep of it. The rest are updates of fields the
//! caches drop (a pod's node, a StatefulSet's status counts) and this operator's own status
//! writes coming back, which in a rollout of 10,000 worker pods made most of the reconciles.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::Resource;
use kube::runtime::watcher::Event;
use serde::Serialize;

use crate::pod_summary::PodSummary;

/// A filter of one watch's events: true for those that may change a plan. `fingerprint` sums
/// up what the planner reads of an object; an update with the fingerprint of the object's
/// previous event is left out.
pub fn only_changes<K: Resource>(fingerprint: impl Fn(&K) -> u64) -> impl FnMut(&Event<K>) -> bool {
    let mut seen: HashMap<String, u64> = HashMap::new();
    // The uids a relist in progress has shown: objects it did not show are gone.
    let mut relisted: Option<HashSet<String>> = None;
    move |event| {
        match event {
            Event::Apply(obj) => {
                let Some(uid) = obj.meta().uid.clone() else {
                    return true;
                };
                let print = fingerprint(obj);
                return seen.insert(uid, print) != Some(print);
            }
            Event::Delete(obj) => {
                if let Some(uid) = &obj.meta().uid {
                    seen.remove(uid);
                }
            }
            Event::Init => relisted = Some(HashSet::new()),
            Event::InitApply(obj) => {
                if let Some(uid) = &obj.meta().uid {
                    seen.insert(uid.clone(), fingerprint(obj));
                    relisted.get_or_insert_default().insert(uid.clone());
                }
            }
            Event::InitDone => {
                let shown = relisted.take().unwrap_or_default();
                seen.retain(|uid, _| shown.contains(uid));
            }
        }
        true
    }
}

/// The fingerprint of a (trimmed) object: all of it but its resourceVersion.
pub fn content<K: Resource + Serialize + Clone>(obj: &K) -> u64 {
    let mut obj = obj.clone();
    obj.meta_mut().resource_version = None;
    hash_json(&obj)
}

/// The fingerprint of a pod summary: its metadata but the resourceVersion, its Ready condition
/// and whether it has finished.
pub fn pod(pod: &PodSummary) -> u64 {
    let mut meta = pod.metadata.clone();
    meta.resource_version = None;
    let ready = pod
        .ready
        .as_ref()
        .map(|r| (r.is_true, hash_json(&r.last_transition_time)));
    let mut hasher = DefaultHasher::new();
    (hash_json(&meta), ready, pod.finished).hash(&mut hasher);
    hasher.finish()
}

/// The fingerprint of `value`'s JSON.
pub fn hash_json(value: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_vec(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn sts(uid: &str, rv: &str, replicas: i32) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("w".into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                ..StatefulSetSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn an_update_that_changes_nothing_kept_wakes_nobody() {
        let mut keep = only_changes(content::<StatefulSet>);
        assert!(keep(&Event::Apply(sts("a", "1", 2))), "first sight");
        assert!(
            !keep(&Event::Apply(sts("a", "2", 2))),
            "only the resourceVersion"
        );
        assert!(keep(&Event::Apply(sts("a", "3", 3))), "replicas changed");
        assert!(!keep(&Event::Apply(sts("a", "4", 3))));
    }

    #[test]
    fn deletions_recreations_and_relists_always_wake() {
        let mut keep = only_changes(content::<StatefulSet>);
        assert!(keep(&Event::Apply(sts("a", "1", 2))));
        assert!(keep(&Event::Delete(sts("a", "2", 2))), "deleted");
        assert!(
            keep(&Event::Apply(sts("b", "3", 2))),
            "re-created: a new uid"
        );
        assert!(keep(&Event::Init));
        assert!(keep(&Event::InitApply(sts("b", "4", 2))), "relisted");
        assert!(keep(&Event::InitDone));
        assert!(!keep(&Event::Apply(sts("b", "5", 2))));
    }

    #[test]
    fn a_relist_forgets_objects_it_no_longer_shows() {
        let mut keep = only_changes(content::<StatefulSet>);
        assert!(keep(&Event::Apply(sts("a", "1", 2))));
        keep(&Event::Init);
        keep(&Event::InitDone);
        // "a" was gone from the relist; seen again (say, a watch replaying it), it is news.
        assert!(keep(&Event::Apply(sts("a", "9", 2))));
    }

    #[test]
    fn a_pod_wakes_its_pool_when_it_turns_ready_or_terminates_but_not_when_bound() {
        use crate::pod_summary::ReadyCondition;
        let pod = |rv: &str, ready: bool, deleting: bool| PodSummary {
            metadata: ObjectMeta {
                name: Some("w-0".into()),
                uid: Some("p".into()),
                resource_version: Some(rv.into()),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            ready: Some(ReadyCondition {
                is_true: ready,
                last_transition_time: None,
            }),
            finished: false,
        };
        let mut keep = only_changes(super::pod);
        assert!(keep(&Event::Apply(pod("1", false, false))));
        assert!(
            !keep(&Event::Apply(pod("2", false, false))),
            "bound to a node"
        );
        assert!(keep(&Event::Apply(pod("3", true, false))), "Ready");
        assert!(keep(&Event::Apply(pod("4", true, true))), "terminating");
    }
}
