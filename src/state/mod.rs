//! The objects as the operator reads and writes them: the ConfigMap's on-cluster format (its
//! `config.yml` and the rollout records in its annotations), the ConfigMaps a pool reads jobs
//! from, the summaries of a worker Lease, a worker's ConfigMap and a pod it caches, and what
//! the caches trim from each object they keep.

pub mod cached;
pub mod config_map;
pub mod jobs_source;
pub mod lease;
pub mod lease_summary;
pub mod node_leases;
mod object_meta;
pub mod pod_summary;
pub mod records;
pub mod revokes;
mod served_as;
pub mod slice_summary;
pub mod trim;
pub mod worker_slices;
