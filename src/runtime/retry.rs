//! Retry delays after consecutive failures, for the caches' watches and the leader election
//! alike.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// First retry delay after a failure.
pub const MIN_DELAY: Duration = Duration::from_millis(200);
/// Longest retry delay (before jitter, which adds up to as much again).
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// The retry delays after consecutive failures: 200 ms doubling to 2 s, each plus a random
/// jitter of up to its own length, so replicas and caches do not retry in lockstep.
pub fn backoff() -> impl Iterator<Item = Duration> + Send {
    ExponentialBuilder::default()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_small_and_stays_within_a_few_seconds() {
        let delays: Vec<Duration> = backoff().take(20).collect();
        assert!(delays[0] <= MIN_DELAY * 2, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= MAX_DELAY * 2), "{delays:?}");
        assert!(delays[19] >= MAX_DELAY, "grows to the cap: {delays:?}");
    }
}
