//! The locked state behind [`Store`](super::Store) and the write pipeline every path shares.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::error::{ApiError, Cause};
use super::fields::{self, Hints};
use super::patch::{self, PatchKind};
use super::types::{Registry, ResourceType};
use super::watch::{Change, History, WatchStart};
use super::{
    DeleteOptions, EventType, StoreEvent, apply, crd, defaults, events, meta, schema, validation,
};
use super::{FieldSelector, LabelSelector};

/// Which endpoint a write came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sub {
    /// The object itself: `.status` is ignored for types with a status subresource.
    Main,
    /// `/status`: only `.status` is taken.
    Status,
    /// `/scale`: only the replicas.
    Scale,
}

impl Sub {
    pub(crate) fn name(self) -> Option<&'static str> {
        match self {
            Sub::Main => None,
            Sub::Status => Some("status"),
            Sub::Scale => Some("scale"),
        }
    }
}

/// `fieldValidation` of a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields and report them as warnings (the server default).
    #[default]
    Warn,
    /// Reject unknown fields with 400.
    Strict,
}

/// Per-request write settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct WriteOptions {
    /// Field manager recorded in managedFields.
    pub manager: String,
    /// `dryRun=All`: full processing, nothing stored.
    pub dry_run: bool,
    /// How unknown fields of custom resources are treated.
    pub field_validation: FieldValidation,
    /// Whether a replace without resourceVersion is accepted for custom resources.
    pub allow_unconditional: bool,
    /// Server-side apply `force=true`.
    pub force: bool,
}

/// What a write returns: the object and the warnings to send as `Warning` headers.
#[derive(Clone, Debug)]
pub(crate) struct WriteResult {
    pub object: Value,
    pub warnings: Vec<String>,
    pub created: bool,
}

/// One page of a list.
pub(crate) struct ListPage {
    /// The objects in the listed version, shared with the store.
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// How managedFields are maintained by a write.
pub(crate) enum Managed {
    /// An Update operation by the request's manager.
    Update,
    /// Already computed (server-side apply).
    Preset(Vec<Value>),
}

type Key = (String, String);

const MAX_PAGE_SNAPSHOTS: usize = 64;

/// Everything behind the store lock.
pub(crate) struct State {
    rv: u64,
    registry: Registry,
    /// Objects are immutable once stored: a write stores a new `Arc`, so lists, page
    /// snapshots, the watch history and controllers share them instead of copying.
    buckets: BTreeMap<String, BTreeMap<Key, Arc<Value>>>,
    history: History,
    events: broadcast::Sender<StoreEvent>,
    pages: BTreeMap<u64, (u64, Vec<Arc<Value>>)>,
    next_page_id: u64,
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

impl State {
    pub(crate) fn new() -> Self {
        let (events, _) = broadcast::channel(16384);
        let mut state = Self {
            rv: 0,
            registry: Registry::with_builtins(),
            buckets: BTreeMap::new(),
            history: History::new(),
            events,
            pages: BTreeMap::new(),
            next_page_id: 1,
        };
        let ns_type = state
            .registry
            .by_gvk("v1", "Namespace")
            .expect("Namespace is built in");
        let opts = WriteOptions {
            manager: "kube-apiserver".into(),
            ..WriteOptions::default()
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            state
                .create(&ns_type, "", obj, &opts)
                .expect("default namespaces are valid");
        }
        state
    }

    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    pub(crate) fn resource_type(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.registry.by_gvk(api_version, kind)
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    pub(crate) fn compact(&mut self) {
        self.history.compact(self.rv);
        self.pages.clear();
    }

    fn bucket(&self, rt: &ResourceType) -> Option<&BTreeMap<Key, Arc<Value>>> {
        self.buckets.get(&rt.storage)
    }

    fn stored(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<&Value> {
        self.stored_shared(rt, ns, name).map(Arc::as_ref)
    }

    fn stored_shared(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<&Arc<Value>> {
        let ns = if rt.namespaced { ns } else { "" };
        self.bucket(rt)?.get(&key(ns, name))
    }

    /// The stored objects of one namespace (or all, with `None`) whose names start with
    /// `prefix`, in storage form, ordered by namespace and name. Scans only that key range.
    fn scan<'a>(
        &'a self,
        rt: &ResourceType,
        ns: Option<&'a str>,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let ns = ns.filter(|_| rt.namespaced);
        let start = key(ns.unwrap_or(""), prefix);
        self.bucket(rt)
            .into_iter()
            .flat_map(move |b| b.range(start.clone()..))
            .take_while(move |((ons, name), _)| {
                ns.is_none_or(|n| ons.as_str() == n) && (ns.is_none() || name.starts_with(prefix))
            })
            .filter(move |((_, name), _)| name.starts_with(prefix))
            .map(|(_, o)| o)
    }

    /// Like [`State::list_all`], sharing the objects instead of copying them.
    pub(crate) fn list_shared(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Arc<Value>> {
        self.scan(rt, ns, "")
            .map(|o| events::served_shared(o, rt))
            .collect()
    }

    /// The objects of one namespace whose names start with `prefix`, in `rt`'s version.
    pub(crate) fn list_prefixed(
        &self,
        rt: &ResourceType,
        ns: &str,
        prefix: &str,
    ) -> Vec<Arc<Value>> {
        self.scan(rt, Some(ns), prefix)
            .map(|o| events::served_shared(o, rt))
            .collect()
    }

    /// The object in `rt`'s version, shared with the store.
    pub(crate) fn get_shared(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.stored_shared(rt, ns, name)
            .map(|o| events::served_shared(o, rt))
    }

    /// The object in `rt`'s version, or 404.
    pub(crate) fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.stored(rt, ns, name)
            .map(|o| events::to_served(o, rt))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// All objects of a type (one namespace or all), in `rt`'s version.
    pub(crate) fn list_all(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        self.scan(rt, ns, "")
            .map(|o| events::to_served(o, rt))
            .collect()
    }

    /// One page of a filtered list; later pages come from a snapshot taken by the first.
    pub(crate) fn list_page(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let (rv, items) = match continue_token {
            Some(token) => {
                let id = parse_continue(token)?;
                self.pages.remove(&id).ok_or_else(|| {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
                })?
            }
            None => {
                let items = self
                    .scan(rt, ns, "")
                    .map(|o| events::served_shared(o, rt))
                    .filter(|o| labels.matches(o) && fields.matches(o))
                    .collect();
                (self.rv, items)
            }
        };
        let selecting = !labels.is_empty();
        match limit {
            Some(limit) if limit > 0 && items.len() > limit => {
                let mut items = items;
                let rest = items.split_off(limit);
                let remaining = rest.len();
                let id = self.next_page_id;
                self.next_page_id += 1;
                self.pages.insert(id, (rv, rest));
                while self.pages.len() > MAX_PAGE_SNAPSHOTS {
                    let oldest = *self.pages.keys().next().expect("non-empty");
                    self.pages.remove(&oldest);
                }
                Ok(ListPage {
                    items,
                    resource_version: rv,
                    continue_token: Some(make_continue(rv, id)),
                    remaining: (!selecting).then_some(remaining),
                })
            }
            _ => Ok(ListPage {
                items,
                resource_version: rv,
                continue_token: None,
                remaining: None,
            }),
        }
    }

    /// Starts a watch of `rt` from a resourceVersion (`None` or 0: from the current state).
    pub(crate) fn watch(
        &self,
        rt: &ResourceType,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let rx = self.history.subscribe();
        match from {
            None | Some(0) => Ok(WatchStart {
                initial: self.list_shared(rt, None),
                backlog: Vec::new(),
                rx,
                rv: self.rv,
            }),
            Some(from) => {
                let backlog = self.history.since(from, &rt.storage).ok_or_else(|| {
                    ApiError::expired(format!(
                        "too old resource version: {from} ({})",
                        self.history.compacted() + 1
                    ))
                })?;
                Ok(WatchStart {
                    initial: Vec::new(),
                    backlog,
                    rx,
                    rv: self.rv,
                })
            }
        }
    }

    /// For an open watch: the changes of `rt` after `rv` and the resourceVersion they reach,
    /// or 410 when some aged out of the history before the watch delivered them.
    pub(crate) fn watch_changes(
        &self,
        rt: &ResourceType,
        rv: u64,
    ) -> Result<(Vec<Arc<Change>>, u64), ApiError> {
        match self.history.following(rv, &rt.storage) {
            Some(changes) => Ok((changes, self.rv)),
            None => Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                self.history.compacted() + 1
            ))),
        }
    }

    /// Commits a create or update, keeps the served CRD resources in step with a write of a
    /// CustomResourceDefinition, and answers with the object in its served form.
    fn commit_write(
        &mut self,
        rt: &ResourceType,
        event_type: EventType,
        obj: Value,
        warnings: Vec<String>,
    ) -> WriteResult {
        let created = event_type == EventType::Added;
        let stored = self.commit(rt, event_type, obj);
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            self.sync_crd(&stored);
        }
        WriteResult {
            object: events::to_served(&stored, rt),
            warnings,
            created,
        }
    }

    fn commit(&mut self, rt: &ResourceType, event_type: EventType, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let ns = if rt.namespaced {
            meta::namespace(&obj).to_string()
        } else {
            String::new()
        };
        let k = key(&ns, meta::name(&obj));
        let obj = Arc::new(obj);
        let bucket = self.buckets.entry(rt.storage.clone()).or_default();
        let prev = if event_type == EventType::Deleted {
            bucket.remove(&k)
        } else {
            bucket.insert(k, obj.clone())
        };
        let change = Arc::new(Change {
            rv: self.rv,
            storage: rt.storage.clone(),
            prev,
            event_type: event_type.clone(),
            object: obj.clone(),
        });
        self.history.push(change);
        let _ = self.events.send(StoreEvent {
            event_type,
            object: obj.clone(),
        });
        obj
    }

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

    fn hints(&self, rt: &ResourceType) -> Hints {
        Hints::for_type(rt)
    }

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
        let ns = if rt.namespaced {
            let body_ns = meta::namespace(&obj).to_string();
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
            meta::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
            ns
        } else {
            meta::meta_mut(&mut obj).remove("namespace");
            String::new()
        };
        let mut name = meta::name(&obj).to_string();
        if name.is_empty() {
            let prefix = meta::str_at(&obj, &["metadata", "generateName"])
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
            loop {
                name = meta::generate_name(&prefix);
                if self.stored(rt, &ns, &name).is_none() {
                    break;
                }
            }
            meta::meta_mut(&mut obj).insert("name".into(), json!(name));
        }
        validate_name(rt, &name)?;
        self.namespace_check(rt, &ns, &name)?;
        if self.stored(rt, &ns, &name).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        let mut obj = events::to_storage(obj, rt);
        {
            let m = meta::meta_mut(&mut obj);
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
        }
        if rt.status_subresource
            && let Some(map) = obj.as_object_mut()
        {
            map.remove("status");
        }
        defaults::apply(rt, &mut obj, None);
        let mut warnings = Vec::new();
        self.custom_checks(rt, &mut obj, opts, &mut warnings)?;
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            crd::prepare_create(rt, &mut obj)?;
        }
        let causes = validation::validate(rt, &obj, None);
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &name, causes));
        }
        let hints = self.hints(rt);
        let managed_fields = match managed {
            Managed::Preset(list) => list,
            Managed::Update => {
                let given = meta::at(&obj, &["metadata", "managedFields"])
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if given.is_empty() {
                    fields::record_update(
                        Vec::new(),
                        &Value::Null,
                        &obj,
                        &opts.manager,
                        None,
                        &rt.api_version(),
                        &hints,
                    )
                } else {
                    given
                }
            }
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

    /// Validates, prunes and defaults a custom resource against its CRD schema.
    fn custom_checks(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let Some(schema) = &rt.schema else {
            return Ok(());
        };
        let unknown = schema::prune(schema, obj);
        if !unknown.is_empty() {
            match opts.field_validation {
                FieldValidation::Strict => {
                    let list = unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {list}",
                        kind = rt.kind,
                        version = rt.version,
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
                }
                FieldValidation::Ignore => {}
            }
        }
        schema::default(schema, obj);
        let causes = schema::validate(schema, obj);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(rt, meta::name(obj), causes))
        }
    }

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
        let cur = self
            .stored(rt, &ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
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
        let cur = self
            .stored(rt, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let served = events::to_served(&cur, rt);
        let patched = patch::apply_patch(kind, &served, body, &self.hints(rt))
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

    /// Server-side apply (`application/apply-patch+yaml`).
    fn apply(
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
        let hints = self.hints(rt);
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
        let api_version = rt.api_version();
        match cur {
            None => {
                if sub != Sub::Main {
                    return Err(ApiError::not_found(rt, name));
                }
                let outcome = apply::apply(
                    &Value::Null,
                    &config,
                    &[],
                    &opts.manager,
                    sub,
                    &api_version,
                    &hints,
                    rt,
                    opts.force,
                )
                .map_err(|e| e.about_object(rt, name))?;
                let mut obj = outcome.object;
                if rt.namespaced && meta::namespace(&obj).is_empty() {
                    meta::meta_mut(&mut obj).insert("namespace".into(), json!(ns));
                }
                self.create_with(rt, ns, obj, opts, Managed::Preset(outcome.managed))
            }
            Some(cur) => {
                let served = events::to_served(&cur, rt);
                let managed = fields::managed_of(&served);
                let outcome = apply::apply(
                    &served,
                    &config,
                    &managed,
                    &opts.manager,
                    sub,
                    &api_version,
                    &hints,
                    rt,
                    opts.force,
                )
                .map_err(|e| e.about_object(rt, name))?;
                let new = events::to_storage(outcome.object, rt);
                let new = merge_for_sub(rt, &cur, new, sub);
                self.finish_update(rt, cur, new, opts, sub, Managed::Preset(outcome.managed))
            }
        }
    }

    /// The shared tail of every update: system metadata, finalizer rules, schema, generation,
    /// managedFields, no-op detection, deletion completion, commit.
    fn finish_update(
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
        {
            let m = meta::meta_mut(&mut new);
            for field in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ] {
                match meta::at(&cur, &["metadata", field]) {
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
        if meta::at(&cur, &["metadata", "deletionTimestamp"]).is_some() {
            let old = meta::finalizers(&cur);
            let added: Vec<String> = meta::finalizers(&new)
                .into_iter()
                .filter(|f| !old.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                            added
                                .iter()
                                .map(|f| format!("{f:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )],
                ));
            }
        }
        defaults::apply(rt, &mut new, Some(&cur));
        let mut warnings = Vec::new();
        self.custom_checks(rt, &mut new, opts, &mut warnings)?;
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            crd::prepare_update(rt, &cur, &mut new, sub)?;
        }
        let causes = validation::validate(rt, &new, Some(&cur));
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &name, causes));
        }
        if rt.has_generation && spec_changed(rt, &cur, &new) {
            let generation = meta::at(&cur, &["metadata", "generation"])
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        let hints = self.hints(rt);
        let managed_fields = match managed {
            Managed::Preset(list) => list,
            Managed::Update => {
                let given = meta::at(&new, &["metadata", "managedFields"])
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let base = if given.is_empty() || sub != Sub::Main {
                    fields::managed_of(&cur)
                } else {
                    given
                };
                fields::record_update(
                    base,
                    &cur,
                    &new,
                    &opts.manager,
                    sub.name(),
                    &rt.api_version(),
                    &hints,
                )
            }
        };
        fields::set_managed(&mut new, managed_fields);
        if fields::same_ignoring_times(&cur, &new) {
            return Ok(WriteResult {
                object: events::to_served(&cur, rt),
                warnings,
                created: false,
            });
        }
        if opts.dry_run {
            return Ok(WriteResult {
                object: events::to_served(&new, rt),
                warnings,
                created: false,
            });
        }
        let deleting = meta::at(&new, &["metadata", "deletionTimestamp"]).is_some();
        let grace = meta::at(&new, &["metadata", "deletionGracePeriodSeconds"])
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if deleting && grace == 0 && meta::finalizers(&new).is_empty() {
            let last = self.remove(rt, new);
            return Ok(WriteResult {
                object: events::to_served(&last, rt),
                warnings,
                created: false,
            });
        }
        Ok(self.commit_write(rt, EventType::Modified, new, warnings))
    }

    /// Removes an object for good and runs what waits on its removal.
    fn remove(&mut self, rt: &ResourceType, obj: Value) -> Arc<Value> {
        let rt = self
            .registry
            .storage_type(&rt.storage)
            .unwrap_or_else(|| Arc::new(rt.clone()));
        let last = self.commit(&rt, EventType::Deleted, obj);
        if rt.namespaced {
            self.maybe_finish_namespace(meta::namespace(&last).to_string());
        }
        if let Some(crd_name) = rt.crd.clone() {
            self.maybe_finish_crd(&crd_name);
        }
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            let name = meta::name(&last).to_string();
            self.registry.set_crd_types(&name, Vec::new());
            let storage = crd::storage_key(&last);
            self.buckets.remove(&storage);
        }
        last
    }

    /// DELETE. Returns the object after the call and whether it is gone.
    pub(crate) fn delete(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        dry_run: bool,
    ) -> Result<(Value, bool), ApiError> {
        let cur = self
            .stored(rt, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if let Some(uid) = &opts.precondition_uid
            && uid != meta::uid(&cur)
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(&cur)
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_resource_version
            && rv != meta::resource_version(&cur)
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta::resource_version(&cur)
                ),
            ));
        }
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
        let is_pod = rt.group.is_empty() && rt.plural == "pods";
        let grace = if is_pod {
            let scheduled =
                meta::str_at(&cur, &["spec", "nodeName"]).is_some_and(|n| !n.is_empty());
            let finished = matches!(
                meta::str_at(&cur, &["status", "phase"]),
                Some("Succeeded") | Some("Failed")
            );
            if !scheduled || finished {
                0
            } else {
                opts.grace_period_seconds
                    .or_else(|| {
                        meta::at(&cur, &["spec", "terminationGracePeriodSeconds"])
                            .and_then(Value::as_i64)
                    })
                    .unwrap_or(30)
            }
        } else {
            0
        };
        let mut new = cur.clone();
        let mut finalizers = meta::finalizers(&cur);
        match opts.propagation_policy.as_deref() {
            Some("Foreground") => {
                finalizers.retain(|f| f != "orphan");
                if !finalizers.iter().any(|f| f == "foregroundDeletion") {
                    finalizers.push("foregroundDeletion".into());
                }
            }
            Some("Orphan") => {
                finalizers.retain(|f| f != "foregroundDeletion");
                if !finalizers.iter().any(|f| f == "orphan") {
                    finalizers.push("orphan".into());
                }
            }
            Some(_) => finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion"),
            None => {}
        }
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        {
            let m = meta::meta_mut(&mut new);
            if finalizers.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), json!(finalizers));
            }
        }
        let already = meta::at(&cur, &["metadata", "deletionTimestamp"]).is_some();
        if !already && !is_namespace && finalizers.is_empty() && grace == 0 {
            if dry_run {
                return Ok((events::to_served(&cur, rt), true));
            }
            let last = self.remove(rt, new);
            return Ok((events::to_served(&last, rt), true));
        }
        if already {
            let cur_grace = meta::at(&cur, &["metadata", "deletionGracePeriodSeconds"])
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if is_pod && grace < cur_grace {
                let m = meta::meta_mut(&mut new);
                m.insert("deletionTimestamp".into(), json!(meta::now_plus(grace)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            let grace_now = meta::at(&new, &["metadata", "deletionGracePeriodSeconds"])
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if dry_run || new == cur {
                return Ok((events::to_served(&cur, rt), false));
            }
            if grace_now == 0 && finalizers.is_empty() && !is_namespace {
                let last = self.remove(rt, new);
                return Ok((events::to_served(&last, rt), true));
            }
            let stored = self.commit(rt, EventType::Modified, new);
            return Ok((events::to_served(&stored, rt), false));
        }
        {
            let m = meta::meta_mut(&mut new);
            m.insert(
                "deletionTimestamp".into(),
                json!(if grace > 0 {
                    meta::now_plus(grace)
                } else {
                    meta::now()
                }),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if rt.has_generation {
                let generation = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                m.insert("generation".into(), json!(generation + 1));
            }
        }
        if is_namespace {
            meta::set_path(&mut new, ".status.phase", json!("Terminating"));
        }
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            crd::mark_terminating(&mut new);
        }
        if dry_run {
            return Ok((events::to_served(&new, rt), false));
        }
        let stored = self.commit(rt, EventType::Modified, new);
        if is_namespace {
            self.empty_namespace(name);
            return Ok((
                self.stored(rt, "", name)
                    .map(|o| events::to_served(o, rt))
                    .unwrap_or_else(|| events::to_served(&stored, rt)),
                self.stored(rt, "", name).is_none(),
            ));
        }
        if rt.crd.is_none() && rt.group == "apiextensions.k8s.io" {
            self.empty_crd(&stored);
            let gone = self.stored(rt, "", name).is_none();
            return Ok((events::to_served(&stored, rt), gone));
        }
        Ok((events::to_served(&stored, rt), false))
    }

    /// Deletes everything in a terminating namespace, then the namespace once empty.
    fn empty_namespace(&mut self, ns: &str) {
        let targets: Vec<(Arc<ResourceType>, String)> = self
            .buckets
            .iter()
            .filter_map(|(storage, objs)| {
                let rt = self.registry.storage_type(storage)?;
                rt.namespaced.then_some((rt, objs))
            })
            .flat_map(|(rt, objs)| {
                objs.keys()
                    .filter(|(ons, _)| ons == ns)
                    .map(move |(_, n)| (rt.clone(), n.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (rt, name) in targets {
            let _ = self.delete(&rt, ns, &name, &DeleteOptions::default(), false);
        }
        self.maybe_finish_namespace(ns.to_string());
    }

    fn maybe_finish_namespace(&mut self, ns: String) {
        let ns_type = self.registry.by_gvk("v1", "Namespace").expect("built in");
        let Some(nso) = self.stored(&ns_type, "", &ns).cloned() else {
            return;
        };
        if meta::at(&nso, &["metadata", "deletionTimestamp"]).is_none()
            || !meta::finalizers(&nso).is_empty()
        {
            return;
        }
        let empty = self.buckets.iter().all(|(storage, objs)| {
            !self
                .registry
                .storage_type(storage)
                .is_some_and(|t| t.namespaced)
                || !objs.keys().any(|(ons, _)| *ons == ns)
        });
        if empty {
            self.remove(&ns_type, nso);
        }
    }

    /// Deletes every instance of a terminating CRD, then the CRD once none is left.
    fn empty_crd(&mut self, crd_obj: &Value) {
        let crd_name = meta::name(crd_obj).to_string();
        let storage = crd::storage_key(crd_obj);
        let Some(rt) = self.registry.storage_type(&storage) else {
            self.maybe_finish_crd(&crd_name);
            return;
        };
        let keys: Vec<Key> = self
            .buckets
            .get(&storage)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, name) in keys {
            let _ = self.delete(&rt, &ns, &name, &DeleteOptions::default(), false);
        }
        self.maybe_finish_crd(&crd_name);
    }

    fn maybe_finish_crd(&mut self, crd_name: &str) {
        let crd_type = self
            .registry
            .by_gvk("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .expect("built in");
        let Some(crd_obj) = self.stored(&crd_type, "", crd_name).cloned() else {
            return;
        };
        if meta::at(&crd_obj, &["metadata", "deletionTimestamp"]).is_none() {
            return;
        }
        let storage = crd::storage_key(&crd_obj);
        if self.buckets.get(&storage).is_some_and(|b| !b.is_empty()) {
            return;
        }
        let mut new = crd_obj.clone();
        let finalizers: Vec<String> = meta::finalizers(&crd_obj)
            .into_iter()
            .filter(|f| f != crd::CLEANUP_FINALIZER)
            .collect();
        if finalizers.is_empty() {
            meta::meta_mut(&mut new).remove("finalizers");
            self.remove(&crd_type, new);
        } else {
            meta::meta_mut(&mut new).insert("finalizers".into(), json!(finalizers));
            self.commit(&crd_type, EventType::Modified, new);
        }
    }

    /// Registers (or re-registers) the resource types a stored CRD defines.
    fn sync_crd(&mut self, crd_obj: &Value) {
        let name = meta::name(crd_obj).to_string();
        if meta::at(crd_obj, &["metadata", "deletionTimestamp"]).is_some() {
            return;
        }
        let types = crd::resource_types(crd_obj);
        self.registry.set_crd_types(&name, types);
    }

    /// The `pods/binding` write: sets `spec.nodeName` of an unbound pod. Like the apiserver's
    /// binding storage it skips the update strategy, so `generation` and managedFields stay
    /// as they are (a pod's generation follows spec changes made by its users only).
    pub(crate) fn bind_pod(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        node: &str,
    ) -> Result<Value, ApiError> {
        if !rt.group.is_empty() || rt.plural != "pods" {
            return Err(ApiError::path_not_found());
        }
        let mut pod = self
            .stored(rt, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        if meta::at(&pod, &["metadata", "deletionTimestamp"]).is_some() {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let assigned = meta::str_at(&pod, &["spec", "nodeName"]).unwrap_or("");
        if !assigned.is_empty() {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!("pod {name} is already assigned to node {assigned:?}"),
            ));
        }
        pod.as_object_mut()
            .expect("stored objects are maps")
            .entry("spec")
            .or_insert_with(|| json!({}))["nodeName"] = json!(node);
        let stored = self.commit(rt, EventType::Modified, pod);
        Ok(events::to_served(&stored, rt))
    }

    /// The `autoscaling/v1 Scale` view of an object.
    pub(crate) fn get_scale(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let obj = self.get(rt, ns, name)?;
        scale_of(rt, &obj)
    }

    /// PUT or PATCH of `/scale`: `scale` is the new Scale; only replicas are written.
    pub(crate) fn write_scale(
        &mut self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        scale_update: ScaleUpdate<'_>,
        opts: &WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let spec = rt.scale.clone().ok_or_else(ApiError::path_not_found)?;
        let cur = self
            .stored(rt, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))?;
        let served = events::to_served(&cur, rt);
        let current_scale = scale_of(rt, &served)?;
        let new_scale = match scale_update {
            ScaleUpdate::Replace(s) => s.clone(),
            ScaleUpdate::Patch(kind, body) => {
                if kind == PatchKind::Apply {
                    let mut merged = current_scale.clone();
                    patch::merge_patch(&mut merged, body);
                    merged
                } else {
                    patch::apply_patch(kind, &current_scale, body, &Hints::none())
                        .map_err(|e| e.about_object(rt, name))?
                }
            }
        };
        let rv = meta::resource_version(&new_scale);
        if !rv.is_empty() && rv != meta::resource_version(&cur) {
            return Err(ApiError::stale(rt, name));
        }
        let replicas = meta::at(&new_scale, &["spec", "replicas"])
            .cloned()
            .unwrap_or(json!(0));
        if replicas.as_i64().is_none_or(|r| r < 0) {
            return Err(ApiError::invalid(
                rt,
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.replicas",
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let mut new = cur.clone();
        meta::set_path(&mut new, &spec.spec_replicas_path, replicas);
        let result = self.finish_update(rt, cur, new, opts, Sub::Scale, Managed::Update)?;
        Ok(WriteResult {
            object: scale_of(rt, &result.object)?,
            warnings: result.warnings,
            created: false,
        })
    }
}

/// A `/scale` write: a full Scale (PUT) or a patch of the current Scale.
pub(crate) enum ScaleUpdate<'a> {
    Replace(&'a Value),
    Patch(PatchKind, &'a Value),
}

fn scale_of(rt: &ResourceType, obj: &Value) -> Result<Value, ApiError> {
    let spec = rt.scale.as_ref().ok_or_else(ApiError::path_not_found)?;
    let replicas = meta::json_path(obj, &spec.spec_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let status_replicas = meta::json_path(obj, &spec.status_replicas_path)
        .cloned()
        .unwrap_or(json!(0));
    let mut status = json!({"replicas": status_replicas});
    let selector = match spec.label_selector_path.as_deref() {
        Some(".status.selector") if rt.crd.is_none() => obj
            .get("spec")
            .and_then(|s| s.get("selector"))
            .and_then(|s| LabelSelector::from_label_selector(s).ok())
            .map(|s| s.to_query()),
        Some(path) => meta::json_path(obj, path)
            .and_then(Value::as_str)
            .map(String::from),
        None => None,
    };
    if let Some(sel) = selector {
        status["selector"] = json!(sel);
    }
    let m = obj.get("metadata").cloned().unwrap_or(json!({}));
    let mut md = Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = m.get(f) {
            md.insert(f.into(), v.clone());
        }
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": md,
        "spec": {"replicas": replicas},
        "status": status,
    }))
}

/// Checks (and fills in) apiVersion and kind of a request body.
fn check_type(rt: &ResourceType, mut obj: Value) -> Result<Value, ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    let want_av = rt.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av == want_av => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), json!(rt.kind));
        }
        Some(k) if k == rt.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    if let Some(m) = map.get("metadata")
        && !m.is_object()
        && !m.is_null()
    {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(obj)
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

/// Builds the object a write through `sub` produces from the current object and the body.
fn merge_for_sub(rt: &ResourceType, cur: &Value, body: Value, sub: Sub) -> Value {
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

fn make_continue(rv: u64, id: u64) -> String {
    format!("{rv}.{id}")
}

fn parse_continue(token: &str) -> Result<u64, ApiError> {
    token
        .split_once('.')
        .and_then(|(_, id)| id.parse().ok())
        .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))
}

impl ApiError {
    /// Fills in the details of a patch or apply error that lacked the object's identity.
    pub(crate) fn about_object(mut self, rt: &ResourceType, name: &str) -> Self {
        if self.details.as_ref().is_none_or(|d| d.name.is_empty()) {
            let kind = if self.code == 422 {
                rt.kind.clone()
            } else {
                rt.plural.clone()
            };
            let d = self.details_mut();
            d.name = name.to_string();
            d.group = rt.group.clone();
            d.kind = kind;
        }
        if self.code == 422 && !self.message.contains(" is invalid: ") {
            self.message = format!(
                "{} \"{name}\" is invalid: {}",
                super::error::qualified_kind(rt),
                self.message
            );
        }
        if self.code == 409
            && self.reason == "Conflict"
            && !self.message.starts_with("Apply failed")
            && !self.message.starts_with("Operation cannot")
        {
            self.message = format!(
                "Operation cannot be fulfilled on {} \"{name}\": {}",
                super::error::qualified_resource(rt),
                self.message
            );
        }
        self
    }
}
