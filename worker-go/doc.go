// Package swarmworker is the worker side of swarm-operator's acknowledged handoff
// (rollout.policy: Acknowledge), the Go counterpart of the Rust crate swarm-worker and of
// examples/python-worker.
//
// An application implements [Jobs] (start and stop one job) and hands it to [Worker.Run]. The
// worker proves to itself that it may run its jobs by fence reads: a GET of the pod's own
// ConfigMap (<SWARM_CONFIG_MAP>.<POD_NAME>) with no resourceVersion, which the API server
// answers with a quorum read, every half of the permit F. A read sent at s lets the jobs of
// the pod's entry run until s + F; the worker stops a job the moment its permit lapses or a
// read no longer lists it, starts the jobs a read adds, and acknowledges each new version on
// the pod's Lease (annotation swarm.io/acked-version), which it writes at start and on each
// acknowledgement only. It serves /readyz and /healthz, so that the kubelet, not Lease
// renewals, proves it live. On SIGTERM it stops everything and acknowledges only a version
// without jobs. docs/worker-protocol.md in the repository is the specification;
// protocol/vectors/ holds the examples this package is tested against.
//
// The parts, each usable on its own:
//   - the wire contract: names ([AckedVersionAnnotation], [PoolLabel], ...), config.yml
//     ([ParseConfig], [ParseEntry]), the per-worker ConfigMap ([SliceName], [ParseIndex]), the
//     Lease to write ([RenewedLease]), the report line ([ReportLine]) and the fence arithmetic
//     ([ReadInterval], [ReadyWithin], [RetryDelay], [RevokeWait]);
//   - the protocol's rules without I/O: [Fence] (what runs and until when, when to read,
//     readiness, what to acknowledge, when a terminating worker is done);
//   - [Settings] from the pod's environment, overridable by [Option]s given to [New];
//   - [Worker.Run], which drives [Jobs] through all of it against the API server, retries what
//     fails, and returns a [*RefusedError] with every job stopped when the API server refuses
//     the worker's own requests for good (401, or 403 from RBAC or the Lease admission policy),
//     and holds every request while the API server sheds them (429), with one hold per worker;
//   - [NewClient], the client it builds, which hands a 429 over at once instead of retrying it.
//
// Run also sends klog's lines, and with them client-go's, to the worker's logger.
package swarmworker
