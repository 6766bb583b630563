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

use crate::state::pod_summary::PodSummary;

/// A filter of one watch's events: true for those that may change a plan. `fingerprint` sums
/// up what the planner reads of an object; an update with the fingerprint of the object's
/// previous event is left out.
pub fn only_changes<K: Resource>(fingerprint: impl Fn(&K) -> u64) -> impl FnMut(&Event<K>) -> bool {
    let mut seen: HashMap<UidKey, u64> = HashMap::new();
    // The uids a relist in progress has shown: objects it did not show are gone.
    let mut relisted: Option<HashSet<UidKey>> = None;
    move |event| {
        match event {
            Event::Apply(obj) => {
                let Some(uid) = obj.meta().uid.as_deref() else {
                    return true;
                };
                let print = fingerprint(obj);
                return seen.insert(UidKey::of(uid), print) != Some(print);
            }
            Event::Delete(obj) => {
                if let Some(uid) = obj.meta().uid.as_deref() {
                    seen.remove(&UidKey::of(uid));
                }
            }
            Event::Init => relisted = Some(HashSet::new()),
            Event::InitApply(obj) => {
                if let Some(uid) = obj.meta().uid.as_deref() {
                    let key = UidKey::of(uid);
                    seen.insert(key.clone(), fingerprint(obj));
                    relisted.get_or_insert_default().insert(key);
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

/// An object's uid as a map key: the UUID the API server assigns as its 128 bits (a filter of
/// 10,000 pods keeps 10,000 of them), any other uid as its text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum UidKey {
    Uuid(u128),
    Text(Box<str>),
}

impl UidKey {
    fn of(uid: &str) -> UidKey {
        canonical_uuid(uid).map_or_else(|| UidKey::Text(uid.into()), UidKey::Uuid)
    }
}

/// The value of a UUID in its canonical text (lowercase hex, dashes after the 8th, 12th, 16th
/// and 20th digit); `None` for any other text, so that two keys are equal only when their
/// texts are.
fn canonical_uuid(text: &str) -> Option<u128> {
    if text.len() != 36 {
        return None;
    }
    let mut value = 0u128;
    for (i, byte) in text.bytes().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if byte != b'-' {
                return None;
            }
            continue;
        }
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            _ => return None,
        };
        value = value << 4 | u128::from(digit);
    }
    Some(value)
}

/// The fingerprint of a (trimmed) object: all of it but its resourceVersion.
pub fn content<K: Resource + Serialize + Clone>(obj: &K) -> u64 {
    let mut obj = obj.clone();
    obj.meta_mut().resource_version = None;
    hash_json(&obj)
}

/// The fingerprint of a pod summary: its metadata but the resourceVersion, its Ready condition,
/// when its container last started (a worker starting or restarted is judged from then) and
/// whether it has finished.
pub fn pod(pod: &PodSummary) -> u64 {
    let mut meta = pod.metadata.clone();
    meta.resource_version = None;
    let ready = pod
        .ready
        .as_ref()
        .map(|r| (r.is_true, hash_json(&r.last_transition_time)));
    let mut hasher = DefaultHasher::new();
    let started = hash_json(&pod.started);
    (hash_json(&meta), ready, started, pod.ran, pod.finished).hash(&mut hasher);
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
        use crate::state::pod_summary::ReadyCondition;
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
            ..PodSummary::default()
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

    #[test]
    fn uids_are_keyed_by_their_uuid_value_and_any_other_text_as_it_is() {
        let uid = "0f8e7d6c-5b4a-4938-8271-605f4e3d2c1b";
        assert_eq!(
            UidKey::of(uid),
            UidKey::Uuid(0x0f8e7d6c_5b4a_4938_8271_605f4e3d2c1b)
        );
        for other in [
            "p",
            "0F8E7D6C-5B4A-4938-8271-605F4E3D2C1B",
            "0f8e7d6c5b4a-4938-8271-605f4e3d2c1b-",
            "0f8e7d6c-5b4a-4938-8271-605f4e3d2c1g",
        ] {
            assert_eq!(UidKey::of(other), UidKey::Text(other.into()), "{other}");
        }
        // Two sightings of one pod by its UUID uid: the second, unchanged, wakes nobody.
        let mut keep = only_changes(content::<StatefulSet>);
        let mut first = sts("a", "1", 2);
        first.metadata.uid = Some(uid.into());
        let mut again = first.clone();
        again.metadata.resource_version = Some("2".into());
        assert!(keep(&Event::Apply(first)));
        assert!(!keep(&Event::Apply(again)));
    }
}
