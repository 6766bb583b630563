//! swarm-operator: shares a SwarmPool's jobs over the workers of a StatefulSet or Deployment,
//! each job on exactly one worker, through a ConfigMap the workers read.
//!
//! The layers, from the API types inwards and back out:
//! - [`api`]: the SwarmPool resource, its conditions and failure reasons (the names shared
//!   with the workers are the wire contract's, in `swarm_protocol`);
//! - [`state`]: the objects as the operator reads and writes them: the ConfigMap's format
//!   (`config.yml` and the `swarm.io/*` annotations) and the pod summary it caches;
//! - [`planner`]: pure decisions, one step of a reconcile round at a time;
//! - [`drive`]: the round protocol that carries the steps out against a cluster (the API
//!   server, or one in memory for the what-if commands and the tests);
//! - [`runtime`]: leader election, HTTP endpoints, metrics, the caches' health, retry delays,
//!   telemetry;
//! - [`controller`]: watches, caches, triggers, and the cluster over kube;
//! - [`cli`] and [`plugin`]: `swarm-operator plan` and `kubectl swarm`.

#![warn(missing_docs)]

pub mod api;
pub mod cli;
pub mod controller;
pub mod drive;
pub mod planner;
pub mod plugin;
pub mod runtime;
pub mod state;

/// 64 bits that differ between calls and between processes, for jitter and for identities
/// that must differ at each start (not for anything that needs randomness of quality).
pub fn random_bits() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()))
}

/// `error` and its causes on one line, each cause once: kube's errors hide the cause that
/// tells a refused connection from a TLS failure or a timeout in their sources.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// Errors of a reconcile. Invalid specs are not errors: they become a Failed status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the pool itself from the API server failed.
    #[error("failed to read SwarmPool {name}: {source}")]
    GetPool {
        /// Pool name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a ConfigMap (the pool's, or one it reads jobs from) failed.
    #[error("failed to read ConfigMap {name}: {source}")]
    GetConfigMap {
        /// ConfigMap name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the pool's ConfigMap failed.
    #[error("failed to apply ConfigMap {name}: {source}")]
    ApplyConfigMap {
        /// ConfigMap name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the worker pods from the API server failed.
    #[error("failed to list pods in namespace {namespace}: {source}")]
    ListPods {
        /// Namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Listing the pool's worker Leases from the API server failed.
    #[error("failed to list worker Leases in namespace {namespace}: {source}")]
    ListLeases {
        /// Namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Deleting a stale worker pod failed.
    #[error("failed to delete pod {name}: {source}")]
    DeletePod {
        /// Pod name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the pool's status failed.
    #[error("failed to patch the status: {source}")]
    PatchStatus {
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The SwarmPool has no namespace (it is a namespaced resource, so this is a bug upstream).
    #[error("SwarmPool has no namespace")]
    MissingNamespace,
    /// This replica's leader lease may have run out: it writes nothing more.
    #[error("the leader lease may have expired; this replica writes nothing more")]
    NotLeader,
    /// Planning did not settle after writing: the ConfigMap kept differing from the plan.
    #[error(transparent)]
    Unsettled(#[from] drive::Unsettled),
}

impl Error {
    /// The API server's error, when the API server answered.
    pub fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::GetPool { source, .. }
            | Error::GetConfigMap { source, .. }
            | Error::ApplyConfigMap { source, .. }
            | Error::ListPods { source, .. }
            | Error::ListLeases { source, .. }
            | Error::DeletePod { source, .. }
            | Error::PatchStatus { source } => Some(source),
            Error::MissingNamespace | Error::Unsettled(_) | Error::NotLeader => None,
        }
    }

    /// Short label for the `error` label of the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::GetPool { .. } => "get_pool",
            Error::GetConfigMap { .. } => "get_configmap",
            Error::ApplyConfigMap { .. } => "apply_configmap",
            Error::ListPods { .. } => "list_pods",
            Error::ListLeases { .. } => "list_leases",
            Error::DeletePod { .. } => "delete_pod",
            Error::PatchStatus { .. } => "patch_status",
            Error::MissingNamespace => "missing_namespace",
            Error::Unsettled(_) => "unsettled",
            Error::NotLeader => "not_leader",
        }
    }
}
