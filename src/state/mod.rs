//! The objects as the operator reads and writes them: the ConfigMap's on-cluster format, and
//! the summary of a pod it caches.

pub mod config_map;
pub mod pod_summary;
