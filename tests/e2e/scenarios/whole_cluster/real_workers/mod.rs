//! The workers in containers on the real node (see [`scenarios::real_workers`]) where a scenario
//! needs the cluster alone: one binds the worker Lease policy, which is cluster-wide; the other
//! stops the node's kubelet, which every pod on the node feels.
//!
//! [`scenarios::real_workers`]: crate::scenarios::real_workers

mod acknowledge;
mod kubelet;
