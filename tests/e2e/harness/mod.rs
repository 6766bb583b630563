//! The test environment of one scenario: a cluster, kubectl, the operator process, and the
//! reads the assertions use. A scenario starts only one way, [`scenario!`]:
//!
//! ```ignore
//! scenario!("scale-down").run(async |env| {
//!     env.install_example().await;
//!     // ... act through env.kubectl, assert through env's reads and `observe`
//! })
//! .await;
//! ```
//!
//! See [`Builder`](env::builder::Builder) for the options (speed, the examples' namespace,
//! sim-only, real-cluster only, images) and docs/testing.md.

#[path = "../../common/cargo_env.rs"]
pub mod cargo_env;
pub mod derived_mounts;
pub mod duplicates;
pub mod env;
pub mod helm;
pub mod inspect;
pub mod kubectl;
pub mod manifests;
pub mod observe;
pub mod operator;
pub mod poll;
pub mod ports;
pub mod promtool;
pub mod real_cluster;
pub mod sim_inspect;
pub mod tools;
pub mod worker_config;
pub mod worker_fleet;

use std::path::PathBuf;

pub use env::{Env, SimSpeed};
use kubectl::repo_root;

/// Names a file each scenario appends its timing to (see `Env::finish`).
pub const TIMINGS_ENV: &str = "SWARM_E2E_TIMINGS";

/// Names the operator image (`NAME:TAG`) loaded into the real node of a cluster of
/// `scripts/real-cluster.sh`; `scripts/test.sh` sets it only when such a node holds the image.
pub const OPERATOR_IMAGE_ENV: &str = "SWARM_E2E_OPERATOR_IMAGE";
/// Names the Rust example worker's image, loaded the same way.
pub const WORKER_IMAGE_ENV: &str = "SWARM_E2E_WORKER_IMAGE";
/// Names the Python worker's image, loaded the same way.
pub const PYTHON_WORKER_IMAGE_ENV: &str = "SWARM_E2E_PYTHON_WORKER_IMAGE";
/// Names the Go worker's image, loaded the same way.
pub const GO_WORKER_IMAGE_ENV: &str = "SWARM_E2E_GO_WORKER_IMAGE";

/// Scenario `$name` written in the calling module: `scenario!("name").<options>.run(async |env|
/// { ... }).await`. The module decides whether it takes a real cluster alone (under
/// [`WHOLE_CLUSTER`](env::builder::WHOLE_CLUSTER)); see [`Builder`](env::builder::Builder).
macro_rules! scenario {
    ($name:expr) => {
        $crate::harness::Env::builder($name, module_path!())
    };
}
pub(crate) use scenario;

/// The repository's manifests directory `dir` (e.g. `deploy`), absolute.
pub fn repo_path(dir: &str) -> PathBuf {
    repo_root().join(dir)
}
