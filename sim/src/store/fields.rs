//! Field sets (the `FieldsV1` format of managedFields), the list and map semantics they
//! follow, and the bookkeeping of Update operations.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::meta;
use super::types::ResourceType;

/// How a list merges: replaced whole, as a set of scalars, or as a map keyed by fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// How a strategic merge patch treats a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SmpList {
    Replace,
    MergePrimitives,
    MergeByKey(String),
}

#[derive(Clone)]
enum Source {
    None,
    Builtin,
    Schema(Arc<Value>),
}

/// Per-type knowledge of list and map semantics (built-in tables or a CRD's schema).
/// Paths are field names from the root, with `[]` standing for a list item.
#[derive(Clone)]
pub(crate) struct Hints {
    source: Source,
    /// Whether `.status` belongs to the `/status` subresource.
    pub status_subresource: bool,
}

fn last_is(path: &[String], name: &str) -> bool {
    path.last().is_some_and(|l| l == name)
}

fn builtin_list_type(path: &[String]) -> ListType {
    let n = path.len();
    let Some(last) = path.last().map(String::as_str) else {
        return ListType::Atomic;
    };
    let keys = |ks: &[&str]| ListType::Map(ks.iter().map(|k| k.to_string()).collect());
    if n == 2 && path[0] == "metadata" {
        return match last {
            "finalizers" => ListType::Set,
            "ownerReferences" => keys(&["uid"]),
            _ => ListType::Atomic,
        };
    }
    match last {
        "containers" | "initContainers" | "ephemeralContainers" => keys(&["name"]),
        "env" | "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates" => {
            keys(&["name"])
        }
        "volumeMounts" => keys(&["mountPath"]),
        "volumeDevices" => keys(&["devicePath"]),
        "conditions" => keys(&["type"]),
        "hostAliases" => keys(&["ip"]),
        "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
        "ports" if n >= 3 && path[n - 2] == "[]" && path[n - 3].ends_with("ontainers") => {
            keys(&["containerPort", "protocol"])
        }
        "ports" if n == 2 && path[0] == "spec" => keys(&["port", "protocol"]),
        _ => ListType::Atomic,
    }
}

/// Walks a structural schema along `path`.
fn schema_at<'a>(schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = schema;
    for p in path {
        cur = if p == "[]" {
            cur.get("items")?
        } else if let Some(s) = cur.get("properties").and_then(|ps| ps.get(p.as_str())) {
            s
        } else {
            match cur.get("additionalProperties") {
                Some(s) if s.is_object() => s,
                _ => return None,
            }
        };
    }
    Some(cur)
}

impl Hints {
    /// Hints for objects of `rt`.
    pub(crate) fn for_type(rt: &ResourceType) -> Self {
        let source = match &rt.schema {
            Some(s) => Source::Schema(s.clone()),
            None => Source::Builtin,
        };
        Self {
            source,
            status_subresource: rt.status_subresource,
        }
    }

    /// No knowledge: every list atomic (for `Scale` and other synthetic objects).
    pub(crate) fn none() -> Self {
        Self {
            source: Source::None,
            status_subresource: false,
        }
    }

    /// Server-side apply semantics of the list at `path`.
    pub(crate) fn list_type(&self, path: &[String]) -> ListType {
        if path.first().is_some_and(|p| p == "metadata") {
            return builtin_list_type(path);
        }
        match &self.source {
            Source::None => ListType::Atomic,
            Source::Builtin => builtin_list_type(path),
            Source::Schema(schema) => {
                let Some(s) = schema_at(schema, path) else {
                    return ListType::Atomic;
                };
                match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(
                        s.get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|k| k.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    ),
                    _ => ListType::Atomic,
                }
            }
        }
    }

    /// Whether the map at `path` is replaced whole by apply.
    pub(crate) fn map_atomic(&self, path: &[String]) -> bool {
        if path.first().is_some_and(|p| p == "metadata") {
            return false;
        }
        match &self.source {
            Source::None => false,
            Source::Builtin => last_is(path, "selector") || last_is(path, "nodeSelector"),
            Source::Schema(schema) => schema_at(schema, path).is_some_and(|s| {
                s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
                    || s.get("x-kubernetes-int-or-string").is_some()
            }),
        }
    }

    /// Strategic merge patch semantics of the list at `path` (built-in types only).
    pub(crate) fn smp_list(&self, path: &[String]) -> SmpList {
        match builtin_list_type(path) {
            ListType::Atomic => SmpList::Replace,
            ListType::Set => SmpList::MergePrimitives,
            ListType::Map(keys) => SmpList::MergeByKey(keys[0].clone()),
        }
    }
}

/// A set of field paths in the tree shape of `FieldsV1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    fn leaf() -> Self {
        Self {
            member: true,
            children: BTreeMap::new(),
        }
    }

    fn normalize(mut self) -> Self {
        self.children = self
            .children
            .into_iter()
            .map(|(k, v)| (k, v.normalize()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        self
    }

    pub(crate) fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            out.children.insert(k.clone(), d);
        }
        out.normalize()
    }

    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                out.children.insert(k.clone(), v.intersection(o));
            }
        }
        out.normalize()
    }

    /// The set with every field that has members below it counted as a member itself
    /// (structured-merge-diff's `EnsureNamedFieldsAreMembers`).
    pub(crate) fn with_parents_as_members(&self) -> FieldSet {
        let mut out = self.clone();
        out.mark_parents();
        out
    }

    fn mark_parents(&mut self) {
        for (k, child) in self.children.iter_mut() {
            child.mark_parents();
            if k.starts_with("f:") && !child.children.is_empty() {
                child.member = true;
            }
        }
    }

    /// The set without membership of the given top-level elements (their children stay).
    pub(crate) fn without_top_level_members(mut self, elements: &[&str]) -> FieldSet {
        for e in elements {
            if let Some(c) = self.children.get_mut(*e) {
                c.member = false;
            }
        }
        self.normalize()
    }

    /// Member paths, each as its path elements.
    pub(crate) fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON form.
    pub(crate) fn to_json(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, v) in &self.children {
            if !v.is_empty() {
                map.insert(k.clone(), v.to_json());
            }
        }
        Value::Object(map)
    }

    /// Parses the `FieldsV1` JSON form.
    pub(crate) fn from_json(v: &Value) -> FieldSet {
        let mut out = FieldSet::default();
        if let Some(map) = v.as_object() {
            if map.is_empty() {
                out.member = true;
            }
            for (k, child) in map {
                if k == "." {
                    out.member = true;
                } else {
                    out.children.insert(k.clone(), FieldSet::from_json(child));
                }
            }
        }
        out
    }
}

/// Path element of a field.
pub(crate) fn field_pe(name: &str) -> String {
    format!("f:{name}")
}

/// Path element of an associative list item.
pub(crate) fn key_pe(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    format!("k:{}", Value::Object(m))
}

/// Path element of a set member.
pub(crate) fn value_pe(item: &Value) -> String {
    format!("v:{item}")
}

/// Whether a list item matches an associative key.
pub(crate) fn item_matches(item: &Value, other: &Value, keys: &[String]) -> bool {
    keys.iter().all(|k| item.get(k) == other.get(k))
}

/// Every field of `v` as a set: leaves, list items and set members (what server-side apply
/// records for a configuration).
pub(crate) fn to_fields(v: &Value, hints: &Hints, path: &mut Vec<String>) -> FieldSet {
    let mut set = FieldSet::default();
    match v {
        Value::Object(map) if !hints.map_atomic(path) => {
            for (k, child) in map {
                path.push(k.clone());
                let mut cs = to_fields(child, hints, path);
                path.pop();
                if cs.is_empty() {
                    cs = FieldSet::leaf();
                }
                set.children.insert(field_pe(k), cs);
            }
        }
        Value::Array(items) => match hints.list_type(path) {
            ListType::Atomic => {}
            ListType::Set => {
                for item in items {
                    set.children.insert(value_pe(item), FieldSet::leaf());
                }
            }
            ListType::Map(keys) => {
                path.push("[]".into());
                for item in items {
                    let mut cs = to_fields(item, hints, path);
                    cs.member = true;
                    set.children.insert(key_pe(item, &keys), cs);
                }
                path.pop();
            }
        },
        _ => {}
    }
    set
}

/// Every path in `v`, including maps and list items themselves (for added subtrees).
fn all_paths(v: &Value, hints: &Hints, path: &mut Vec<String>) -> FieldSet {
    let mut set = to_fields(v, hints, path);
    set.member = true;
    for (k, child) in set.children.iter_mut() {
        if k.starts_with("f:")
            && let Some(Value::Object(map)) = Some(v)
        {
            let name = &k[2..];
            if let Some(cv) = map.get(name) {
                path.push(name.to_string());
                *child = all_paths(cv, hints, path);
                path.pop();
            }
        }
    }
    set
}

/// Changed (added or modified) and removed paths from `old` to `new`.
pub(crate) fn diff(
    old: &Value,
    new: &Value,
    hints: &Hints,
    path: &mut Vec<String>,
) -> (FieldSet, FieldSet) {
    let mut changed = FieldSet::default();
    let mut removed = FieldSet::default();
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !hints.map_atomic(path) => {
            for (k, nv) in n {
                path.push(k.clone());
                match o.get(k) {
                    None => {
                        changed
                            .children
                            .insert(field_pe(k), all_paths(nv, hints, path));
                    }
                    Some(ov) => {
                        let (c, r) = diff(ov, nv, hints, path);
                        if !c.is_empty() {
                            changed.children.insert(field_pe(k), c);
                        }
                        if !r.is_empty() {
                            removed.children.insert(field_pe(k), r);
                        }
                    }
                }
                path.pop();
            }
            for (k, ov) in o {
                if !n.contains_key(k) {
                    path.push(k.clone());
                    removed
                        .children
                        .insert(field_pe(k), all_paths(ov, hints, path));
                    path.pop();
                }
            }
        }
        (Value::Array(o), Value::Array(n)) => match hints.list_type(path) {
            ListType::Atomic => {
                if o != n {
                    changed.member = true;
                }
            }
            ListType::Set => {
                for item in n {
                    if !o.contains(item) {
                        changed.children.insert(value_pe(item), FieldSet::leaf());
                    }
                }
                for item in o {
                    if !n.contains(item) {
                        removed.children.insert(value_pe(item), FieldSet::leaf());
                    }
                }
            }
            ListType::Map(keys) => {
                path.push("[]".into());
                for item in n {
                    let pe = key_pe(item, &keys);
                    match o.iter().find(|x| item_matches(x, item, &keys)) {
                        None => {
                            changed.children.insert(pe, all_paths(item, hints, path));
                        }
                        Some(old_item) => {
                            let (c, r) = diff(old_item, item, hints, path);
                            if !c.is_empty() {
                                changed.children.insert(pe.clone(), c);
                            }
                            if !r.is_empty() {
                                removed.children.insert(pe, r);
                            }
                        }
                    }
                }
                for item in o {
                    if !n.iter().any(|x| item_matches(x, item, &keys)) {
                        removed
                            .children
                            .insert(key_pe(item, &keys), all_paths(item, hints, path));
                    }
                }
                path.pop();
            }
        },
        (o, n) => {
            if o != n {
                changed.member = true;
            }
        }
    }
    (changed, removed)
}

/// Removes from `obj` every member path of `set`.
pub(crate) fn remove_paths(obj: &mut Value, set: &FieldSet) {
    for (pe, child) in &set.children {
        if let Some(name) = pe.strip_prefix("f:") {
            let Some(map) = obj.as_object_mut() else {
                continue;
            };
            if child.member {
                map.remove(name);
            } else if let Some(v) = map.get_mut(name) {
                remove_paths(v, child);
            }
        } else if let Some(key) = pe.strip_prefix("k:") {
            let Some(items) = obj.as_array_mut() else {
                continue;
            };
            let Ok(Value::Object(kv)) = serde_json::from_str::<Value>(key) else {
                continue;
            };
            let matches = |item: &Value| kv.iter().all(|(k, v)| item.get(k) == Some(v));
            if child.member {
                items.retain(|i| !matches(i));
            } else if let Some(item) = items.iter_mut().find(|i| matches(i)) {
                remove_paths(item, child);
            }
        } else if let Some(val) = pe.strip_prefix("v:") {
            let Some(items) = obj.as_array_mut() else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<Value>(val) {
                items.retain(|i| *i != v);
            }
        }
    }
}

/// `.spec.containers[name="a"].image`-style rendering of a path, as conflict messages show it.
pub(crate) fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for pe in path {
        if let Some(name) = pe.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = pe.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(key)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(val) = pe.strip_prefix("v:") {
            out.push_str(&format!("[={val}]"));
        } else if let Some(i) = pe.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

/// The part of an object a write through `subresource` may touch, without the fields
/// server-side apply never tracks (identity, resourceVersion, managedFields...).
pub(crate) fn tracked_part(obj: &Value, subresource: Option<&str>, hints: &Hints) -> Value {
    let Some(map) = obj.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    for (k, v) in map {
        match (k.as_str(), subresource) {
            ("apiVersion" | "kind", _) => {}
            ("status", None) if hints.status_subresource => {}
            ("status", Some("status")) => {
                out.insert(k.clone(), v.clone());
            }
            (_, Some("status")) => {}
            ("metadata", _) => {
                let mut m = v.as_object().cloned().unwrap_or_default();
                // metadata itself is never owned, only what is inside it.
                for f in [
                    "name",
                    "namespace",
                    "uid",
                    "resourceVersion",
                    "generation",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "selfLink",
                    "managedFields",
                    "generateName",
                ] {
                    m.remove(f);
                }
                out.insert(k.clone(), Value::Object(m));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if subresource != Some("status") {
        out.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Value::Object(out)
}

/// Clears the membership of `metadata` itself (it always exists, nobody owns it).
fn unmark_metadata(mut set: FieldSet) -> FieldSet {
    if let Some(m) = set.children.get_mut("f:metadata") {
        m.member = false;
    }
    set.normalize()
}

/// [`to_fields`] of a whole tracked object.
pub(crate) fn object_fields(v: &Value, hints: &Hints) -> FieldSet {
    unmark_metadata(to_fields(v, hints, &mut Vec::new()))
}

/// [`diff`] of two whole tracked objects.
pub(crate) fn object_diff(old: &Value, new: &Value, hints: &Hints) -> (FieldSet, FieldSet) {
    let (c, r) = diff(old, new, hints, &mut Vec::new());
    (unmark_metadata(c), unmark_metadata(r))
}

/// One managedFields entry, parsed.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub set: FieldSet,
}

impl Entry {
    pub(crate) fn parse(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        Some(Entry {
            manager: s("manager").unwrap_or_default(),
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            set: v
                .get("fieldsV1")
                .map(FieldSet::from_json)
                .unwrap_or_default(),
        })
    }

    pub(crate) fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_json());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    /// Whether `self` is the same manager identity (manager, operation, subresource).
    pub(crate) fn same_identity(
        &self,
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

/// Parsed managedFields of an object.
pub(crate) fn entries(list: &[Value]) -> Vec<Entry> {
    list.iter().filter_map(Entry::parse).collect()
}

/// Serializes entries in kube-apiserver's order (operation, time, manager, subresource),
/// dropping empty ones.
pub(crate) fn encode(mut entries: Vec<Entry>) -> Vec<Value> {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager, &a.subresource).cmp(&(
            &b.operation,
            &b.time,
            &b.manager,
            &b.subresource,
        ))
    });
    entries.iter().map(Entry::to_json).collect()
}

/// The managedFields of an object.
pub(crate) fn managed_of(obj: &Value) -> Vec<Value> {
    meta::at(obj, &["metadata", "managedFields"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Sets (or removes, when empty) the managedFields of an object.
pub(crate) fn set_managed(obj: &mut Value, list: Vec<Value>) {
    let m = meta::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

/// Records an Update operation by `manager`: it takes ownership of what it changed, and
/// nobody keeps owning what it removed.
pub(crate) fn record_update(
    managed: Vec<Value>,
    old: &Value,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    hints: &Hints,
) -> Vec<Value> {
    let old_t = tracked_part(old, subresource, hints);
    let new_t = tracked_part(new, subresource, hints);
    let (changed, removed) = object_diff(&old_t, &new_t, hints);
    let mut list = entries(&managed);
    if changed.is_empty() && removed.is_empty() {
        return encode(list);
    }
    for e in list.iter_mut() {
        if !e.same_identity(manager, "Update", subresource) {
            e.set = e.set.difference(&changed).difference(&removed);
        }
    }
    match list
        .iter_mut()
        .find(|e| e.same_identity(manager, "Update", subresource))
    {
        Some(own) => {
            own.set = own.set.union(&changed).difference(&removed);
            own.api_version = api_version.to_string();
            own.time = Some(meta::now());
        }
        None => list.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: Some(meta::now()),
            subresource: subresource.map(String::from),
            set: changed.difference(&removed),
        }),
    }
    encode(list)
}

/// Whether two maps are equal apart from the keys `skip` names.
pub(crate) fn eq_except(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
    skip: impl Fn(&str) -> bool,
) -> bool {
    let count = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !skip(k)).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether two objects are equal apart from resourceVersion and managedFields times.
/// Compares in place: every update runs it on two whole objects.
pub(crate) fn same_ignoring_times(a: &Value, b: &Value) -> bool {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return same_by_copy(a, b);
    };
    let empty = serde_json::Map::new();
    fn metadata<'a>(
        m: &'a serde_json::Map<String, Value>,
        empty: &'a serde_json::Map<String, Value>,
    ) -> Option<&'a serde_json::Map<String, Value>> {
        match m.get("metadata") {
            None => Some(empty),
            Some(Value::Object(md)) => Some(md),
            Some(_) => None,
        }
    }
    let (Some(amd), Some(bmd)) = (metadata(am, &empty), metadata(bm, &empty)) else {
        return same_by_copy(a, b);
    };
    let same_managed = match (amd.get("managedFields"), bmd.get("managedFields")) {
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(x, y)| match (x.as_object(), y.as_object()) {
                        (Some(x), Some(y)) => eq_except(x, y, |k| k == "time"),
                        _ => x == y,
                    })
        }
        (x, y) => x == y,
    };
    same_managed
        && eq_except(am, bm, |k| k == "metadata")
        && eq_except(amd, bmd, |k| k == "resourceVersion" || k == "managedFields")
}

/// [`same_ignoring_times`] for objects that are not maps or have a non-map `metadata`.
fn same_by_copy(a: &Value, b: &Value) -> bool {
    let norm = |v: &Value| {
        let mut v = v.clone();
        let m = meta::meta_mut(&mut v);
        m.remove("resourceVersion");
        if let Some(Value::Array(list)) = m.get_mut("managedFields") {
            for e in list.iter_mut() {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
        v
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fieldsv1_round_trips_with_dot_markers() {
        let v =
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}}}}});
        let set = FieldSet::from_json(&v);
        assert_eq!(set.to_json(), v);
    }

    #[test]
    fn update_takes_changed_fields_from_other_managers() {
        let hints = Hints::none();
        let old = json!({"data": {"a": "1", "b": "2"}});
        let managed = record_update(
            Vec::new(),
            &Value::Null,
            &old,
            "creator",
            None,
            "v1",
            &hints,
        );
        let new = json!({"data": {"a": "9", "b": "2"}});
        let managed = record_update(managed, &old, &new, "editor", None, "v1", &hints);
        let e = entries(&managed);
        let creator = e.iter().find(|e| e.manager == "creator").unwrap();
        let editor = e.iter().find(|e| e.manager == "editor").unwrap();
        assert_eq!(
            creator.set.to_json(),
            json!({"f:data": {".": {}, "f:b": {}}})
        );
        assert_eq!(editor.set.to_json(), json!({"f:data": {"f:a": {}}}));
    }
}
