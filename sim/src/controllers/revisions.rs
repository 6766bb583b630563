//! ControllerRevisions: the template history of a StatefulSet, as kube-controller-manager
//! keeps it. Each distinct pod template gets a revision named `<set>-<hash>`, which is also
//! the `controller-revision-hash` label of the pods created from it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tracing::debug;

use super::meta;
use crate::store::{DeleteOptions, LabelSelector, Store};

/// Label of a ControllerRevision holding its hash.
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Revisions kept besides those in use when `revisionHistoryLimit` is not set.
const DEFAULT_HISTORY_LIMIT: usize = 10;

/// Characters Kubernetes uses to render hashes in names (no vowels, no look-alikes).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Records the set's current template as the newest revision and trims old history.
///
/// `in_use` names the revisions that pods or the status still refer to; they are never
/// trimmed. Write failures are left for the next sync.
pub(crate) fn sync(
    store: &Store,
    sts: &Value,
    selector: &LabelSelector,
    update_revision: &str,
    in_use: &BTreeSet<String>,
) {
    let namespace = meta::namespace(sts);
    let set_name = meta::name(sts);
    let sts_uid = meta::uid(sts);
    let mut owned: Vec<Value> = Vec::new();
    for revision in store.list_shared("apps/v1", "ControllerRevision", namespace) {
        let named_for_set = meta::name(&revision)
            .strip_prefix(set_name)
            .is_some_and(|rest| rest.starts_with('-'));
        match meta::controller_ref(&revision) {
            Some(owner) if owner.uid == sts_uid => owned.push(Value::clone(&revision)),
            Some(_) => {}
            // History left behind by an orphaning delete is adopted by the set's successor.
            None if named_for_set && selector.matches(&revision) => {
                let mut adopted = Value::clone(&revision);
                if let Some(metadata) = adopted["metadata"].as_object_mut() {
                    metadata.insert(
                        "ownerReferences".into(),
                        json!([meta::controller_ref_to(sts, "StatefulSet")]),
                    );
                }
                if let Ok(stored) = store.update(adopted) {
                    owned.push(stored);
                }
            }
            None => {}
        }
    }
    let newest = owned.iter().map(number).max().unwrap_or(0);
    match owned.iter().find(|r| meta::name(r) == update_revision) {
        // Rolling back to an earlier template makes its revision the newest again.
        Some(existing) if number(existing) < newest => {
            let mut bumped = existing.clone();
            bumped["revision"] = json!(newest + 1);
            if let Ok(stored) = store.update(bumped) {
                replace(&mut owned, stored);
            }
        }
        Some(_) => {}
        None => {
            let created = store.create(new_revision(sts, update_revision, newest + 1));
            match created {
                Ok(stored) => owned.push(stored),
                Err(err) => {
                    debug!(revision = update_revision, error = %err.message, "revision create failed")
                }
            }
        }
    }
    trim_history(store, sts, owned, in_use);
}

/// Deletes the oldest revisions no pod uses beyond `revisionHistoryLimit`.
fn trim_history(store: &Store, sts: &Value, owned: Vec<Value>, in_use: &BTreeSet<String>) {
    let limit = sts
        .pointer("/spec/revisionHistoryLimit")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_HISTORY_LIMIT, |l| l as usize);
    let mut unused: Vec<&Value> = owned
        .iter()
        .filter(|r| !in_use.contains(meta::name(r)))
        .collect();
    unused.sort_by_key(|r| number(r));
    let excess = unused.len().saturating_sub(limit);
    for revision in unused.into_iter().take(excess) {
        let options = DeleteOptions {
            precondition_uid: Some(meta::uid(revision).to_string()),
            ..DeleteOptions::default()
        };
        let _ = store.delete(
            "apps/v1",
            "ControllerRevision",
            meta::namespace(revision),
            meta::name(revision),
            options,
        );
    }
}

fn replace(owned: &mut [Value], stored: Value) {
    if let Some(slot) = owned
        .iter_mut()
        .find(|r| meta::uid(r) == meta::uid(&stored))
    {
        *slot = stored;
    }
}

fn number(revision: &Value) -> u64 {
    revision
        .get("revision")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The ControllerRevision object recording the set's current template.
fn new_revision(sts: &Value, name: &str, number: u64) -> Value {
    let template = sts.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let hash = name
        .strip_prefix(meta::name(sts))
        .and_then(|rest| rest.strip_prefix('-'))
        .unwrap_or(name);
    labels.insert(HASH_LABEL.into(), json!(hash));
    let mut data_template = template;
    if let Some(object) = data_template.as_object_mut() {
        // The stored patch replaces the whole template when a rollback applies it.
        object.insert("$patch".into(), json!("replace"));
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name,
            "namespace": meta::namespace(sts),
            "labels": labels,
            "ownerReferences": [meta::controller_ref_to(sts, "StatefulSet")],
        },
        "data": {"spec": {"template": data_template}},
        "revision": number,
    })
}

/// The revision name `<set>-<hash>` of a pod template, as in the `controller-revision-hash`
/// label: an FNV-1a hash of the template's canonical JSON, rendered with Kubernetes' safe
/// alphabet so it never spells words.
pub fn revision_name(set_name: &str, template: &Value, collision_count: u64) -> String {
    let mut canonical = String::new();
    write_canonical(template, &mut canonical);
    let mut hash: u32 = 0x811c_9dc5;
    let bytes = canonical.bytes().chain(collision_count.to_le_bytes());
    for byte in bytes {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    let encoded: String = hash
        .to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect();
    format!("{set_name}-{encoded}")
}

/// JSON with object keys sorted, so equal templates hash equally whatever their key order.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (key, value)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_name_ignores_key_order_and_tracks_content() {
        let a = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {"containers": []}});
        let b = json!({"spec": {"containers": []}, "metadata": {"labels": {"tier": "x", "app": "web"}}});
        let c = json!({"metadata": {"labels": {"app": "web", "tier": "y"}}, "spec": {"containers": []}});
        assert_eq!(revision_name("web", &a, 0), revision_name("web", &b, 0));
        assert_ne!(revision_name("web", &a, 0), revision_name("web", &c, 0));
        assert_ne!(revision_name("web", &a, 0), revision_name("web", &a, 1));
        let name = revision_name("web", &a, 0);
        let hash = name.strip_prefix("web-").unwrap();
        assert!(hash.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{name}");
    }

    #[test]
    fn revision_records_the_template_as_a_replace_patch_owned_by_the_set() {
        let sts = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}
        });
        let revision = new_revision(&sts, "web-abc", 3);
        assert_eq!(revision["revision"], 3);
        assert_eq!(revision["metadata"]["labels"][HASH_LABEL], "abc");
        assert_eq!(revision["metadata"]["labels"]["app"], "web");
        assert_eq!(revision["data"]["spec"]["template"]["$patch"], "replace");
        assert_eq!(revision["metadata"]["ownerReferences"][0]["uid"], "u1");
    }
}
