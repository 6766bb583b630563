//! A worker Lease's state (`rollout.policy: Acknowledge`): one enum, computed by one pure
//! function ([`WorkerLeaseState::of`]) of what this operator observed of the Lease and of the
//! clock reading it was judged at. Nothing here reads a clock: the caller passes its readings,
//! so the controller and the deterministic simulation judge by the same code.
//!
//! A Lease is expired once what it says has not changed for its duration plus the pool's grace
//! on this operator's monotonic clock (see `controller::lease_clock`). A lagging Lease cache can
//! miss renewals, never invent them: an expiry counts only once a live read shows the same
//! renewal, and frees the jobs a config write revoked only if that read came after the write.

use std::time::{Duration, Instant};

use crate::state::lease::Renewal;

/// What one worker Lease means for one pod instance, from the first state the handoff may act
/// on to the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerLeaseState {
    /// No Lease held by this instance: it acknowledged nothing, and no expiry is known.
    Unheld,
    /// Renewed within its duration and grace (or a live read showed it renewed since the cache
    /// judged it expired): a member, running the version `acked` if any.
    Live {
        /// The config version the instance acknowledged.
        acked: Option<u64>,
    },
    /// Expired as the cache saw it; no live read confirmed it yet, so it frees nothing.
    ExpiredUnconfirmed {
        /// The config version the instance acknowledged.
        acked: Option<u64>,
    },
    /// Expired, confirmed by a live read made before the last config write: not a member, but
    /// the jobs that write revoked from it may not run elsewhere yet.
    ExpiredConfirmedBeforeWrite {
        /// The config version the instance acknowledged.
        acked: Option<u64>,
    },
    /// Expired, confirmed by a live read made after the last config write: the instance fenced
    /// itself, and should it renew it reads the config again before it runs anything.
    ExpiredConfirmed {
        /// The config version the instance acknowledged.
        acked: Option<u64>,
    },
}

/// How long a Lease has said the same, on this operator's monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timed {
    /// When this operator first saw the Lease say what it says now.
    pub unchanged_since: Instant,
    /// Its `leaseDurationSeconds` plus the pool's `leaseGraceSeconds`.
    pub lasts: Duration,
}

impl Timed {
    /// What is left at `now` before the Lease expires unless renewed; zero once it has.
    pub fn left(&self, now: Instant) -> Duration {
        self.lasts
            .saturating_sub(now.saturating_duration_since(self.unchanged_since))
    }
}

/// What a live read of the pool's Leases showed of a Lease judged expired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LiveRead {
    /// No live read since it was judged.
    #[default]
    None,
    /// It said something else: renewed after the cache last saw it.
    Renewed,
    /// The same renewal, read before the last config write.
    UnchangedBeforeWrite,
    /// The same renewal, read after the last config write.
    UnchangedSinceWrite,
}

/// One worker Lease as this operator observed it: what it said, how long it has said it, and
/// what a live read showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedLease {
    /// What it said when last seen.
    pub renewal: Renewal,
    /// The acknowledged version in `renewal`, if readable.
    pub acked: Option<u64>,
    /// Its timing; `None` if this operator did not time it (nothing then expires).
    pub timed: Option<Timed>,
    /// What a live read showed since it was judged.
    pub live: LiveRead,
}

impl ObservedLease {
    /// A Lease seen saying `renewal`, not timed and not read live.
    pub fn new(renewal: Renewal) -> Self {
        let acked = renewal.acked.as_deref().and_then(|v| v.trim().parse().ok());
        Self {
            renewal,
            acked,
            timed: None,
            live: LiveRead::None,
        }
    }
}

impl WorkerLeaseState {
    /// The state of `lease` for the pod instance `instance`, judged at `now` on the clock that
    /// timed it (`None`: never judged, so nothing is expired). Pure: no clock is read.
    pub fn of(lease: Option<&ObservedLease>, instance: &str, now: Option<Instant>) -> Self {
        let Some(lease) = lease.filter(|l| !instance.is_empty() && l.renewal.holder == instance)
        else {
            return Self::Unheld;
        };
        let acked = lease.acked;
        let expired = match (lease.timed, now) {
            (Some(timed), Some(now)) => timed.left(now).is_zero(),
            _ => false,
        };
        if !expired {
            return Self::Live { acked };
        }
        match lease.live {
            LiveRead::None => Self::ExpiredUnconfirmed { acked },
            LiveRead::Renewed => Self::Live { acked },
            LiveRead::UnchangedBeforeWrite => Self::ExpiredConfirmedBeforeWrite { acked },
            LiveRead::UnchangedSinceWrite => Self::ExpiredConfirmed { acked },
        }
    }

    /// The config version the instance acknowledged, whether or not its Lease expired.
    pub fn acked(self) -> Option<u64> {
        match self {
            Self::Unheld => None,
            Self::Live { acked }
            | Self::ExpiredUnconfirmed { acked }
            | Self::ExpiredConfirmedBeforeWrite { acked }
            | Self::ExpiredConfirmed { acked } => acked,
        }
    }

    /// Whether the instance acknowledged `version` or a later one.
    pub fn covers(self, version: u64) -> bool {
        self.acked().is_some_and(|v| v >= version)
    }

    /// Whether the Lease was judged expired, confirmed or not.
    pub fn is_expired(self) -> bool {
        !matches!(self, Self::Unheld | Self::Live { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    const LASTS: Duration = Duration::from_secs(12);

    /// The Lease's holder, acknowledged version, timing start and live read; the instance
    /// asked about and the reading; the state.
    type Row<'a> = (
        &'a str,
        Option<&'a str>,
        Option<Instant>,
        LiveRead,
        &'a str,
        Option<Instant>,
        WorkerLeaseState,
    );

    fn observed(
        holder: &str,
        acked: Option<&str>,
        timed: Option<Instant>,
        live: LiveRead,
    ) -> ObservedLease {
        ObservedLease {
            live,
            timed: timed.map(|unchanged_since| Timed {
                unchanged_since,
                lasts: LASTS,
            }),
            ..ObservedLease::new(Renewal {
                holder: holder.to_owned(),
                renew_time: Some(Timestamp::from_second(1_000).unwrap()),
                acked: acked.map(str::to_owned),
            })
        }
    }

    #[test]
    fn every_state_and_its_boundaries() {
        use LiveRead::{None as NotRead, Renewed, UnchangedBeforeWrite, UnchangedSinceWrite};
        use WorkerLeaseState::*;
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let at_expiry = t0 + LASTS;
        let just_before = at_expiry - ms(1);
        #[rustfmt::skip]
        let table: [Row; 17] = [
            // No Lease for this instance.
            ("uid-0", Some("3"), Some(t0), NotRead, "uid-1", Some(at_expiry), Unheld),
            ("uid-0", Some("3"), Some(t0), NotRead, "", Some(t0), Unheld),
            ("", Some("3"), Some(t0), NotRead, "", Some(t0), Unheld),
            // Renewed within its duration and grace.
            ("uid-0", Some("3"), Some(t0), NotRead, "uid-0", Some(t0), Live { acked: Some(3) }),
            ("uid-0", None, Some(t0), NotRead, "uid-0", Some(just_before), Live { acked: None }),
            ("uid-0", Some("x"), Some(t0), NotRead, "uid-0", Some(just_before), Live { acked: None }),
            ("uid-0", Some(" 4 "), Some(t0), UnchangedSinceWrite, "uid-0", Some(just_before), Live { acked: Some(4) }),
            // A reading before the record (another clock's instant) is no time elapsed.
            ("uid-0", Some("3"), Some(at_expiry), NotRead, "uid-0", Some(t0), Live { acked: Some(3) }),
            // Never timed, or never judged: nothing expires.
            ("uid-0", Some("3"), None, NotRead, "uid-0", Some(at_expiry + LASTS), Live { acked: Some(3) }),
            ("uid-0", Some("3"), Some(t0), UnchangedSinceWrite, "uid-0", None, Live { acked: Some(3) }),
            // Exactly at duration plus grace, and after.
            ("uid-0", Some("3"), Some(t0), NotRead, "uid-0", Some(at_expiry), ExpiredUnconfirmed { acked: Some(3) }),
            ("uid-0", None, Some(t0), NotRead, "uid-0", Some(at_expiry + ms(1)), ExpiredUnconfirmed { acked: None }),
            // What a live read showed.
            ("uid-0", Some("3"), Some(t0), Renewed, "uid-0", Some(at_expiry), Live { acked: Some(3) }),
            ("uid-0", Some("3"), Some(t0), UnchangedBeforeWrite, "uid-0", Some(at_expiry), ExpiredConfirmedBeforeWrite { acked: Some(3) }),
            ("uid-0", Some("3"), Some(t0), UnchangedSinceWrite, "uid-0", Some(at_expiry), ExpiredConfirmed { acked: Some(3) }),
            ("uid-0", None, Some(t0), UnchangedSinceWrite, "uid-0", Some(at_expiry + LASTS), ExpiredConfirmed { acked: None }),
            // Another instance of the same pod learns nothing from a confirmed expiry.
            ("uid-0", Some("3"), Some(t0), UnchangedSinceWrite, "uid-1", Some(at_expiry), Unheld),
        ];
        for (row, (holder, acked, timed, live, instance, now, want)) in
            table.into_iter().enumerate()
        {
            let lease = observed(holder, acked, timed, live);
            assert_eq!(
                WorkerLeaseState::of(Some(&lease), instance, now),
                want,
                "row {row}"
            );
        }
        assert_eq!(WorkerLeaseState::of(None, "uid-0", Some(t0)), Unheld);
    }

    #[test]
    fn what_a_state_says_of_acknowledgement_and_expiry() {
        use WorkerLeaseState::*;
        let acked = Some(5);
        let states = [
            (Unheld, false, false),
            (Live { acked }, true, false),
            (ExpiredUnconfirmed { acked }, true, true),
            (ExpiredConfirmedBeforeWrite { acked }, true, true),
            (ExpiredConfirmed { acked }, true, true),
        ];
        for (state, covers, expired) in states {
            assert_eq!(state.covers(5), covers, "{state:?}");
            assert_eq!(state.covers(4), covers, "{state:?}: a later version covers");
            assert!(!state.covers(6), "{state:?}");
            assert_eq!(state.is_expired(), expired, "{state:?}");
        }
        let timed = Timed {
            unchanged_since: Instant::now(),
            lasts: LASTS,
        };
        assert_eq!(timed.left(timed.unchanged_since), LASTS);
        assert_eq!(timed.left(timed.unchanged_since + LASTS), Duration::ZERO);
        assert_eq!(
            timed.left(timed.unchanged_since + 2 * LASTS),
            Duration::ZERO
        );
    }
}
