//! PUT and PATCH (merge, JSON and strategic merge patches), and the tail every update shares,
//! server-side apply and `/scale` writes included.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Managed, State, Sub, WriteOptions, WriteResult, check_type, custom_checks, is_crd_type,
};
use crate::store::error::{ApiError, Cause};
use crate::store::fields::{self, Hints};
use crate::store::patch::{self, PatchKind};
use crate::store::types::ResourceType;
use crate::store::{EventType, crd, defaults, events, meta, validation};

/// Metadata only the server sets: an update keeps the stored values whatever the body says.
const SYSTEM_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
];

impl State {
    /// PUT of the main resource or of `/status`.
    pub(crate) fn replace(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        obj: Value,
        opts: &WriteOptions,
        sub: Sub,
    ) -> Result<WriteResult, ApiError> {
        let obj = check_type(rt, obj)?;
        let body_name = meta::name(&obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let ns = if rt.namespaced {
            let body_ns = meta::namespace(&obj);
            match (ns, body_ns) {
                ("", b) => b.to_string(),
                (u, b) if b.is_empty() || u == b => u.to_string(),
                _ => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        } else {
            String::new()
        };
        let cur = self.current(rt, &ns, name)?;
        let rv = meta::resource_version(&obj);
        if rv.is_empty() {
            if rt.is_custom() && !opts.allow_unconditional {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )],
                ));
            }
        } else if rv != meta::resource_version(&cur) {
            return Err(ApiError::stale(rt, name));
        }
        let obj = events::to_storage(obj, rt);
        let new = merge_for_sub(rt, &cur, obj, sub);
        self.finish_update(rt, cur, new, opts, sub, Managed::Update)
    }

    /// PATCH with merge, json or strategic merge patch (server-side apply goes to `apply`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOptions,
        sub: Sub,
    ) -> Result<WriteResult, ApiError> {
        if kind == PatchKind::Apply {
            return self.apply(rt, ns, name, body, opts, sub);
        }
        if kind == PatchKind::Strategic && rt.is_custom() {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
            ));
        }
        let cur = self.current(rt, ns, name)?;
        let served = events::to_served(&cur, rt);
        let patched = patch::apply_patch(kind, &served, body, &Hints::for_type(rt))
            .map_err(|e| e.about_object(rt, name))?;
        let rv = meta::resource_version(&patched);
        if !rv.is_empty() && rv != meta::resource_version(&cur) {
            return Err(ApiError::stale(rt, name));
        }
        if meta::name(&patched) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name(&patched)
            )));
        }
        let patched = check_type(rt, patched)?;
        let patched = events::to_storage(patched, rt);
        let new = merge_for_sub(rt, &cur, patched, sub);
        self.finish_update(rt, cur, new, opts, sub, Managed::Update)
    }

    /// The shared tail of every update: system metadata, finalizer rules, admission,
    /// generation, managedFields, then storing it (unless nothing changed).
    pub(super) fn finish_update(
        &mut self,
        rt: &Arc<ResourceType>,
        cur: Value,
        mut new: Value,
        opts: &WriteOptions,
        sub: Sub,
        managed: Managed,
    ) -> Result<WriteResult, ApiError> {
        let name = meta::name(&cur).to_string();
        meta::drop_empty_metadata(&mut new);
        keep_system_metadata(&cur, &mut new);
        forbid_new_finalizers_while_deleting(rt, &name, &cur, &new)?;
        let warnings = admit(rt, &cur, &mut new, &name, opts, sub)?;
        if rt.has_generation && spec_changed(rt, &cur, &new) {
            let generation = meta::at(&cur, &["metadata", "generation"])
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        let managed_fields = match managed {
            Managed::Preset(list) => list,
            Managed::Update => update_entry(rt, &cur, &new, opts, sub),
        };
        fields::set_managed(&mut new, managed_fields);
        Ok(self.store_update(rt, cur, new, opts, warnings))
    }

    /// Stores an admitted update: nothing for a no-op or a dry run, the removal for an
    /// object whose deletion it completes (its last finalizer gone), else the new object.
    fn store_update(
        &mut self,
        rt: &ResourceType,
        cur: Value,
        new: Value,
        opts: &WriteOptions,
        warnings: Vec<String>,
    ) -> WriteResult {
        if fields::same_ignoring_times(&cur, &new) {
            return updated(rt, &cur, warnings);
        }
        if opts.dry_run {
            return updated(rt, &new, warnings);
        }
        let deleting = meta::at(&new, &["metadata", "deletionTimestamp"]).is_some();
        let grace = meta::at(&new, &["metadata", "deletionGracePeriodSeconds"])
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if deleting && grace == 0 && meta::finalizers(&new).is_empty() {
            let last = self.remove(rt, new);
            return updated(rt, &last, warnings);
        }
        self.commit_write(rt, EventType::Modified, new, warnings)
    }
}

/// The answer to an update that stored `object` (or, for a no-op or dry run, did not).
fn updated(rt: &ResourceType, object: &Value, warnings: Vec<String>) -> WriteResult {
    WriteResult {
        object: events::to_served(object, rt),
        warnings,
        created: false,
    }
}

/// Copies the server-set metadata of `cur` over whatever `new` carries.
fn keep_system_metadata(cur: &Value, new: &mut Value) {
    let m = meta::meta_mut(new);
    for field in SYSTEM_METADATA {
        match meta::at(cur, &["metadata", field]) {
            Some(v) => {
                m.insert(field.into(), v.clone());
            }
            None => {
                m.remove(field);
            }
        }
    }
    m.remove("selfLink");
}

/// An object being deleted may lose finalizers but gain none.
fn forbid_new_finalizers_while_deleting(
    rt: &ResourceType,
    name: &str,
    cur: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if meta::at(cur, &["metadata", "deletionTimestamp"]).is_none() {
        return Ok(());
    }
    let old = meta::finalizers(cur);
    let added: Vec<String> = meta::finalizers(new)
        .into_iter()
        .filter(|f| !old.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let quoted = added
        .iter()
        .map(|f| format!("{f:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Err(ApiError::invalid(
        rt,
        name,
        vec![Cause::new(
            "FieldValueForbidden",
            "metadata.finalizers",
            format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{quoted}}}"
            ),
        )],
    ))
}

/// Defaults and admission of an updated object; returns the warnings to send.
fn admit(
    rt: &ResourceType,
    cur: &Value,
    new: &mut Value,
    name: &str,
    opts: &WriteOptions,
    sub: Sub,
) -> Result<Vec<String>, ApiError> {
    defaults::apply(rt, new, Some(cur));
    let mut warnings = Vec::new();
    custom_checks(rt, new, opts, &mut warnings)?;
    if is_crd_type(rt) {
        crd::prepare_update(rt, cur, new, sub)?;
    }
    let causes = validation::validate(rt, new, Some(cur));
    if !causes.is_empty() {
        return Err(ApiError::invalid(rt, name, causes));
    }
    Ok(warnings)
}

/// managedFields after an Update by the request's manager: it takes over what it changed.
/// Its base is the list the client sent with a main-resource write, else the stored one.
fn update_entry(
    rt: &ResourceType,
    cur: &Value,
    new: &Value,
    opts: &WriteOptions,
    sub: Sub,
) -> Vec<Value> {
    let given = fields::managed_of(new);
    let base = if given.is_empty() || sub != Sub::Main {
        fields::managed_of(cur)
    } else {
        given
    };
    fields::record_update(
        base,
        cur,
        new,
        &opts.manager,
        sub.name(),
        &rt.api_version(),
        &Hints::for_type(rt),
    )
}

/// Builds the object a write through `sub` produces from the current object and the body.
pub(super) fn merge_for_sub(rt: &ResourceType, cur: &Value, body: Value, sub: Sub) -> Value {
    match sub {
        Sub::Main | Sub::Scale => {
            let mut new = body;
            if rt.status_subresource
                && let Some(map) = new.as_object_mut()
            {
                match cur.get("status") {
                    Some(s) => {
                        map.insert("status".into(), s.clone());
                    }
                    None => {
                        map.remove("status");
                    }
                }
            }
            new
        }
        Sub::Status => {
            let mut new = cur.clone();
            let map = new.as_object_mut().expect("stored objects are maps");
            match body.get("status") {
                Some(s) => {
                    map.insert("status".into(), s.clone());
                }
                None => {
                    map.remove("status");
                }
            }
            if let Some(mf) = meta::at(&body, &["metadata", "managedFields"]) {
                meta::meta_mut(&mut new).insert("managedFields".into(), mf.clone());
            }
            new
        }
    }
}

/// Whether anything outside metadata (and status, for types with a status subresource)
/// differs.
fn spec_changed(rt: &ResourceType, cur: &Value, new: &Value) -> bool {
    match (cur.as_object(), new.as_object()) {
        (Some(c), Some(n)) => !fields::eq_except(c, n, |k| {
            k == "metadata" || (rt.status_subresource && k == "status")
        }),
        _ => cur != new,
    }
}
