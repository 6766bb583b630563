//! The manifests users apply (`examples/`, `crds/`, `deploy/`), read so that scenarios can
//! derive names from them and write edited copies, as a user editing a file would.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::kubectl::repo_root;

/// Every YAML document in the `.yaml`/`.yml` files of `dir` (files in name order, the order
/// `kubectl apply -f <dir>` uses), as JSON values.
pub fn documents_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|file| parse_documents(file))
        .collect()
}

/// The YAML documents of one file (empty documents skipped).
pub fn parse_documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    parse_yaml_stream(&text, &file.display().to_string())
}

/// The documents of a YAML stream such as `kubectl kustomize` prints.
pub fn parse_yaml_stream(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            Value::deserialize(doc).unwrap_or_else(|e| panic!("invalid YAML in {origin}: {e}"))
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The example install: namespace, worker StatefulSet and SwarmPool from `examples/`.
#[derive(Clone)]
pub struct Example {
    /// Every document of `examples/`, in apply order.
    pub documents: Vec<Value>,
}

impl Example {
    /// Reads `examples/`.
    pub fn load() -> Example {
        let documents = documents_in(&repo_root().join("examples"));
        let example = Example { documents };
        // Fail early with a clear message if the examples lack what the scenarios rely on.
        example.pool();
        example.statefulset();
        example
    }

    /// The SwarmPool manifest.
    pub fn pool(&self) -> &Value {
        self.only_kind("SwarmPool")
    }

    /// The worker StatefulSet manifest.
    pub fn statefulset(&self) -> &Value {
        self.only_kind("StatefulSet")
    }

    /// The namespace everything lives in (the pool's).
    pub fn namespace(&self) -> String {
        str_at(self.pool(), "/metadata/namespace")
    }

    /// The SwarmPool's name.
    pub fn pool_name(&self) -> String {
        str_at(self.pool(), "/metadata/name")
    }

    /// The StatefulSet's name.
    pub fn statefulset_name(&self) -> String {
        str_at(self.statefulset(), "/metadata/name")
    }

    /// The replicas the example StatefulSet asks for.
    pub fn replicas(&self) -> usize {
        self.statefulset()
            .pointer("/spec/replicas")
            .and_then(Value::as_u64)
            .expect("examples: StatefulSet spec.replicas") as usize
    }

    /// The ConfigMap the pool names (`spec.configMap`, default `<pool>-config`).
    pub fn config_map_name(&self) -> String {
        self.pool()
            .pointer("/spec/configMap")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}-config", self.pool_name()))
    }

    /// The pool's jobs, in spec order.
    pub fn jobs(&self) -> Vec<String> {
        jobs_of(self.pool())
    }

    fn only_kind(&self, kind: &str) -> &Value {
        let mut found = self.documents.iter().filter(|d| d["kind"] == kind);
        let first = found
            .next()
            .unwrap_or_else(|| panic!("examples/ holds no {kind}"));
        assert!(found.next().is_none(), "examples/ holds several {kind}s");
        first
    }
}

/// `spec.jobs` of a SwarmPool manifest.
pub fn jobs_of(pool: &Value) -> Vec<String> {
    pool.pointer("/spec/jobs")
        .and_then(Value::as_array)
        .expect("SwarmPool spec.jobs")
        .iter()
        .map(|j| j.as_str().expect("job is a string").to_string())
        .collect()
}

/// The string at a JSON pointer, failing the test when it is missing.
pub fn str_at(doc: &Value, pointer: &str) -> String {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing in {doc}"))
        .to_string()
}

/// Writes `documents` as one multi-document YAML file (applied in this order) and returns its
/// path.
pub fn write_manifest(path: &Path, documents: &[Value]) -> PathBuf {
    let text = documents
        .iter()
        .map(|d| serde_yaml::to_string(d).expect("render YAML"))
        .collect::<Vec<_>>()
        .join("---\n");
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path.to_path_buf()
}
