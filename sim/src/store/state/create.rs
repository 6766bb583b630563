//! POST: a new object gets its namespace and name, the metadata only the server sets,
//! defaults, admission checks and its first managedFields entry.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Managed, State, WriteOptions, WriteResult, check_type, custom_checks, is_crd_type};
use crate::store::error::{ApiError, Cause};
use crate::store::fields::{self, Hints};
use crate::store::types::ResourceType;
use crate::store::{EventType, crd, defaults, events, meta, validation};

impl State {
    /// POST: creates an object (server-side apply of a missing object passes `managed`).
    pub(crate) fn create(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        self.create_with(rt, ns, obj, opts, Managed::Update)
    }

    pub(crate) fn create_with(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        obj: Value,
        opts: &WriteOptions,
        managed: Managed,
    ) -> Result<WriteResult, ApiError> {
        let mut obj = check_type(rt, obj)?;
        meta::drop_empty_metadata(&mut obj);
        let ns = namespace_of_new(rt, ns, &mut obj)?;
        let name = self.name_of_new(rt, &ns, &mut obj)?;
        validate_name(rt, &name)?;
        self.namespace_check(rt, &ns, &name)?;
        if self.stored(rt, &ns, &name).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        let mut obj = events::to_storage(obj, rt);
        set_server_fields(rt, &mut obj);
        let warnings = admit(rt, &mut obj, &name, opts)?;
        let managed_fields = match managed {
            Managed::Preset(list) => list,
            Managed::Update => first_update_entry(rt, &obj, opts),
        };
        fields::set_managed(&mut obj, managed_fields);
        if opts.dry_run {
            return Ok(WriteResult {
                object: events::to_served(&obj, rt),
                warnings,
                created: true,
            });
        }
        Ok(self.commit_write(rt, EventType::Added, obj, warnings))
    }

    /// The name of a new object: `metadata.name`, else one generated from `generateName`
    /// that no stored object has.
    fn name_of_new(
        &self,
        rt: &ResourceType,
        ns: &str,
        obj: &mut Value,
    ) -> Result<String, ApiError> {
        let name = meta::name(obj).to_string();
        if !name.is_empty() {
            return Ok(name);
        }
        let prefix = meta::str_at(obj, &["metadata", "generateName"])
            .unwrap_or("")
            .to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                rt,
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )],
            ));
        }
        let name = loop {
            let candidate = meta::generate_name(&prefix);
            if self.stored(rt, ns, &candidate).is_none() {
                break candidate;
            }
        };
        meta::meta_mut(obj).insert("name".into(), json!(name));
        Ok(name)
    }

    /// New objects go only into namespaces that exist and are not terminating.
    fn namespace_check(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let ns_type = self.registry.by_gvk("v1", "Namespace").expect("built in");
        match self.stored(&ns_type, "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if meta::at(n, &["metadata", "deletionTimestamp"]).is_some() => {
                Err(ApiError::forbidden(
                    rt,
                    name,
                    &format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    ),
                ))
            }
            Some(_) => Ok(()),
        }
    }
}

/// The namespace of a new object, from the URL (`ns`) or the body, which must agree; sets it
/// in the body (or drops it, for cluster-scoped kinds).
fn namespace_of_new(rt: &ResourceType, ns: &str, obj: &mut Value) -> Result<String, ApiError> {
    if !rt.namespaced {
        meta::meta_mut(obj).remove("namespace");
        return Ok(String::new());
    }
    let body_ns = meta::namespace(obj).to_string();
    let ns = match (ns, body_ns.as_str()) {
        ("", "") => "default".to_string(),
        ("", b) => b.to_string(),
        (u, "") => u.to_string(),
        (u, b) if u == b => u.to_string(),
        _ => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    };
    meta::meta_mut(obj).insert("namespace".into(), json!(ns));
    Ok(ns)
}

/// Replaces what only the server sets (uid, creation time, generation) and drops what a
/// client may not send to a create (resourceVersion, deletion, status behind `/status`).
fn set_server_fields(rt: &ResourceType, obj: &mut Value) {
    let m = meta::meta_mut(obj);
    m.remove("resourceVersion");
    m.remove("deletionTimestamp");
    m.remove("deletionGracePeriodSeconds");
    m.remove("selfLink");
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(meta::now()));
    if rt.has_generation {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    if rt.status_subresource
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("status");
    }
}

/// Defaults and admission of a new object; returns the warnings to send.
fn admit(
    rt: &ResourceType,
    obj: &mut Value,
    name: &str,
    opts: &WriteOptions,
) -> Result<Vec<String>, ApiError> {
    defaults::apply(rt, obj, None);
    let mut warnings = Vec::new();
    custom_checks(rt, obj, opts, &mut warnings)?;
    if is_crd_type(rt) {
        crd::prepare_create(rt, obj)?;
    }
    let causes = validation::validate(rt, obj, None);
    if !causes.is_empty() {
        return Err(ApiError::invalid(rt, name, causes));
    }
    Ok(warnings)
}

/// managedFields of a created object: those the client sent, else one Update entry of the
/// request's manager owning every field.
fn first_update_entry(rt: &ResourceType, obj: &Value, opts: &WriteOptions) -> Vec<Value> {
    let given = fields::managed_of(obj);
    if !given.is_empty() {
        return given;
    }
    fields::record_update(
        Vec::new(),
        &Value::Null,
        obj,
        &opts.manager,
        None,
        &rt.api_version(),
        &Hints::for_type(rt),
    )
}

fn validate_name(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    let ok = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => meta::is_dns_label(name),
        ("rbac.authorization.k8s.io", _) => {
            name != "." && name != ".." && !name.contains('/') && !name.contains('%')
        }
        _ => meta::is_dns_subdomain(name),
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            rt,
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "metadata.name",
                format!(
                    "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            )],
        ))
    }
}
