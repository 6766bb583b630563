// Package swarmworker is the worker side of swarm-operator's acknowledged handoff
// (rollout.policy: Acknowledge), the Go counterpart of the Rust crate swarm-worker and of
// examples/python-worker.
//
// An application implements [Jobs] (start and stop one job) and hands it to [Worker.Run]. The
// worker reads the pod's own ConfigMap (<SWARM_CONFIG_MAP>.<POD_NAME>) through the API, stops
// and starts jobs as each new config version asks, acknowledges the version on the pod's Lease
// (annotation swarm.io/acked-version), fences itself (stops every job) when its Lease has not
// been renewed in time, and on SIGTERM stops everything and acknowledges only a version without
// jobs. docs/worker-protocol.md in the repository is the specification; protocol/vectors/ holds
// the examples this package is tested against.
//
// The parts, each usable on its own:
//   - the wire contract: names ([AckedVersionAnnotation], [PoolLabel], ...), config.yml
//     ([ParseConfig], [ParseEntry]), the per-worker ConfigMap ([SliceName], [ParseIndex]), the
//     Lease to write ([RenewedLease]), the report line ([ReportLine]) and the fence timing
//     ([RenewInterval], [DefaultMargin], [FenceLimit]);
//   - the protocol's rules without I/O: [Handoff] (what to stop and start, when to acknowledge,
//     how to terminate) and [Fence] (when to stop every job, when to run again);
//   - [Settings] from the pod's environment, overridable by [Option]s given to [New];
//   - [Worker.Run], which drives [Jobs] through all of it against the API server.
package swarmworker
