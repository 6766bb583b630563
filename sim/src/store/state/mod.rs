//! The locked state behind [`Store`](super::Store) and the write pipeline every path shares.
//!
//! This module holds the state itself and what every write ends in (commit, removal, the
//! checks of a request body); each kind of request has its own submodule: reads and watches,
//! create (POST), update (PUT and PATCH), server-side apply, delete, what a deletion sets off
//! in namespaces and CRDs, and the `binding` and `scale` subresources.

mod apply;
mod cascade;
mod create;
mod delete;
mod read;
mod subresource;
mod update;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::error::ApiError;
use super::types::{Registry, ResourceType};
use super::watch::{Change, History};
use super::{EventType, StoreEvent, crd, events, meta, schema};

pub(crate) use subresource::ScaleUpdate;

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

/// How managedFields are maintained by a write.
pub(crate) enum Managed {
    /// An Update operation by the request's manager.
    Update,
    /// Already computed (server-side apply).
    Preset(Vec<Value>),
}

type Key = (String, String);

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

/// Whether `rt` is CustomResourceDefinition itself, whose writes change the served types.
fn is_crd_type(rt: &ResourceType) -> bool {
    rt.crd.is_none() && rt.group == "apiextensions.k8s.io"
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

    /// The stored object a write or delete of `name` starts from, or 404.
    fn current(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.stored(rt, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(rt, name))
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
        if is_crd_type(rt) {
            self.sync_crd(&stored);
        }
        WriteResult {
            object: events::to_served(&stored, rt),
            warnings,
            created,
        }
    }

    /// Stores (or, for `Deleted`, drops) `obj` under the next resourceVersion, records the
    /// change for watches and tells the subscribers.
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
        if is_crd_type(&rt) {
            let name = meta::name(&last).to_string();
            self.registry.set_crd_types(&name, Vec::new());
            let storage = crd::storage_key(&last);
            self.buckets.remove(&storage);
        }
        last
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

/// Validates, prunes and defaults a custom resource against its CRD schema; the unknown
/// fields it dropped become `warnings` under `fieldValidation=Warn`.
fn custom_checks(
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
