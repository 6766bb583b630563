//! The per-worker layout of a pool's config (`rollout.policy: Acknowledge`): worker `<pod>`
//! reads ConfigMap [`slice_name`]`(<pool's ConfigMap>, <pod>)`, labelled with the pool
//! ([`crate::names::POOL_LABEL`]) and the pod ([`crate::names::WORKER_LABEL`]), whose
//! [`crate::config::CONFIG_KEY`] is the whole config's format cut to that pod. The pool's own
//! ConfigMap holds [`INDEX_KEY`]: the config version and the version each slice was written
//! at.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::BYTE_ORDER_MARK;

/// The pool ConfigMap's key holding the index.
pub const INDEX_KEY: &str = "index.yml";

/// The ConfigMap worker `pod` reads its slice from.
pub fn slice_name(config_map: &str, pod: &str) -> String {
    format!("{config_map}.{pod}")
}

/// `index.yml`: the config version, and the version each worker's slice was written at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// The config version.
    pub version: u64,
    /// Pod name to the version of its slice.
    #[serde(default)]
    pub workers: BTreeMap<String, u64>,
}

impl Index {
    /// Reads an `index.yml` text; one holding U+FEFF is refused, as `config.yml` is.
    pub fn parse(text: &str) -> Result<Index, serde_yaml::Error> {
        if text.contains(BYTE_ORDER_MARK) {
            return Err(serde::de::Error::custom(format!(
                "{INDEX_KEY} holds a byte order mark (U+FEFF); a name with one is written as the escape \"\\uFEFF\""
            )));
        }
        serde_yaml::from_str(text)
    }

    /// The YAML text.
    pub fn render(&self) -> String {
        serde_yaml::to_string(self).expect("strings and integers always serialize to YAML")
    }
}
