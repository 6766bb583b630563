//! Scenarios that need a real cluster to themselves ([`Share::Cluster`]): they restart
//! control-plane components, install `deploy/` (cluster-scoped RBAC, the operator's namespace;
//! in `real_node`, the operator image running on the cluster's real node) or run the operator
//! over all namespaces. Being in this module is what makes a scenario take the cluster alone:
//! the harness decides it from the module path ([`WHOLE_CLUSTER`]), and `scripts/test.sh` runs
//! the tests of that path first, then the others side by side. The harness lets one of them
//! hold the cluster at a time; `scripts/test.sh` runs them on two test threads, so that what
//! one prepares before it takes the cluster (the releases `real_node::helm` compiles) overlaps
//! another's run.
//!
//! [`Share::Cluster`]: crate::harness::env::Share::Cluster
//! [`WHOLE_CLUSTER`]: crate::harness::env::builder::WHOLE_CLUSTER

mod boundaries;
mod control_plane;
pub(crate) mod deploy;
mod metrics_auth;
mod node_loss;
mod real_node;
mod real_workers;
mod second_release;
pub(crate) mod worker_lease_policy;
