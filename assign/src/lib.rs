//! Pure assignment of a SwarmPool's jobs to the workers of its StatefulSet; the worker config
//! format it reads and writes is the wire contract's (`swarm_protocol::config`).
//!
//! Nothing here talks to Kubernetes or does I/O: the operator fetches the pool, the StatefulSet
//! and the current `config.yml`, calls [`next_config()`], and writes what comes back. The same
//! [`next_config()`] backs `swarm-operator plan`.
//!
//! Three strategies ([`Strategy`]):
//! - `Sticky` (default): every job exactly once, perfect balance, the fewest moves from the
//!   current assignment, and a canonical assignment from scratch.
//! - `Consistent`: jump consistent hash of the job name.
//! - `Contiguous`: jobs in spec order in contiguous chunks.
//!
//! `spec.qos` ([`Qos`], [`assign_with_qos`]) gives dedicated jobs a worker of their own and,
//! under `Sticky`, balances job weights; without it every result is exactly [`assign`]'s.

mod assignment;
mod config_assignment;
mod consistent;
mod contiguous;
mod dedicated;
pub mod hash;
mod jobs;
mod movement;
mod next_config;
mod placement;
pub mod predecessor;
mod qos;
mod roster;
pub mod slots;
mod sticky;
mod strategy;
mod weighted;

pub use assignment::{Assignment, Held, Owners, pod_name};
pub use config_assignment::ConfigAssignment;
pub use jobs::{JobsError, validate_jobs};
pub use movement::Movement;
pub use next_config::{ConfigError, ConfigRequest, NextConfig, Publication, next_config, publish};
pub use placement::{
    Placed, Placement, assign_over_members, assign_with_qos, current_assignment, current_holders,
    place_over_members,
};
pub use qos::{MAX_WEIGHT, Qos, QosError, validate_qos};
pub use roster::Roster;
pub use slots::{Rebound, Slot, SlotTable};
pub use strategy::Strategy;

/// Assigns `jobs` to the ordinals `0..replicas` with `strategy`.
///
/// `current` is the assignment now in the ConfigMap, if any; only `Sticky` uses it. Jobs must be
/// valid ([`validate_jobs`]): non-empty and unique. Within each worker, jobs keep their spec
/// order. With `replicas == 0` the result has no workers and holds no job.
pub fn assign(
    strategy: Strategy,
    jobs: &[String],
    replicas: usize,
    current: Option<&Assignment>,
) -> Assignment {
    owners(strategy, jobs, replicas, current.map(Held::from).as_ref()).assignment(jobs)
}

/// [`assign`] by position, from what the workers hold now.
fn owners(strategy: Strategy, jobs: &[String], replicas: usize, current: Option<&Held>) -> Owners {
    if replicas == 0 {
        return Owners::default();
    }
    let owners = match strategy {
        Strategy::Sticky => sticky::owners(jobs, replicas, current),
        Strategy::Consistent => consistent::owners(jobs, replicas),
        Strategy::Contiguous => contiguous::owners(jobs.len(), replicas),
    };
    Owners::new(owners, replicas)
}
