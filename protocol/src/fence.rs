//! The self-fencing arithmetic every worker shares: how long after its last successful Lease
//! write a worker may still run jobs. The operator hands a worker's jobs away once its Lease has
//! gone unrenewed for `leaseDurationSeconds` plus the pool's grace on the operator's clock; the
//! worker stops them `margin` earlier on its own, counted from when it *sent* the write.

use std::time::Duration;

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
