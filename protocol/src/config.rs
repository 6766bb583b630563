//! The `config.yml` that workers read: one type for the operator that writes it and the workers
//! that read it, so the format is defined in one place.
//!
//! ```yaml
//! version: 3            # config version: +1 each time any worker's job set changes
//! workloads:
//!   swarm-worker-0:     # pod name <statefulset>-<ordinal>; every ordinal 0..N-1 appears
//!     version: 3        # config version at which this worker's job set last changed
//!     jobs:
//!     - stream:xxrtve1
//!   swarm-worker-1:
//!     version: 1
//!     jobs: []
//! transit:              # only while a handoff is under way: jobs revoked and not yet granted,
//!   swarm-worker-2:     # by the pod that last held them
//!   - stream:cars:new
//! ```
//!
//! Readers ignore fields they do not know, so `transit` (and any later field) does not disturb a
//! worker that only reads its own entry of `workloads`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The ConfigMap key holding `config.yml`, in the pool's ConfigMap and in each worker's own.
pub const CONFIG_KEY: &str = "config.yml";

/// U+FEFF, refused anywhere in `config.yml` and `index.yml`: the workers' YAML libraries skip it
/// in different places (yaml.v3 any number at the text's start, serde_yaml one there and at the
/// start of some lines, PyYAML one there) and read it elsewhere as text. The operator never
/// writes one: serde_yaml escapes it.
pub const BYTE_ORDER_MARK: char = '\u{feff}';

/// The whole `config.yml`: a version, the workload of every pod in ordinal order, and the jobs in
/// transit (revoked from a pod, not yet granted to another) by the pod that last held them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Config version: 1 for the first config, +1 each time any worker's job set changes.
    pub version: u64,
    workloads: Vec<(String, Workload)>,
    transit: Vec<(String, Vec<String>)>,
}

/// The part of the config one pod reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// The config version at which this worker's job set last changed.
    pub version: u64,
    /// The jobs this worker runs, in spec order.
    pub jobs: Vec<String>,
}

/// Why a `config.yml` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The text is empty or only whitespace.
    #[error("config.yml is empty")]
    Empty,
    /// The text holds U+FEFF outside an escape (see [`BYTE_ORDER_MARK`]).
    #[error(
        "config.yml holds a byte order mark (U+FEFF); a name with one is written as the escape \"\\uFEFF\""
    )]
    ByteOrderMark,
    /// The text is not YAML of the worker config shape.
    #[error("config.yml is not a worker config: {0}")]
    Yaml(#[source] serde_yaml::Error),
}

impl WorkerConfig {
    /// A config with the given version and workloads. Workloads are stored in ordinal order
    /// (`w-2` before `w-10`) whatever the order given; a repeated pod name keeps its last entry.
    pub fn new(version: u64, workloads: impl IntoIterator<Item = (String, Workload)>) -> Self {
        Self {
            version,
            workloads: by_pod(workloads),
            transit: Vec::new(),
        }
    }

    /// This config with `transit` as its jobs in transit: pod that last held them -> jobs.
    /// Pods are stored in ordinal order and pods without jobs are left out.
    pub fn with_transit(
        mut self,
        transit: impl IntoIterator<Item = (String, Vec<String>)>,
    ) -> Self {
        self.transit = by_pod(transit.into_iter().filter(|(_, jobs)| !jobs.is_empty()));
        self
    }

    /// The jobs in transit, by the pod that last held them, in ordinal order.
    pub fn transit(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.transit
            .iter()
            .map(|(pod, jobs)| (pod.as_str(), jobs.as_slice()))
    }

    /// The YAML text of this config. The same config always gives byte-identical text.
    pub fn render(&self) -> String {
        serde_yaml::to_string(self).expect("strings and integers always serialize to YAML")
    }

    /// Reads a `config.yml` by the rules of `docs/worker-protocol.md` (the vectors in
    /// `protocol/vectors/config.json` hold every worker to them): the document is a mapping;
    /// unknown fields are ignored; missing or null versions read as 0 (the predecessor wrote
    /// none at the top level) and missing or null job lists as empty.
    pub fn parse(text: &str) -> Result<WorkerConfig, ParseError> {
        if text.trim().is_empty() {
            return Err(ParseError::Empty);
        }
        if text.contains(BYTE_ORDER_MARK) {
            return Err(ParseError::ByteOrderMark);
        }
        let Root(raw) = serde_yaml::from_str(text).map_err(ParseError::Yaml)?;
        let workloads = raw
            .workloads
            .unwrap_or_default()
            .into_iter()
            .map(|(pod, raw)| {
                let raw = raw.unwrap_or_default();
                let workload = Workload {
                    version: raw.version.unwrap_or(0),
                    jobs: raw.jobs.unwrap_or_default(),
                };
                (pod, workload)
            });
        let transit = raw
            .transit
            .unwrap_or_default()
            .into_iter()
            .map(|(pod, jobs)| (pod, jobs.unwrap_or_default()));
        Ok(WorkerConfig::new(raw.version.unwrap_or(0), workloads).with_transit(transit))
    }

    /// The workload of `pod`, if the config has one.
    pub fn workload(&self, pod: &str) -> Option<&Workload> {
        self.workloads
            .binary_search_by(|(name, _)| pod_order(name, pod))
            .ok()
            .map(|found| &self.workloads[found].1)
    }

    /// Every pod and its workload, in ordinal order.
    pub fn workloads(&self) -> impl Iterator<Item = (&str, &Workload)> {
        self.workloads
            .iter()
            .map(|(pod, workload)| (pod.as_str(), workload))
    }

    /// The number of pods in the config.
    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    /// Whether the config names no pod.
    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }
}

impl Serialize for WorkerConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The workloads as a YAML mapping in stored (ordinal) order.
        struct Workloads<'a>(&'a [(String, Workload)]);
        impl Serialize for Workloads<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (pod, workload) in self.0 {
                    map.serialize_entry(pod, workload)?;
                }
                map.end()
            }
        }
        /// The jobs in transit as a YAML mapping in stored (ordinal) order.
        struct Transit<'a>(&'a [(String, Vec<String>)]);
        impl Serialize for Transit<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (pod, jobs) in self.0 {
                    map.serialize_entry(pod, jobs)?;
                }
                map.end()
            }
        }
        let fields = if self.transit.is_empty() { 2 } else { 3 };
        let mut config = serializer.serialize_struct("WorkerConfig", fields)?;
        config.serialize_field("version", &self.version)?;
        config.serialize_field("workloads", &Workloads(&self.workloads))?;
        // Left out when empty, so a config without a handoff renders as it always did.
        if !self.transit.is_empty() {
            config.serialize_field("transit", &Transit(&self.transit))?;
        }
        config.end()
    }
}

/// The document as read: a mapping. serde_yaml reads an empty document (or one of comments
/// only) as an empty mapping when asked for a struct, which would make any such text a config
/// of version 0; asked for any value, it says what the document is.
struct Root(RawConfig);

impl<'de> Deserialize<'de> for Root {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Mapping;
        impl<'de> Visitor<'de> for Mapping {
            type Value = RawConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping with version and workloads")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawConfig, A::Error> {
                RawConfig::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_any(Mapping).map(Root)
    }
}

/// The config as read, before defaults.
#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    workloads: Option<BTreeMap<String, Option<RawWorkload>>>,
    #[serde(default)]
    transit: Option<BTreeMap<String, Option<Vec<String>>>>,
}

/// One workload as read, before defaults.
#[derive(Deserialize, Default)]
struct RawWorkload {
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    jobs: Option<Vec<String>>,
}

/// Entries sorted by pod in ordinal order; a repeated pod name keeps its last entry.
fn by_pod<T>(entries: impl IntoIterator<Item = (String, T)>) -> Vec<(String, T)> {
    let mut entries: Vec<(String, T)> = entries.into_iter().collect();
    // Stable sort, then keep the last of each run of equal names.
    entries.sort_by(|a, b| pod_order(&a.0, &b.0));
    let mut unique: Vec<(String, T)> = Vec::with_capacity(entries.len());
    for entry in entries {
        match unique.last_mut() {
            Some(last) if last.0 == entry.0 => *last = entry,
            _ => unique.push(entry),
        }
    }
    unique
}

/// The ordinal of `pod` if it is a pod of `statefulset` (`<statefulset>-<ordinal>`).
pub fn ordinal_in(pod: &str, statefulset: &str) -> Option<usize> {
    parse_ordinal(pod.strip_prefix(statefulset)?.strip_prefix('-')?)
}

/// The ordinal written in decimal without leading zeros, as the StatefulSet controller names
/// pods.
fn parse_ordinal(text: &str) -> Option<usize> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

/// Pod names in ordinal order: by the prefix before the last `-`, then by the ordinal after it
/// as a number (`w-9` before `w-10`); names without an ordinal sort before those with one.
fn pod_order(a: &str, b: &str) -> Ordering {
    fn key(pod: &str) -> (&str, Option<usize>) {
        match pod.rsplit_once('-') {
            Some((prefix, ordinal)) => match parse_ordinal(ordinal) {
                Some(ordinal) => (prefix, Some(ordinal)),
                None => (pod, None),
            },
            None => (pod, None),
        }
    }
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}
