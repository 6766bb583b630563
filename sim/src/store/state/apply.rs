//! Server-side apply requests (`application/apply-patch+yaml`): the configuration is checked
//! against the URL, merged by [`store::apply`](crate::store::apply) and then created or
//! stored like any other write.

use std::sync::Arc;

use serde_json::{Value, json};

use super::update::merge_for_sub;
use super::{Managed, State, Sub, WriteOptions, WriteResult, check_type};
use crate::store::apply::{self as ssa, Outcome};
use crate::store::error::{ApiError, Cause};
use crate::store::fields::{self, Hints};
use crate::store::types::ResourceType;
use crate::store::{events, meta};

impl State {
    /// Server-side apply of `config` to `name`, creating it when missing.
    pub(super) fn apply(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        config: &Value,
        opts: &WriteOptions,
        sub: Sub,
    ) -> Result<WriteResult, ApiError> {
        if opts.manager.is_empty() {
            return Err(ApiError::invalid(
                rt,
                name,
                vec![Cause::new(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                )],
            ));
        }
        let mut config = check_type(rt, config.clone())?;
        // A configuration may leave the name out (kube-rs status patches do); the URL names it.
        if meta::name(&config).is_empty() {
            meta::meta_mut(&mut config).insert("name".into(), json!(name));
        }
        let cfg_name = meta::name(&config);
        if cfg_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({cfg_name}) does not match the name on the URL ({name})"
            )));
        }
        let cur = self.stored(rt, ns, name).cloned();
        let rv = meta::resource_version(&config).to_string();
        if !rv.is_empty() {
            match &cur {
                Some(c) if meta::resource_version(c) == rv => {}
                Some(_) => return Err(ApiError::stale(rt, name)),
                // An apply that creates ignores it, as kube-apiserver does.
                None => {
                    meta::meta_mut(&mut config).remove("resourceVersion");
                }
            }
        }
        match cur {
            None => self.apply_create(rt, ns, name, &config, opts, sub),
            Some(cur) => self.apply_update(rt, cur, name, &config, opts, sub),
        }
    }

    /// An apply to a missing object creates it (only through the main resource).
    fn apply_create(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        config: &Value,
        opts: &WriteOptions,
        sub: Sub,
    ) -> Result<WriteResult, ApiError> {
        if sub != Sub::Main {
            return Err(ApiError::not_found(rt, name));
        }
        let outcome = merge(rt, &Value::Null, config, &[], opts, sub)
            .map_err(|e| e.about_object(rt, name))?;
        let mut obj = outcome.object;
        if rt.namespaced && meta::namespace(&obj).is_empty() {
            meta::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
        }
        self.create_with(rt, ns, obj, opts, Managed::Preset(outcome.managed))
    }

    /// An apply to a stored object: merged into its served form, then stored as an update.
    fn apply_update(
        &mut self,
        rt: &Arc<ResourceType>,
        cur: Value,
        name: &str,
        config: &Value,
        opts: &WriteOptions,
        sub: Sub,
    ) -> Result<WriteResult, ApiError> {
        let served = events::to_served(&cur, rt);
        let managed = fields::managed_of(&served);
        let outcome = merge(rt, &served, config, &managed, opts, sub)
            .map_err(|e| e.about_object(rt, name))?;
        let new = events::to_storage(outcome.object, rt);
        let new = merge_for_sub(rt, &cur, new, sub);
        self.finish_update(rt, cur, new, opts, sub, Managed::Preset(outcome.managed))
    }
}

/// [`ssa::apply`] of `config` over `live` on behalf of the request's manager.
fn merge(
    rt: &ResourceType,
    live: &Value,
    config: &Value,
    managed: &[Value],
    opts: &WriteOptions,
    sub: Sub,
) -> Result<Outcome, ApiError> {
    ssa::apply(
        live,
        config,
        managed,
        &opts.manager,
        sub,
        &rt.api_version(),
        &Hints::for_type(rt),
        rt,
        opts.force,
    )
}
