//! Scenarios that need a real cluster to themselves ([`Share::Cluster`]): they restart
//! control-plane components, install `deploy/` (cluster-scoped RBAC, the operator's namespace;
//! in `real_node`, the operator image running on the cluster's real node) or run the operator
//! over all namespaces. The harness runs them one at a time and alone; `scripts/test.sh` runs them first (`scenarios::whole_cluster::`),
//! then the others side by side.
//!
//! [`Share::Cluster`]: crate::harness::Share::Cluster

mod control_plane;
pub(crate) mod deploy;
mod node_loss;
mod real_node;
mod real_workers;
pub(crate) mod worker_lease_policy;
