//! The worker side of swarm-operator's acknowledged handoff (`rollout.policy: Acknowledge`).
//!
//! An application implements [`Jobs`] (start and stop one job) and hands it to
//! [`Worker::run`]; the library reads the pod's entry of the pool's ConfigMap through the API,
//! stops and starts jobs as each new config version asks, acknowledges the version on the
//! pod's Lease, fences itself (stops every job) when its Lease has not been renewed in time, and
//! handles SIGTERM as the protocol says.
//!
//! - [`handoff`]: the protocol's rules, with no I/O (what to stop and start, when to
//!   acknowledge, how to terminate).
//! - [`fence`]: when to stop every job because the Lease may look expired, and when to run
//!   again (pure).
//! - [`lease`]: the Lease to write (pure) and the task that keeps it renewed.
//! - [`source`]: the ConfigMap GET and WATCH.
//! - [`report`]: the optional JSON-lines report of what runs.
//! - [`settings`]: who the worker is, from the pod's environment.

// Every function fits on a screen (the threshold is in clippy.toml).
#![warn(clippy::too_many_lines)]

pub mod fence;
pub mod handoff;
pub mod lease;
pub mod permit;
pub mod report;
pub mod settings;
pub mod source;
mod worker;

pub use handoff::{Change, Handoff};
pub use permit::Permit;
pub use settings::Settings;
pub use worker::{Exit, Jobs, Worker, WorkerBuilder};

/// Why a worker cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting has no value in the environment or the builder.
    #[error("{name} is not set: pass it through the pod's environment or the worker builder")]
    MissingSetting {
        /// The environment variable.
        name: &'static str,
    },
    /// A setting's environment variable does not hold what it must.
    #[error("{name} is {value:?}: {expected}")]
    InvalidSetting {
        /// The environment variable.
        name: &'static str,
        /// What it holds.
        value: String,
        /// What it must hold.
        expected: &'static str,
    },
    /// No Kubernetes client configuration was found.
    #[error("cannot configure a Kubernetes client (in-cluster or kubeconfig): {0}")]
    Client(#[source] kube::Error),
    /// The signal handler could not be installed.
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
}
