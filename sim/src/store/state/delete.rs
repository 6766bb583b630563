//! DELETE: preconditions, the grace period of pods, the finalizers a propagation policy adds,
//! and either removal at once or a `deletionTimestamp` that something else finishes.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{State, is_crd_type};
use crate::store::error::{ApiError, Cause};
use crate::store::types::ResourceType;
use crate::store::{DeleteOptions, EventType, crd, events, meta};

/// Grace period of a pod whose spec sets none.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

impl State {
    /// DELETE. Returns the object after the call and whether it is gone.
    pub(crate) fn delete(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        dry_run: bool,
    ) -> Result<(Value, bool), ApiError> {
        let cur = self.current(rt, ns, name)?;
        check_preconditions(rt, name, &cur, opts)?;
        check_options(rt, name, opts)?;
        let grace = grace_period(rt, &cur, opts);
        let finalizers = finalizers_after(&cur, opts.propagation_policy.as_deref());
        let mut new = cur.clone();
        {
            let m = meta::meta_mut(&mut new);
            if finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(finalizers));
            }
        }
        if meta::at(&cur, &["metadata", "deletionTimestamp"]).is_some() {
            return Ok(self.delete_again(rt, cur, new, grace, dry_run));
        }
        // Namespaces always terminate first: their content goes before them.
        if !is_namespace(rt) && finalizers.is_empty() && grace == 0 {
            if dry_run {
                return Ok((events::to_served(&cur, rt), true));
            }
            let last = self.remove(rt, new);
            return Ok((events::to_served(&last, rt), true));
        }
        mark_deleting(rt, &mut new, grace);
        if dry_run {
            return Ok((events::to_served(&new, rt), false));
        }
        Ok(self.start_deleting(rt, name, new))
    }

    /// A DELETE of an object already being deleted: a pod's shorter grace period wins, and
    /// the object goes once no grace and no finalizer is left.
    fn delete_again(
        &mut self,
        rt: &ResourceType,
        cur: Value,
        mut new: Value,
        grace: i64,
        dry_run: bool,
    ) -> (Value, bool) {
        let cur_grace = grace_seconds(&cur);
        if is_pod(rt) && grace < cur_grace {
            let m = meta::meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(meta::now_plus(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
        if dry_run || new == cur {
            return (events::to_served(&cur, rt), false);
        }
        if grace_seconds(&new) == 0 && meta::finalizers(&new).is_empty() && !is_namespace(rt) {
            let last = self.remove(rt, new);
            return (events::to_served(&last, rt), true);
        }
        let stored = self.commit(rt, EventType::Modified, new);
        (events::to_served(&stored, rt), false)
    }

    /// Stores an object marked for deletion; a namespace or a CRD then deletes what it holds,
    /// which may complete its own deletion at once.
    fn start_deleting(&mut self, rt: &ResourceType, name: &str, new: Value) -> (Value, bool) {
        let stored = self.commit(rt, EventType::Modified, new);
        if is_namespace(rt) {
            self.empty_namespace(name);
            let now = self.stored(rt, "", name);
            let gone = now.is_none();
            let object = now
                .map(|o| events::to_served(o, rt))
                .unwrap_or_else(|| events::to_served(&stored, rt));
            return (object, gone);
        }
        if is_crd_type(rt) {
            self.empty_crd(&stored);
            let gone = self.stored(rt, "", name).is_none();
            return (events::to_served(&stored, rt), gone);
        }
        (events::to_served(&stored, rt), false)
    }
}

fn is_pod(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

fn is_namespace(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "namespaces"
}

fn grace_seconds(obj: &Value) -> i64 {
    meta::at(obj, &["metadata", "deletionGracePeriodSeconds"])
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The uid and resourceVersion preconditions of the request (409 when one fails).
fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    cur: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.precondition_uid
        && uid != meta::uid(cur)
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::uid(cur)
            ),
        ));
    }
    if let Some(rv) = &opts.precondition_resource_version
        && rv != meta::resource_version(cur)
    {
        return Err(ApiError::conflict(
            rt,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::resource_version(cur)
            ),
        ));
    }
    Ok(())
}

/// The propagation policy and grace period of the request must be valid (422).
fn check_options(rt: &ResourceType, name: &str, opts: &DeleteOptions) -> Result<(), ApiError> {
    if let Some(policy) = &opts.propagation_policy
        && !matches!(policy.as_str(), "Background" | "Foreground" | "Orphan")
    {
        return Err(ApiError::invalid(
            rt,
            name,
            vec![Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
            )],
        ));
    }
    if let Some(g) = opts.grace_period_seconds
        && g < 0
    {
        return Err(ApiError::invalid(
            rt,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "gracePeriodSeconds",
                format!("Invalid value: {g}: must be >= 0"),
            )],
        ));
    }
    Ok(())
}

/// Seconds the object may take to go: only a pod running on a node gets any (the request's,
/// else its spec's, else 30); an unscheduled or finished pod has nothing to stop.
fn grace_period(rt: &ResourceType, cur: &Value, opts: &DeleteOptions) -> i64 {
    if !is_pod(rt) {
        return 0;
    }
    let scheduled = meta::str_at(cur, &["spec", "nodeName"]).is_some_and(|n| !n.is_empty());
    let finished = matches!(
        meta::str_at(cur, &["status", "phase"]),
        Some("Succeeded") | Some("Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    opts.grace_period_seconds
        .or_else(|| {
            meta::at(cur, &["spec", "terminationGracePeriodSeconds"]).and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
}

/// The finalizers after a delete with `policy`: Foreground and Orphan add theirs (and drop
/// the other's), Background drops both, no policy leaves them as they are.
fn finalizers_after(cur: &Value, policy: Option<&str>) -> Vec<String> {
    let mut finalizers = meta::finalizers(cur);
    match policy {
        Some("Foreground") => swap(&mut finalizers, "orphan", "foregroundDeletion"),
        Some("Orphan") => swap(&mut finalizers, "foregroundDeletion", "orphan"),
        Some(_) => finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion"),
        None => {}
    }
    finalizers
}

/// Drops finalizer `drop` and adds `add` unless present.
fn swap(finalizers: &mut Vec<String>, drop: &str, add: &str) {
    finalizers.retain(|f| f != drop);
    if !finalizers.iter().any(|f| f == add) {
        finalizers.push(add.into());
    }
}

/// Sets the deletion timestamp (now plus the grace period) and what goes with it: a new
/// generation, a namespace's `Terminating` phase, a CRD's `Terminating` condition.
fn mark_deleting(rt: &ResourceType, new: &mut Value, grace: i64) {
    {
        let m = meta::meta_mut(new);
        let at = if grace > 0 {
            meta::now_plus(grace)
        } else {
            meta::now()
        };
        m.insert("deletionTimestamp".into(), json!(at));
        m.insert("deletionGracePeriodSeconds".into(), json!(grace));
        if rt.has_generation {
            let generation = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
            m.insert("generation".into(), json!(generation + 1));
        }
    }
    if is_namespace(rt) {
        meta::set_path(new, ".status.phase", json!("Terminating"));
    }
    if is_crd_type(rt) {
        crd::mark_terminating(new);
    }
}
