//! The fence arithmetic every worker and the operator share: how long a read of its own
//! ConfigMap lets a worker run the jobs it showed, how often it reads, when it stops answering
//! ready, and how long the operator waits before it grants a job revoked from a worker that has
//! not acknowledged the revoke.
//!
//! A worker runs a job only while a quorum GET of its own ConfigMap (no `resourceVersion`),
//! *sent* less than the permit `F` ago on its monotonic clock, showed the job in its entry. The
//! operator grants a job it revoked from a worker that has not acknowledged the revoke only once
//! [`revoke_wait`] has passed on its own clock since the revoking write was answered: every read
//! sent after that answer shows the revoke, and every read sent before it lapsed meanwhile, with
//! both clocks' rates within [`CLOCK_RATE_BOUND`] of real time. Nothing is written to stay a
//! member: the kubelet's readiness probe, which [`ready_within`] answers, proves the worker live.

use std::time::Duration;

/// The permit a worker takes unless told otherwise (`SWARM_PERMIT_SECONDS`): 30 s.
pub const DEFAULT_PERMIT: Duration = Duration::from_secs(30);

/// The shortest permit a worker accepts: reads every second, readiness within 1.2 s.
pub const MIN_PERMIT: Duration = Duration::from_secs(2);

/// How far any clock's rate may stray from real time, the operator's and the workers': 2 %,
/// thousands of times what an NTP-disciplined clock drifts (at most 500 ppm).
pub const CLOCK_RATE_BOUND: f64 = 0.02;

/// How often a worker reads its ConfigMap to renew its permit when nothing fails: every half
/// of it, so a read that fails leaves half the permit to retry in (every 15 s by default).
pub fn read_interval(permit: Duration) -> Duration {
    permit / 2
}

/// How long a worker waits for the answer to a fence read before it gives the read up: the
/// permit, after which its answer could renew nothing. A read is never abandoned sooner: each
/// worker has one read in flight and sends the next only once it has ended, so an API server
/// slow to answer gets fewer reads, never more (no retry, no new connection, while one may still
/// serve), and a closed connection is not replaced in a burst of TLS handshakes.
pub fn read_timeout(permit: Duration) -> Duration {
    permit
}

/// How long after the send of its last successful read a worker answers ready: three fifths of
/// the permit (18 s by default), so one read may be late by a fifth of the permit before the
/// kubelet marks the pod NotReady.
pub fn ready_within(permit: Duration) -> Duration {
    permit * 3 / 5
}

/// The longest wait between retries of a failed read: an eighth of the permit (3.75 s by
/// default), so a worker cut off tries four times or more before its permit lapses.
pub fn retry_cap(permit: Duration) -> Duration {
    permit / 8
}

/// The wait before the retry that follows `failures` failed reads in a row (1 or more): 1 s,
/// doubling, held to [`retry_cap`].
pub fn retry_delay(failures: u32, permit: Duration) -> Duration {
    let doubled =
        Duration::from_secs(1).saturating_mul(1 << failures.clamp(1, 16).saturating_sub(1));
    doubled.min(retry_cap(permit))
}

/// The wait before the next read after the API server shed one (429 Too Many Requests: API
/// Priority and Fairness rejecting what it cannot queue): a quarter of the permit plus `draw`
/// (in [0, 1)) times another quarter, 7.5 s to 15 s by default. A shed read is not a fault to
/// retry quickly: thousands of workers retrying every [`retry_cap`] would send the overloaded
/// server several times their resting rate and keep it overloaded, while this keeps them within
/// a third of it above, spread at random, and still leaves one more read before the permit lapses.
pub fn shed_retry_delay(permit: Duration, draw: f64) -> Duration {
    permit / 4 + (permit / 4).mul_f64(draw.clamp(0.0, 1.0))
}

/// How long the operator waits, on its own clock, from the answer to a write that revoked jobs
/// from a worker with permit `permit` until it may grant them elsewhere without an
/// acknowledgement: `permit * (1 + ρ) / (1 - ρ) + grace`. A permit measured from a send before
/// that answer lapses at most `permit / (1 - ρ)` of real time after it; the operator's clock
/// shows at most `(1 + ρ)` times the real time elapsed; `grace` covers the time to stop.
pub fn revoke_wait(permit: Duration, grace: Duration) -> Duration {
    permit.mul_f64((1.0 + CLOCK_RATE_BOUND) / (1.0 - CLOCK_RATE_BOUND)) + grace
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults() {
        assert_eq!(read_interval(DEFAULT_PERMIT), Duration::from_secs(15));
        assert_eq!(ready_within(DEFAULT_PERMIT), Duration::from_secs(18));
        assert_eq!(read_timeout(DEFAULT_PERMIT), Duration::from_secs(30));
        assert_eq!(retry_cap(DEFAULT_PERMIT), Duration::from_millis(3750));
        assert_eq!(
            shed_retry_delay(DEFAULT_PERMIT, 0.0),
            Duration::from_millis(7500)
        );
        assert_eq!(
            shed_retry_delay(DEFAULT_PERMIT, 1.0),
            Duration::from_secs(15)
        );
        let wait = revoke_wait(DEFAULT_PERMIT, Duration::from_secs(2));
        assert!(wait > Duration::from_millis(33_220) && wait < Duration::from_millis(33_230));
    }

    #[test]
    fn retries_double_from_a_second_up_to_an_eighth_of_the_permit() {
        let delays: Vec<_> = (1..=5).map(|n| retry_delay(n, DEFAULT_PERMIT)).collect();
        let expect = [1000, 2000, 3750, 3750, 3750].map(Duration::from_millis);
        assert_eq!(delays, expect);
        assert_eq!(retry_delay(40, DEFAULT_PERMIT), Duration::from_millis(3750));
    }

    #[test]
    fn the_wait_outlasts_every_permit_from_a_send_before_the_revoke() {
        // Worst case: the worker's clock slow, the operator's fast.
        for permit in [MIN_PERMIT, DEFAULT_PERMIT, Duration::from_secs(300)] {
            let worker_real = permit.as_secs_f64() / (1.0 - CLOCK_RATE_BOUND);
            let operator_real =
                revoke_wait(permit, Duration::ZERO).as_secs_f64() / (1.0 + CLOCK_RATE_BOUND);
            assert!(operator_real >= worker_real - 1e-9, "{permit:?}");
        }
    }
}
