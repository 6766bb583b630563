//! Spacing the retries of requests that failed, so that thousands of workers that lost the API
//! server at once, or that an overloaded one turned away, come back spread out instead of all
//! every second.

use std::time::Duration;

/// The delays between failed attempts: 1 s doubling up to a ceiling, each drawn at random from
/// its upper half.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    failures: u32,
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);

    /// The wait before the next attempt, at most `ceiling`.
    pub(crate) fn next_delay(&mut self, ceiling: Duration) -> Duration {
        let doubled = Self::FIRST.saturating_mul(1 << self.failures.min(16));
        self.failures = self.failures.saturating_add(1);
        let delay = doubled.min(ceiling);
        delay / 2 + delay.mul_f64(jitter() / 2.0)
    }
}

/// A number in [0, 1) that differs between workers and between calls (no cryptography
/// needed: only a spread).
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    let bits = RandomState::new().hash_one(std::time::SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_to_the_ceiling_with_jitter() {
        let ceiling = Duration::from_secs(10);
        let mut retry = Retry::default();
        let delays: Vec<Duration> = (0..8).map(|_| retry.next_delay(ceiling)).collect();
        for (delay, upper) in delays.iter().zip([1, 2, 4, 8, 10, 10, 10, 10]) {
            let upper = Duration::from_secs(upper);
            assert!(
                *delay >= upper / 2 && *delay <= upper,
                "{delay:?} not in {:?}..={upper:?}: {delays:?}",
                upper / 2
            );
        }
        let spread: std::collections::BTreeSet<_> = (0..20)
            .map(|_| Retry::default().next_delay(ceiling))
            .collect();
        assert!(spread.len() > 1, "no jitter: {spread:?}");
    }

    #[test]
    fn a_short_ceiling_holds_every_delay() {
        let mut retry = Retry::default();
        for _ in 0..5 {
            assert!(retry.next_delay(Duration::from_millis(500)) <= Duration::from_millis(500));
        }
    }

    #[test]
    fn jitter_is_within_the_unit_interval() {
        assert!((0..100).map(|_| jitter()).all(|x| (0.0..1.0).contains(&x)));
    }
}
