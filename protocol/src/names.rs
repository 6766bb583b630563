//! Every label, annotation and field-manager name the operator reads or writes, in one place:
//! they are a contract with workers, with `kubectl swarm`, and with whoever else reads the
//! ConfigMap or the pods.

/// ConfigMap annotation with the config version, as a decimal string.
pub const VERSION_ANNOTATION: &str = "swarm.io/version";
/// ConfigMap annotation holding the stale workers: JSON object of pod name to pod uid (`""`
/// while unresolved), keys sorted.
pub const PENDING_REFRESH_ANNOTATION: &str = "swarm.io/pending-refresh";
/// ConfigMap annotation with the holders: JSON object of pod name to `{"uid", "revokedAt"}`, the
/// pod instances that may still run jobs in transit (`uid` empty until resolved), keys sorted.
pub const HANDOFF_ANNOTATION: &str = "swarm.io/handoff";
/// ConfigMap annotation with a Deployment pool's slot table: JSON list of slots, each the list
/// of pods that held it, the pod holding it last (see `swarm_assign::slots`).
pub const SLOTS_ANNOTATION: &str = "swarm.io/slots";
/// ConfigMap annotation with the workers that have not acknowledged the version that last
/// changed their jobs (`rollout.policy: Acknowledge`): JSON object of pod name to
/// `{"uid", "since"}`, the pod instance waited for and since when, keys sorted.
pub const AWAITING_ACK_ANNOTATION: &str = "swarm.io/awaiting-ack";
/// Annotation of a worker's Lease: the config version whose entry the pod instance named by
/// the Lease's `holderIdentity` runs, exactly, as a decimal string.
pub const ACKED_VERSION_ANNOTATION: &str = "swarm.io/acked-version";
/// ConfigMap label naming the pool that writes it; also on each worker's Lease.
pub const POOL_LABEL: &str = "swarm.io/pool";
/// Standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`], the server-side apply field manager of every write, and the
/// events' reporting controller.
pub const MANAGER: &str = "swarm-operator";
/// Label the StatefulSet controller puts on every pod it creates; one pod watch is limited to
/// it.
pub const STATEFULSET_POD_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label the Deployment controller puts on every pod of its ReplicaSets; the other pod watch is
/// limited to it.
pub const DEPLOYMENT_POD_LABEL: &str = "pod-template-hash";
/// Label a ConfigMap named in a pool's `spec.jobsFrom` must carry (any value): the operator
/// watches only ConfigMaps with it, so it never caches the namespace's other ConfigMaps.
pub const JOBS_SOURCE_LABEL: &str = "swarm.io/jobs-source";
/// Label of a worker's own ConfigMap (`rollout.policy: Acknowledge`): the pod whose slice of
/// the config it holds.
pub const WORKER_LABEL: &str = "swarm.io/worker";
/// Annotation of a worker's own ConfigMap: the index version it was fenced at, when a write of
/// that version never landed (see [`crate::slices`]).
pub const FENCED_AT_ANNOTATION: &str = "swarm.io/fenced-at";
