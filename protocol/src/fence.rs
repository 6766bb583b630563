//! The self-fencing arithmetic every worker shares: how long after its last successful Lease
//! write a worker may still run jobs. The operator hands a worker's jobs away once its Lease has
//! gone unrenewed for `leaseDurationSeconds` plus the pool's grace on the operator's clock; the
//! worker stops them `margin` earlier on its own, counted from when it *sent* the write.
//!
//! The defaults are a node's heartbeat: a 40 s Lease renewed every quarter of it, one write per
//! worker per 10 s in steady state, so 10,000 workers cost the control plane what 10,000
//! nodes' Leases do. A worker that stops renewing loses its jobs 40 s + the grace after its last
//! renewal; a pool that must fail over sooner gives its workers a shorter duration (see
//! `docs/worker-protocol.md`), each renewal then costing proportionally more.

use std::time::Duration;

/// The Lease duration a worker writes unless told otherwise (`SWARM_LEASE_DURATION_SECONDS`).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(40);

/// How often a worker renews a Lease of `duration` when nothing changes: a quarter of it, as
/// the kubelet renews its node's Lease, so that a renewal that fails is retried twice more
/// before the fence (at `duration - margin`) stops the worker's jobs. An acknowledgement is
/// written at once, whatever the interval.
pub fn renew_interval(duration: Duration) -> Duration {
    duration / 4
}

/// The least margin: room for stopping jobs and for rate drift between the two clocks.
pub const MIN_MARGIN: Duration = Duration::from_secs(2);

/// The default margin for a Lease duration: `max(2 s, duration / 5)`.
pub fn default_margin(duration: Duration) -> Duration {
    MIN_MARGIN.max(duration / 5)
}

/// How long after its last successful Lease write a worker may run jobs: `duration - margin`,
/// with the margin held to at most half the duration so that a short Lease still leaves time
/// for two renewals.
pub fn limit(duration: Duration, margin: Duration) -> Duration {
    duration - margin.min(duration / 2)
}
