//! End-to-end suite: the built `swarm-operator` binary, driven through the real `kubectl`.
//!
//! Every test starts its own simulated control plane (`kube-sim`, in process), writes a
//! kubeconfig for it, runs the operator binary as a separate process against that kubeconfig
//! and acts through `kubectl` as a user would. Assertions read the API directly and, on the
//! simulation, its inspection endpoints: what every pod instance mounted when it started and
//! the log of the HTTP requests the operator made.
//!
//! With `SWARM_E2E_KUBECONFIG` set to a kubeconfig, no simulation is started: the same tests
//! run against that cluster side by side, each in a namespace of its own (`swarm-<scenario>`,
//! deleted before it starts and after it passes) with its own operator process watching only
//! that namespace as a ServiceAccount of it; the scenarios under `scenarios::whole_cluster`
//! take the cluster to themselves (namespace `swarm`). The operator runs out of cluster (but in
//! `scenarios::whole_cluster::real_node`, which installs its image, `SWARM_E2E_OPERATOR_IMAGE`,
//! on the cluster's real node), and the simulation-only assertions are skipped with a note.
//! `--test-threads` bounds how many run at once.
//!
//! Every scenario starts the same way, `scenario!(name).<options>.run(async |env| { ... })`
//! (see `harness` and docs/testing.md), and ends with the checks every scenario gets.
//!
//! kubectl is taken from `KUBECTL`, then `.tools/bin/kubectl`, then `PATH`;
//! `scripts/install-kubectl.sh` installs the pinned one.

mod harness;
mod scenarios;
