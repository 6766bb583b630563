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

/// The example install: namespace, worker StatefulSet and SwarmPool from `examples/`, moved to
/// the scenario's own namespace when it shares a cluster with others.
#[derive(Clone)]
pub struct Example {
    /// Every document of `examples/`, in apply order, in the scenario's namespace.
    pub documents: Vec<Value>,
    /// The namespace the manifests in the repository use.
    home: String,
}

impl Example {
    /// Reads `examples/`, moved to `namespace` if given.
    pub fn load(namespace: Option<&str>) -> Example {
        let documents = documents_in(&repo_root().join("examples"));
        let mut example = Example {
            documents,
            home: String::new(),
        };
        // Fail early with a clear message if the examples lack what the scenarios rely on.
        example.home = str_at(example.pool(), "/metadata/namespace");
        example.statefulset();
        if let Some(namespace) = namespace {
            example.documents = example.relocate(example.documents.clone(), namespace);
        }
        example
    }

    /// Whether the scenario's namespace is not the one the repository's manifests name, so
    /// they are applied as edited copies.
    pub fn is_relocated(&self) -> bool {
        self.namespace() != self.home
    }

    /// The example's Namespace object.
    pub fn namespace_manifest(&self) -> &Value {
        self.only_kind("Namespace")
    }

    /// `documents` (manifests of the repository) moved to this example's namespace.
    pub fn localize(&self, documents: Vec<Value>) -> Vec<Value> {
        self.relocate(documents, &self.namespace())
    }

    /// `documents` with the repository's namespace replaced by `namespace`: the Namespace
    /// object itself and every object's `metadata.namespace`.
    fn relocate(&self, mut documents: Vec<Value>, namespace: &str) -> Vec<Value> {
        for doc in &mut documents {
            let field = if doc["kind"] == "Namespace" {
                "name"
            } else {
                "namespace"
            };
            if doc["metadata"][field] == self.home.as_str() {
                doc["metadata"][field] = Value::String(namespace.to_owned());
            }
        }
        documents
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

/// The YAML documents of the repository's manifest files and directories `paths`, in the
/// order `kubectl apply -f <path>...` applies them.
pub fn documents_at(paths: &[&str]) -> Vec<Value> {
    paths
        .iter()
        .flat_map(|path| {
            let path = repo_root().join(path);
            if path.is_dir() {
                documents_in(&path)
            } else {
                parse_documents(&path)
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relocated_example_names_its_own_namespace_everywhere() {
        let example = Example::load(Some("swarm-install"));
        assert!(example.is_relocated());
        assert_eq!(example.namespace(), "swarm-install");
        assert_eq!(
            example.namespace_manifest()["metadata"]["name"],
            "swarm-install"
        );
        for doc in example
            .documents
            .iter()
            .filter(|d| d["kind"] != "Namespace")
        {
            assert_eq!(doc["metadata"]["namespace"], "swarm-install", "{doc}");
        }
        let qos = example.localize(documents_at(&["examples/qos/swarmpool.yaml"]));
        assert_eq!(qos[0]["metadata"]["namespace"], "swarm-install");
        assert!(!Example::load(None).is_relocated());
    }
}
