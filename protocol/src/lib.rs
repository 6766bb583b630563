//! The wire contract between swarm-operator and its workers, defined once: the operator, the
//! Rust worker library and `kubectl swarm` import it, and the other workers (Python) are held
//! to it by the test vectors in `protocol/vectors/`, which this crate's tests read too.
//!
//! - [`names`]: every label, annotation and field-manager name;
//! - [`config`]: `config.yml`, the format each worker reads its entry from;
//! - [`slices`]: the per-worker ConfigMaps of `rollout.policy: Acknowledge` and their
//!   `index.yml`;
//! - [`fence`]: how long a worker may run jobs after its last successful Lease write;
//! - [`lease`]: the worker's Lease, which proves its pod instance alive and acknowledges the
//!   version it runs;
//! - [`report`]: the line a worker appends to its report file each time what it runs changes.

pub mod config;
pub mod fence;
pub mod lease;
pub mod names;
pub mod report;
pub mod slices;
