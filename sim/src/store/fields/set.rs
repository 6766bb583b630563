//! Field sets in the tree shape of `FieldsV1`, their path elements, and the sets an object
//! or a change between two objects makes up.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::hints::{Hints, ListType};

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
    let mut d = Diff::default();
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !hints.map_atomic(path) => {
            d.maps(o, n, hints, path);
        }
        (Value::Array(o), Value::Array(n)) => match hints.list_type(path) {
            ListType::Atomic => d.changed.member = o != n,
            ListType::Set => d.sets(o, n),
            ListType::Map(keys) => d.keyed_lists(o, n, &keys, hints, path),
        },
        (o, n) => d.changed.member = o != n,
    }
    (d.changed, d.removed)
}

/// The two sets [`diff`] builds, filled one kind of value at a time.
#[derive(Default)]
struct Diff {
    changed: FieldSet,
    removed: FieldSet,
}

impl Diff {
    /// Records the diff of the child at path element `pe`, when there is one.
    fn child(&mut self, pe: String, (changed, removed): (FieldSet, FieldSet)) {
        if !changed.is_empty() {
            self.changed.children.insert(pe.clone(), changed);
        }
        if !removed.is_empty() {
            self.removed.children.insert(pe, removed);
        }
    }

    /// Maps merged by key: added and removed fields whole, kept ones field by field.
    fn maps(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        hints: &Hints,
        path: &mut Vec<String>,
    ) {
        for (k, nv) in new {
            path.push(k.clone());
            match old.get(k) {
                None => {
                    let added = all_paths(nv, hints, path);
                    self.changed.children.insert(field_pe(k), added);
                }
                Some(ov) => self.child(field_pe(k), diff(ov, nv, hints, path)),
            }
            path.pop();
        }
        for (k, ov) in old {
            if !new.contains_key(k) {
                path.push(k.clone());
                let gone = all_paths(ov, hints, path);
                self.removed.children.insert(field_pe(k), gone);
                path.pop();
            }
        }
    }

    /// Sets of scalars: members added and members removed.
    fn sets(&mut self, old: &[Value], new: &[Value]) {
        for item in new {
            if !old.contains(item) {
                self.changed
                    .children
                    .insert(value_pe(item), FieldSet::leaf());
            }
        }
        for item in old {
            if !new.contains(item) {
                self.removed
                    .children
                    .insert(value_pe(item), FieldSet::leaf());
            }
        }
    }

    /// Lists keyed by `keys`: added and removed items whole, kept ones field by field.
    fn keyed_lists(
        &mut self,
        old: &[Value],
        new: &[Value],
        keys: &[String],
        hints: &Hints,
        path: &mut Vec<String>,
    ) {
        path.push("[]".into());
        for item in new {
            let pe = key_pe(item, keys);
            match old.iter().find(|x| item_matches(x, item, keys)) {
                None => {
                    self.changed
                        .children
                        .insert(pe, all_paths(item, hints, path));
                }
                Some(old_item) => self.child(pe, diff(old_item, item, hints, path)),
            }
        }
        for item in old {
            if !new.iter().any(|x| item_matches(x, item, keys)) {
                let gone = all_paths(item, hints, path);
                self.removed.children.insert(key_pe(item, keys), gone);
            }
        }
        path.pop();
    }
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
}
