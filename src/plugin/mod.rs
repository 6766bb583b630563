//! `kubectl swarm`: the kubectl plugin's reports (`status`, `where`, `plan`), computed from what
//! the cluster holds with the operator's own readers: the ConfigMap's `config.yml` (or, in the
//! per-worker layout, its index and the workers' own ConfigMaps) and bookkeeping, and the
//! planner's assignment for `plan`.
//!
//! Pure: the `kubectl-swarm` binary fetches a [`PoolView`] per pool and prints a report with
//! [`output`]; everything here is tested without a cluster.

pub mod locate;
pub mod output;
pub mod scale_plan;
pub mod status;

use crate::state::lease::Acks;
use crate::state::lease_summary::LeaseSummary;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use swarm_protocol::config::WorkerConfig;

use crate::api::crd::SwarmPool;
use crate::state::pod_summary::PodSummary;
use crate::state::slice_summary::SliceSummary;
use crate::state::{config_map, worker_slices};

/// A pool as the cluster holds it: the pool, its ConfigMap, and the pods of its namespace.
#[derive(Clone, Debug)]
pub struct PoolView {
    /// The pool, its `spec.jobs` the combined jobs once `spec.jobsFrom` is resolved
    /// ([`crate::state::jobs_source::resolve`]).
    pub pool: SwarmPool,
    /// The ConfigMap the pool names, if it exists.
    pub config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps (the per-worker layout of `rollout.policy: Acknowledge`).
    pub worker_config_maps: Vec<ConfigMap>,
    /// Pods of the pool's namespace (looked up by name).
    pub pods: Vec<PodSummary>,
    /// The workers' Leases (`rollout.policy: Acknowledge`): what each acknowledged.
    pub leases: Vec<LeaseSummary>,
}

impl PoolView {
    /// The pool's namespace.
    pub fn namespace(&self) -> String {
        self.pool.namespace().unwrap_or_default()
    }

    /// The pool's name.
    pub fn name(&self) -> String {
        self.pool.name_any()
    }

    /// The worker config the operator wrote.
    pub fn config(&self) -> Result<WorkerConfig, PluginError> {
        let missing = || PluginError::NoConfigMap {
            namespace: self.namespace(),
            pool: self.name(),
            config_map: self.pool.config_map_name(),
        };
        let cm = self.config_map.as_ref().ok_or_else(missing)?;
        let unreadable = |detail: String| PluginError::UnreadableConfig {
            namespace: self.namespace(),
            config_map: self.pool.config_map_name(),
            detail,
        };
        if let Some(text) = config_map::config_text(cm) {
            return WorkerConfig::parse(text).map_err(|error| unreadable(error.to_string()));
        }
        match worker_slices::index_of(cm) {
            Some(Ok(index)) => {
                let read: Vec<SliceSummary> = self
                    .worker_config_maps
                    .iter()
                    .map(SliceSummary::from)
                    .collect();
                let mut slices = worker_slices::Observed::of(&self.pool.config_map_name(), &read);
                Ok(worker_slices::assemble(&index, &mut slices).config)
            }
            Some(Err(error)) => Err(unreadable(format!(
                "{} is unreadable: {error}",
                swarm_protocol::slices::INDEX_KEY
            ))),
            None => Err(missing()),
        }
    }

    /// The workers that still have to restart: recorded by the operator and not yet replaced
    /// (an entry whose pod now has another uid is done, as the operator sees it).
    pub fn restart_pending(&self, pod: &str) -> bool {
        let pending = config_map::pending_refresh(self.config_map.as_ref());
        pending.entries().get(pod).is_some_and(|uid| {
            uid.is_empty() || self.pod(pod).and_then(|p| p.metadata.uid.as_deref()) == Some(uid)
        })
    }

    /// The pod of that name in the pool's namespace.
    pub fn pod(&self, name: &str) -> Option<&PodSummary> {
        self.pods
            .iter()
            .find(|pod| pod.metadata.name.as_deref() == Some(name))
    }

    /// The config version the pod's current instance acknowledged in its Lease, if any.
    pub fn acked(&self, name: &str) -> Option<u64> {
        let uid = self.pod(name)?.metadata.uid.as_deref()?;
        Acks::from_leases(&self.leases).state(name, uid).acked()
    }

    /// The permit the workers' Leases declare, the longest of them (the default without one):
    /// the permit the pool's failover bound depends on.
    pub fn permit(&self) -> std::time::Duration {
        self.leases
            .iter()
            .filter_map(|lease| lease.duration_seconds)
            .filter_map(|seconds| u64::try_from(seconds).ok())
            .map(std::time::Duration::from_secs)
            .max()
            .unwrap_or(swarm_protocol::fence::DEFAULT_PERMIT)
    }

    /// Whether the pod exists and is Ready (`None`: no such pod).
    pub fn ready(&self, name: &str) -> Option<bool> {
        self.pod(name).map(|pod| {
            pod.metadata.deletion_timestamp.is_none()
                && !pod.finished
                && pod.ready.as_ref().is_some_and(|ready| ready.is_true)
        })
    }
}

/// Why a command could not answer; each kind has its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The pool does not exist.
    #[error("no SwarmPool {pool} in namespace {namespace}")]
    NoPool {
        /// Namespace searched.
        namespace: String,
        /// Pool name asked for.
        pool: String,
    },
    /// The pool has no ConfigMap, or one without a config: not reconciled yet.
    #[error(
        "SwarmPool {namespace}/{pool} has no config yet (ConfigMap {config_map}): the operator has not reconciled it; check that it runs and `kubectl describe swarmpool {pool} -n {namespace}`"
    )]
    NoConfigMap {
        /// Namespace of the pool.
        namespace: String,
        /// Pool name.
        pool: String,
        /// The ConfigMap the pool names.
        config_map: String,
    },
    /// The ConfigMap's config cannot be read.
    #[error("ConfigMap {namespace}/{config_map}: {detail}")]
    UnreadableConfig {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// ConfigMap name.
        config_map: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The pool's `spec.jobsFrom` cannot be resolved into its jobs.
    #[error("SwarmPool {namespace}/{pool}: {detail}")]
    JobsFrom {
        /// Namespace of the pool.
        namespace: String,
        /// Pool name.
        pool: String,
        /// Which source, and what to fix.
        detail: String,
    },
    /// No pool lists the job.
    #[error("job {job} is in no SwarmPool {scope}")]
    NoSuchJob {
        /// The job asked for.
        job: String,
        /// "in namespace NS" or "in any namespace".
        scope: String,
    },
    /// The pool has no workload to plan for.
    #[error(
        "SwarmPool {namespace}/{pool} has no workload yet ({why}); `kubectl describe swarmpool {pool} -n {namespace}` says why"
    )]
    NoWorkload {
        /// Namespace of the pool.
        namespace: String,
        /// Pool name.
        pool: String,
        /// The phase and reason the status gives.
        why: String,
    },
    /// The what-if of a plan did not settle.
    #[error("SwarmPool {namespace}/{pool}: {detail}")]
    WhatIf {
        /// Namespace of the pool.
        namespace: String,
        /// Pool name.
        pool: String,
        /// What kept changing.
        detail: String,
    },
    /// No cluster configuration, or the cluster cannot be reached or refused the request.
    #[error("{0}")]
    Cluster(String),
}

/// Whether an error status says that the object `name` does not exist. The API server answers a
/// resource it does not serve (a CRD not installed) with a 404 `NotFound` too, but one that names
/// no object.
pub fn names_missing_object(status: &kube::core::Status, name: &str) -> bool {
    status.reason == "NotFound" && status.details.as_ref().is_some_and(|d| d.name == name)
}

impl PluginError {
    /// The process exit code: 1 when what was asked about does not exist (yet), 3 when the
    /// cluster could not be used. Usage errors exit with 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            PluginError::Cluster(_) => 3,
            _ => 1,
        }
    }
}
