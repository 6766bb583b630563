//! The in-memory object store: one global resourceVersion counter, per-resource buckets,
//! a bounded change history for watches, and every write path the HTTP API uses.
//!
//! Controllers inside the simulation use the same methods as the HTTP handlers, so their
//! writes bump resourceVersions, track managedFields and reach watches exactly like a
//! client's.

mod apply;
mod crd;
mod defaults;
mod error;
mod events;
mod fields;
pub(crate) mod meta;
mod patch;
mod schema;
pub mod selector;
mod state;
mod types;
mod validation;
mod watch;

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::broadcast;

pub use serde_json::Value;

pub use error::{ApiError, Cause, ErrorDetails};
pub use selector::{FieldSelector, LabelSelector};
pub use types::{PrinterColumn, ResourceType, ScaleSubresource};

pub(crate) use events::served_shared;
pub(crate) use patch::PatchKind;
pub(crate) use state::{FieldValidation, ScaleUpdate, Sub, WriteOptions};
pub(crate) use watch::{Change, WatchStart};

use state::State;

/// Kind of a committed change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object changed (including getting a deletionTimestamp).
    Modified,
    /// The object is gone; the event carries its last state.
    Deleted,
}

/// One committed change, as the subscribers of [`Store::subscribe`] see it. The object is in
/// its storage version (for Events: `v1`).
#[derive(Clone, Debug)]
pub struct StoreEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for `Deleted`, its last state), shared with the store.
    pub object: Arc<Value>,
}

/// Options of a delete, as `DeleteOptions` in the body or the query of an HTTP DELETE.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Grace period; pods default to `spec.terminationGracePeriodSeconds`, else 30.
    pub grace_period_seconds: Option<i64>,
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation_policy: Option<String>,
    /// Delete only if the object's uid is this one (409 otherwise).
    pub precondition_uid: Option<String>,
    /// Delete only if the object's resourceVersion is this one (409 otherwise).
    pub precondition_resource_version: Option<String>,
}

const DEFAULT_MANAGER: &str = "kube-sim";

/// Shared handle to the store; cheap to clone (Arc inside).
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    manager: Arc<str>,
}

struct Shared {
    state: Mutex<State>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store holding the default namespaces, serving the built-in kinds.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new()),
            }),
            manager: Arc::from(DEFAULT_MANAGER),
        }
    }

    /// A handle whose writes are recorded in managedFields under `manager` (for example
    /// `kube-controller-manager` or `kubelet`); the default is `kube-sim`.
    pub fn with_manager(&self, manager: &str) -> Store {
        Store {
            shared: self.shared.clone(),
            manager: Arc::from(manager),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent enough to keep serving:
        // every write builds the new object before touching the maps.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn opts(&self) -> WriteOptions {
        WriteOptions {
            manager: self.manager.to_string(),
            ..WriteOptions::default()
        }
    }

    fn type_of(&self, api_version: &str, kind: &str) -> Result<Arc<ResourceType>, ApiError> {
        self.lock().resource_type(api_version, kind).ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({kind} in {api_version})"
                ),
            )
        })
    }

    fn type_of_obj(&self, obj: &Value) -> Result<Arc<ResourceType>, ApiError> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version.is_empty() || kind.is_empty() {
            return Err(ApiError::bad_request(
                "Object 'Kind' and 'apiVersion' are required",
            ));
        }
        self.type_of(api_version, kind)
    }

    /// `api_version` like "v1" or "apps/v1"; `kind` like "Pod".
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = self.type_of(api_version, kind).ok()?;
        self.lock().get(&rt, namespace.unwrap_or(""), name).ok()
    }

    /// Every object of a kind, in one namespace or (with `None`) in all, ordered by
    /// namespace and name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Ok(rt) = self.type_of(api_version, kind) else {
            return Vec::new();
        };
        self.lock().list_all(&rt, namespace)
    }

    /// Like [`Store::get`], sharing the stored object instead of copying it.
    pub(crate) fn get_shared(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<Value>> {
        let rt = self.type_of(api_version, kind).ok()?;
        self.lock().get_shared(&rt, namespace.unwrap_or(""), name)
    }

    /// Like [`Store::list`], sharing the stored objects instead of copying them.
    pub(crate) fn list_shared(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Vec<Arc<Value>> {
        let Ok(rt) = self.type_of(api_version, kind) else {
            return Vec::new();
        };
        self.lock().list_shared(&rt, namespace)
    }

    /// The objects of a kind in `namespace` whose names start with `prefix` (for example the
    /// pods `web-0`, `web-1`, ... of a StatefulSet `web`), ordered by name, without scanning
    /// the rest of the namespace.
    pub(crate) fn list_prefixed(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        prefix: &str,
    ) -> Vec<Arc<Value>> {
        let Ok(rt) = self.type_of(api_version, kind) else {
            return Vec::new();
        };
        self.lock().list_prefixed(&rt, namespace, prefix)
    }

    /// Creates an object. `obj` carries apiVersion, kind, metadata.name (or generateName)
    /// and, for namespaced kinds, metadata.namespace.
    pub fn create(&self, obj: Value) -> Result<Value, ApiError> {
        let rt = self.type_of_obj(&obj)?;
        let ns = meta::namespace(&obj).to_string();
        self.lock()
            .create(&rt, &ns, obj, &self.opts())
            .map(|r| r.object)
    }

    /// Full replace of the main resource, like PUT (ignores `.status` for types with a
    /// status subresource); `metadata.resourceVersion`, when set, is a precondition.
    pub fn update(&self, obj: Value) -> Result<Value, ApiError> {
        self.replace(obj, state::Sub::Main)
    }

    /// Like PUT `.../status`: only `.status` is taken from `obj`.
    pub fn update_status(&self, obj: Value) -> Result<Value, ApiError> {
        self.replace(obj, state::Sub::Status)
    }

    /// PUT of `obj` to its main resource or `/status`, without a resourceVersion required.
    fn replace(&self, obj: Value, sub: state::Sub) -> Result<Value, ApiError> {
        let rt = self.type_of_obj(&obj)?;
        let ns = meta::namespace(&obj).to_string();
        let name = meta::name(&obj).to_string();
        let opts = WriteOptions {
            allow_unconditional: true,
            ..self.opts()
        };
        self.lock()
            .replace(&rt, &ns, &name, obj, &opts, sub)
            .map(|r| r.object)
    }

    /// JSON merge patch (RFC 7386) of the main resource or, with `status`, of `/status`.
    pub fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        patch: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let rt = self.type_of(api_version, kind)?;
        let sub = if status {
            state::Sub::Status
        } else {
            state::Sub::Main
        };
        self.lock()
            .patch(
                &rt,
                namespace.unwrap_or(""),
                name,
                PatchKind::Merge,
                &patch,
                &self.opts(),
                sub,
            )
            .map(|r| r.object)
    }

    /// Assigns an unbound pod to `node` the way the scheduler's `pods/binding` write does:
    /// only `spec.nodeName` changes, `metadata.generation` does not. 409 when the pod is
    /// already bound or being deleted.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Value, ApiError> {
        let rt = self.type_of("v1", "Pod")?;
        self.lock().bind_pod(&rt, namespace, name, node)
    }

    /// Same semantics as HTTP DELETE: pods get `deletionTimestamp = now + grace` and stay
    /// (grace 0, or a pod not yet on a node, goes at once); other objects go at once unless
    /// they carry finalizers. Returns the object as stored after the call, or its last state
    /// if it was removed.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        opts: DeleteOptions,
    ) -> Result<Value, ApiError> {
        let rt = self.type_of(api_version, kind)?;
        self.lock()
            .delete(&rt, namespace.unwrap_or(""), name, &opts, false)
            .map(|(obj, _removed)| obj)
    }

    /// Every committed change, in order, to every subscriber. On `Lagged`, resync by
    /// listing.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.lock().subscribe()
    }

    /// The current value of the global resourceVersion counter.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv()
    }

    /// Drops the watch history: watches from any earlier resourceVersion get 410 Expired.
    pub fn compact(&self) {
        self.lock().compact();
    }

    /// All served resource types, built-ins first, then those of CRDs.
    pub fn resource_types(&self) -> Vec<Arc<ResourceType>> {
        self.lock().registry().all().to_vec()
    }
}
