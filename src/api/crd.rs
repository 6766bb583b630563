//! The `SwarmPool` custom resource (`swarm.io/v1alpha1`).
//!
//! Field names and doc comments are a contract: the doc comments become the schema descriptions
//! that `kubectl explain swarmpool.spec` shows, and `crds/swarmpool.yaml` is generated from these
//! types (`swarm-operator crd`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use swarm_assign::{Qos, Strategy};

/// API group of the `SwarmPool` resource.
pub const GROUP: &str = "swarm.io";
/// API version of the `SwarmPool` resource.
pub const VERSION: &str = "v1alpha1";
/// Default of `spec.rollout.maxUnavailable`.
pub const DEFAULT_MAX_UNAVAILABLE: &str = "25%";

/// A list of jobs shared over the workers of one StatefulSet or Deployment: each job runs on
/// exactly one worker.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
// Clippy reads the repeated `type_ = ...` of separate printcolumn(...) entries as duplicates.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "swarm.io",
    version = "v1alpha1",
    kind = "SwarmPool",
    plural = "swarmpools",
    shortname = "swp",
    namespaced,
    status = "SwarmPoolStatus",
    derive = "PartialEq",
    doc = "SwarmPool shares a list of jobs over the workers (pods) of one StatefulSet or Deployment, each job on exactly one worker, through a ConfigMap the workers mount.",
    // The column keeps its first name, which scripts parse; it shows a Deployment pool's
    // Deployment too.
    printcolumn(
        name = "StatefulSet",
        type_ = "string",
        json_path = ".status.workload",
        description = "The workload (StatefulSet or Deployment) whose pods are the workers"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Ready workers / workers"
    ),
    printcolumn(
        name = "Jobs",
        type_ = "integer",
        json_path = ".status.jobs",
        description = "Number of jobs in the pool"
    ),
    printcolumn(
        name = "Version",
        type_ = "integer",
        json_path = ".status.version",
        description = "Config version now in the ConfigMap"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, RollingOut, Balanced, Degraded or Failed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Unassigned",
        type_ = "integer",
        json_path = ".status.unassignedJobs",
        description = "Jobs no worker holds and none is handing over (the StatefulSet has 0 replicas)",
        priority = 1
    ),
    printcolumn(
        name = "In-Transit",
        type_ = "integer",
        json_path = ".status.jobsInTransit",
        description = "Jobs revoked from their old worker and not yet granted to the new one",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SwarmPoolSpec {
    /// Selects the worker StatefulSet (or Deployment, per `workloadKind`) in the pool's namespace
    /// by its own labels (not its pods' labels). Exactly one must match; an empty selector is
    /// rejected.
    pub selector: LabelSelector,

    /// The kind of workload whose pods are the workers: `StatefulSet` (pods named by ordinal) or
    /// `Deployment` (pods with random names, given stable slots by the operator).
    #[serde(default)]
    pub workload_kind: WorkloadKind,

    /// The jobs to run: opaque, unique, non-empty strings. Each is assigned to exactly one worker.
    /// May be empty. A job listed twice fails the pool with reason `InvalidJobs`.
    #[schemars(schema_with = "job_list_schema")]
    pub jobs: Vec<String>,

    /// More jobs, read from ConfigMaps in the pool's namespace (for pools whose jobs do not fit
    /// in one object). The pool's jobs are `jobs` followed by each source's jobs, in list
    /// order, and must be unique over all of them. Each ConfigMap must carry the label
    /// `swarm.io/jobs-source` (any value) so the operator watches it; the operator never writes
    /// it. While a source is missing or cannot be read the pool keeps its current assignment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs_from: Vec<JobsFromSource>,

    /// Name of the ConfigMap the operator writes (key `config.yml`) and the workers mount.
    /// Defaults to `<pool name>-config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,

    /// How jobs are assigned to workers: `Sticky` (balanced, moves as few jobs as possible),
    /// `Consistent` (jump consistent hash of the job name) or `Contiguous` (jobs in spec order,
    /// in contiguous chunks).
    #[serde(default)]
    pub strategy: Strategy,

    /// Quality of service: jobs that need a worker of their own (`dedicated`) and the relative
    /// cost of jobs (`weights`). Without it every job counts the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Qos>,

    /// How workers whose job set changed pick up their new jobs.
    #[serde(default)]
    pub rollout: RolloutSpec,

    /// When true, the operator computes and reports the assignment in the status but writes
    /// nothing to the ConfigMap and deletes no pod.
    #[serde(default)]
    pub paused: bool,
}

/// A ConfigMap that lists jobs of the pool, one per line under `key`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobsFromSource {
    /// The ConfigMap, in the pool's namespace.
    pub config_map_ref: ConfigMapRef,

    /// The key whose value lists the jobs: one per line, surrounding whitespace trimmed; blank
    /// lines and lines starting with `#` are ignored.
    #[serde(default = "default_jobs_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

/// A ConfigMap in the pool's namespace, by name.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConfigMapRef {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// `spec.jobsFrom[].key` when unset.
pub const DEFAULT_JOBS_KEY: &str = "jobs";

fn default_jobs_key() -> String {
    DEFAULT_JOBS_KEY.to_owned()
}

/// The kind of workload whose pods are the workers.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WorkloadKind {
    /// A StatefulSet: worker `i` is pod `<statefulset>-<i>`.
    #[default]
    StatefulSet,
    /// A Deployment: the workers are the pods of its ReplicaSets, each given a slot.
    Deployment,
}

impl WorkloadKind {
    /// The kind's name, as in `spec.workloadKind`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        }
    }
}

/// How workers pick up a changed job set.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.policy) && self.policy == 'None') || (has(self.handoff) && self.handoff == 'Overlap')",
    "message": "rollout.policy None needs rollout.handoff Overlap: the operator cannot tell when a worker that reloads by itself has stopped a job"
}]))]
pub struct RolloutSpec {
    /// `DeletePods`: delete the pod of every worker whose job set changed (once per change) so
    /// the StatefulSet re-creates it on the new config. `Acknowledge`: the workers read the
    /// ConfigMap through the API and acknowledge each version in a Lease of their own; nothing
    /// restarts. `None`: only write the ConfigMap; the workers reload it themselves.
    #[serde(default)]
    pub policy: RolloutPolicy,

    /// Under `Acknowledge`: seconds a worker has to acknowledge a version that changes its jobs
    /// before its pod is deleted, as under `DeletePods`. A progress deadline: it runs from the
    /// write or the pool's last acknowledgement, whichever is later, so a slow API server does
    /// not get the pods of a rollout it is still taking acknowledgements for deleted.
    #[serde(default = "default_ack_timeout_seconds")]
    #[schemars(extend("minimum" = 1))]
    pub ack_timeout_seconds: i64,

    /// Under `Acknowledge`: the grace the operator gives a worker before it counts it gone:
    /// seconds its pod may be NotReady before its jobs are revoked, and seconds added to the
    /// revoke wait (a job revoked from a worker that did not acknowledge is granted elsewhere
    /// `permit * (1 + 2%) / (1 - 2%)` plus this after the revoke, when no read the worker sent
    /// before the revoke can still let it run the job).
    #[serde(default = "default_lease_grace_seconds")]
    #[schemars(extend("minimum" = 0))]
    pub lease_grace_seconds: i64,

    /// How many workers may be unavailable at once while stale workers are refreshed: an
    /// integer, or a percentage of the StatefulSet's replicas such as `25%` (rounded down).
    /// At least 1 either way. Pods that are not Ready or are terminating count as unavailable.
    #[serde(default = "default_max_unavailable")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_unavailable: IntOrString,

    /// How a job moves between workers. `Exclusive`: the job is first revoked (listed for no
    /// worker) and granted to its new worker only once every pod that may still run it is gone,
    /// so it never runs on two workers at once; it runs on none for a while instead. `Overlap`:
    /// the new worker gets it at once, and both may run it until the old one restarts. Exclusive
    /// needs `policy: DeletePods` or `Acknowledge`.
    #[serde(default)]
    pub handoff: Handoff,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            policy: RolloutPolicy::default(),
            ack_timeout_seconds: default_ack_timeout_seconds(),
            lease_grace_seconds: default_lease_grace_seconds(),
            max_unavailable: default_max_unavailable(),
            handoff: Handoff::default(),
        }
    }
}

/// `Exclusive`: revoke a moving job, then grant it once no pod that may run it is left (a gap,
/// never a duplicate). `Overlap`: grant it at once (a duplicate until the old worker restarts,
/// never a gap).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Handoff {
    /// Break before make: a job is never held by two live pods.
    #[default]
    Exclusive,
    /// Make before break: the new worker starts a job before the old one has stopped it.
    Overlap,
}

/// `spec.rollout.ackTimeoutSeconds` when unset.
pub const DEFAULT_ACK_TIMEOUT_SECONDS: i64 = 60;

fn default_ack_timeout_seconds() -> i64 {
    DEFAULT_ACK_TIMEOUT_SECONDS
}

/// `spec.rollout.leaseGraceSeconds` when unset.
pub const DEFAULT_LEASE_GRACE_SECONDS: i64 = 2;

fn default_lease_grace_seconds() -> i64 {
    DEFAULT_LEASE_GRACE_SECONDS
}

fn default_max_unavailable() -> IntOrString {
    IntOrString::String(DEFAULT_MAX_UNAVAILABLE.to_owned())
}

/// `DeletePods`: delete the pod of every worker whose job set changed (once per change) so the
/// StatefulSet re-creates it on the new config. `Acknowledge`: workers reload by themselves and
/// acknowledge each version in their Lease. `None`: only write the ConfigMap; the workers
/// reload it themselves.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPolicy {
    /// Delete the pods of workers whose job set changed, paced by `maxUnavailable`.
    #[default]
    DeletePods,
    /// Workers read their entry through the API and acknowledge each version in a Lease named
    /// like their pod (annotation `swarm.io/acked-version`); a worker that does not within
    /// `ackTimeoutSeconds` has its pod deleted.
    Acknowledge,
    /// Only write the ConfigMap; the workers reload it themselves.
    None,
}

/// Observed state of a SwarmPool, written by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwarmPoolStatus {
    /// The `metadata.generation` of the spec this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Summary of the pool: `Pending`, `RollingOut`, `Balanced`, `Degraded` or `Failed`. The
    /// `Ready` condition carries the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Name of the workload (StatefulSet or Deployment) the selector matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,

    /// Name of the StatefulSet the selector matched (StatefulSet pools only; `workload` has it
    /// for every kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful_set: Option<String>,

    /// Number of workers: the workload's desired replicas. A Deployment pool counts its slots,
    /// which stay above the replicas while pods of a scale-down still run and hold jobs.
    #[serde(default)]
    pub workers: i32,

    /// Number of workers whose pod is Ready.
    #[serde(default)]
    pub ready_workers: i32,

    /// `readyWorkers/workers`, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,

    /// Number of jobs in the pool: `spec.jobs` and those of `spec.jobsFrom`.
    #[serde(default)]
    pub jobs: i32,

    /// Number of jobs no worker holds and none is handing over (only when the StatefulSet has 0
    /// replicas).
    #[serde(default)]
    pub unassigned_jobs: i32,

    /// Number of jobs in transit: revoked from their old worker, granted to the new one once
    /// every pod that may still run them is gone (`handoff: Exclusive`).
    #[serde(default)]
    pub jobs_in_transit: i32,

    /// Number of `spec.qos.dedicated` jobs that run as shared jobs for want of workers (only
    /// for pools with dedicated jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_unmet: Option<i32>,

    /// The config version now in the ConfigMap (`version` in `config.yml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,

    /// Pod names of workers that still run on an older job set and wait to be refreshed,
    /// in ordinal (slot) order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_workers: Vec<String>,

    /// Under `rollout.policy: Acknowledge`: the workers out of the pool, in ordinal (slot)
    /// order, and why. They get no job until their pod is Ready and their node renews its
    /// Lease again; their jobs went to the other workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable_workers: Vec<UnavailableWorker>,

    /// Conditions of types `Ready`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// A worker out of the pool (`rollout.policy: Acknowledge`) and why its jobs moved.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableWorker {
    /// The worker's pod name.
    pub pod: String,
    /// Why it is out of the pool.
    pub reason: UnavailableReason,
    /// Since when: the pod's Ready transition, or the node Lease's last renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// Why a worker is out of the pool.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UnavailableReason {
    /// Its pod has been NotReady for `rollout.leaseGraceSeconds`: its worker cannot read its
    /// ConfigMap, or does not answer the kubelet's probe (frozen, hung, cut off).
    NotReady,
    /// Its node's Lease has not been renewed for 20 s: the node is cut off or lost.
    NodeLeaseSilent,
}

/// Summary of the pool: `Pending`, `RollingOut`, `Balanced`, `Degraded` or `Failed`. The
/// `Ready` condition carries the reason.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Waiting for the first worker pod to exist, or paused with changes not yet written.
    Pending,
    /// Stale workers are being refreshed, or workers are (re)starting.
    RollingOut,
    /// The ConfigMap is current, no worker is stale and every worker is Ready.
    Balanced,
    /// The workload has 0 replicas, or a worker has not been Ready for a while.
    Degraded,
    /// The pool cannot be reconciled as specified; the `Ready` condition says why.
    Failed,
}

impl Phase {
    /// The name as it appears in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::RollingOut => "RollingOut",
            Phase::Balanced => "Balanced",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SwarmPool {
    /// Name of the ConfigMap this pool writes: `spec.configMap` or `<pool name>-config`.
    pub fn config_map_name(&self) -> String {
        match &self.spec.config_map {
            Some(name) if !name.is_empty() => name.clone(),
            _ => format!(
                "{}-config",
                self.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// The CRD as YAML, as `swarm-operator crd` prints it and `crds/swarmpool.yaml` holds it.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let yaml = serde_yaml::to_string(&SwarmPool::crd()).expect("a CRD always serializes to YAML");
    format!("# Generated by `swarm-operator crd` from src/api/crd.rs; do not edit.\n{yaml}")
}

fn job_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The jobs to run: opaque, unique, non-empty strings. Each is assigned to exactly one worker. May be empty.",
        "type": "array",
        "items": { "type": "string", "minLength": 1 },
        // Atomic, not `set`: the API server tracks a set's field ownership item by item on every
        // write of the object (status writes included), which costs seconds at 10,000 jobs.
        // Uniqueness is the operator's check (`InvalidJobs`).
        "x-kubernetes-list-type": "atomic",
    })
}

fn max_unavailable_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "How many workers may be unavailable at once while stale workers are refreshed: an integer, or a percentage of the StatefulSet's replicas such as `25%` (rounded down). At least 1 either way. Pods that are not Ready or are terminating count as unavailable.",
        "x-kubernetes-int-or-string": true,
        "default": DEFAULT_MAX_UNAVAILABLE,
    })
}

fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<Condition>();
    let mut schema = schemars::json_schema!({
        "description": "Conditions of types `Ready`, `Progressing` and `Degraded`.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    });
    schema.insert("items".into(), json!(item));
    schema
}
