package swarmworker

// The labels, annotations and keys of the wire contract (protocol/vectors/names.json). A
// worker uses only a few of them; the rest are here so that one list holds the whole contract.
const (
	// VersionAnnotation is the pool ConfigMap's annotation with the config version.
	VersionAnnotation = "swarm.io/version"
	// PendingRefreshAnnotation is the pool ConfigMap's annotation with the workers still to
	// refresh (pod name to pod uid).
	PendingRefreshAnnotation = "swarm.io/pending-refresh"
	// HandoffAnnotation is the pool ConfigMap's annotation with the pod instances that may
	// still run jobs in transit.
	HandoffAnnotation = "swarm.io/handoff"
	// SlotsAnnotation is a Deployment pool's slot table, on its ConfigMap.
	SlotsAnnotation = "swarm.io/slots"
	// AwaitingAckAnnotation lists the workers that have not acknowledged the version that
	// last changed their jobs.
	AwaitingAckAnnotation = "swarm.io/awaiting-ack"
	// AckedVersionAnnotation is the worker Lease's annotation: the config version whose entry
	// the pod instance named by holderIdentity runs, exactly, as a decimal string.
	AckedVersionAnnotation = "swarm.io/acked-version"
	// PoolLabel names the pool, on its ConfigMaps and on each worker's Lease.
	PoolLabel = "swarm.io/pool"
	// ManagedByLabel is the standard label naming the managing tool.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// Manager is the operator's name: ManagedByLabel's value and its field manager.
	Manager = "swarm-operator"
	// StatefulSetPodLabel is the label the StatefulSet controller puts on its pods.
	StatefulSetPodLabel = "statefulset.kubernetes.io/pod-name"
	// DeploymentPodLabel is the label the Deployment controller puts on its pods.
	DeploymentPodLabel = "pod-template-hash"
	// JobsSourceLabel marks a ConfigMap named in a pool's spec.jobsFrom.
	JobsSourceLabel = "swarm.io/jobs-source"
	// WorkerLabel names the pod whose slice of the config a worker's own ConfigMap holds.
	WorkerLabel = "swarm.io/worker"
	// FencedAtAnnotation is the index version a worker's own ConfigMap was fenced at.
	FencedAtAnnotation = "swarm.io/fenced-at"
	// ConfigKey is the ConfigMap key holding config.yml.
	ConfigKey = "config.yml"
	// IndexKey is the pool ConfigMap's key holding index.yml.
	IndexKey = "index.yml"
)
