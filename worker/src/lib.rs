//! The worker side of swarm-operator's acknowledged handoff (`rollout.policy: Acknowledge`).
//!
//! An application implements [`Jobs`] (start and stop one job) and hands it to
//! [`Worker::run`]; the library reads the pod's own ConfigMap with fence reads (quorum GETs),
//! runs exactly the jobs of the last read while its permit holds, stops them when it lapses,
//! acknowledges each version on the pod's Lease (its only Lease writes besides the one at
//! start), serves `/readyz` for the kubelet, and handles SIGTERM as the protocol says.
//!
//! - [`fence`]: the protocol's state machine, with no I/O: what runs until when, readiness,
//!   when to read, what to stop, start and acknowledge, driven by explicit instants.
//! - [`handoff`]: the rules of that machine that need no clock (the job set, acknowledgements).
//! - [`lease`]: the Lease writer.
//! - [`source`]: the fence read and the WATCH that only hurries it.
//! - `shed`: one backoff for all three of a worker's requests when the API server sheds load.
//! - [`health`]: `/readyz` and `/healthz`.
//! - [`permit`]: the deadline each job checks before each unit of work.
//! - [`report`]: the optional JSON-lines report of what runs.
//! - [`settings`]: who the worker is, from the pod's environment.

mod backoff;
pub mod fence;
pub mod handoff;
pub mod health;
pub mod lease;
pub mod permit;
pub mod report;
pub mod settings;
mod shed;
pub mod source;
mod worker;

pub use fence::{Action, Fence};
pub use handoff::{Entry, Handoff};
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
    /// A setting of the Lease-renewing protocol is set: this worker would not follow it.
    #[error(
        "{name} belongs to the Lease-renewing protocol, which this worker no longer follows: \
         remove it (SWARM_PERMIT_SECONDS sets how long a fence read lets jobs run)"
    )]
    RetiredSetting {
        /// The environment variable.
        name: &'static str,
    },
    /// The readiness endpoint could not be bound.
    #[error("cannot serve readiness on {addr} (SWARM_WORKER_HEALTH_ADDR): {source}")]
    Health {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why it could not be bound.
        #[source]
        source: std::io::Error,
    },
    /// The signal handler could not be installed.
    #[error("cannot install the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
}
