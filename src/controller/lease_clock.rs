//! When this operator saw each worker Lease renewed, on its own monotonic clock.
//!
//! A worker's Lease is expired once what it says (holder, `renewTime`, acknowledged version)
//! has not changed for `leaseDurationSeconds` plus the pool's `leaseGraceSeconds` of this
//! operator's observation, as client-go's leader election judges a leader's lease: no clock is
//! shared with the workers, only their rates must agree within the grace. An operator that
//! (re)starts has seen nothing yet, so it observes every Lease for a full duration before it
//! calls one expired. The judgment is [`WorkerLeaseState::of`], at the [`ClockReading`] the
//! caller passes: nothing here reads a clock, so the simulation drives it on its own.
//!
//! Renewals are recorded as the watch delivers them ([`LeaseClock::observe`]), so that a renewal
//! need not wake its pool: with thousands of workers renewing every few seconds, only a new
//! holder, a new acknowledgement or the renewal of an expired Lease does.
//!
//! The clock keeps one small record per Lease (10,000 of them at 100 pools of 100 workers):
//! the Leases of a pool under their pool, and of what a Lease says only the `renewTime` and
//! fingerprints of its holder and acknowledged version. What it said in full is read from the
//! Lease itself whenever it is judged.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::state::lease::{Acks, Renewal};
use crate::state::lease_state::{ObservedLease, Timed, WorkerLeaseState};
use crate::state::lease_summary::LeaseSummary;

/// What a Lease says, as compared between two sightings: its `renewTime`, and fingerprints of
/// its holder and acknowledged version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Said {
    renew_time: Option<Timestamp>,
    holder: u64,
    acked: u64,
}

impl Said {
    /// What `lease` says; `None` without a holder.
    fn of(lease: &LeaseSummary) -> Option<Said> {
        Some(Said {
            renew_time: lease.renew_time,
            holder: fingerprint(lease.holder.as_deref()?),
            acked: lease.acked.as_deref().map_or(0, fingerprint),
        })
    }
}

fn fingerprint(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// What one Lease said when last seen, since when this operator has seen it say that, and
/// whether it was last judged expired.
#[derive(Debug)]
struct Seen {
    said: Said,
    since: Instant,
    expired: bool,
}

impl Seen {
    /// First seen saying `said` at `now`.
    fn new(said: Said, now: Instant) -> Seen {
        Seen {
            said,
            since: now,
            expired: false,
        }
    }
}

/// The Leases of one pool, by name.
type PoolLeases = HashMap<Box<str>, Seen>;

/// The observations of every worker Lease, by namespace, pool and name.
#[derive(Debug, Default)]
pub struct LeaseClock {
    seen: Mutex<HashMap<String, HashMap<String, PoolLeases>>>,
}

/// A worker Lease's namespace and pool (its label).
fn pool_of(lease: &LeaseSummary) -> Option<(&str, &str)> {
    Some((lease.metadata.namespace.as_deref()?, lease.pool.as_deref()?))
}

impl LeaseClock {
    /// Records what `lease` says as the watch delivers it at `now`; returns whether its pool
    /// needs a look: a new Lease, a new holder or acknowledgement, or the renewal of a Lease
    /// last judged expired (its worker is a member again). A renewal alone needs none.
    pub fn observe(&self, lease: &LeaseSummary, now: Instant) -> bool {
        let (Some((namespace, pool)), Some(said), Some(name)) = (
            pool_of(lease),
            Said::of(lease),
            lease.metadata.name.as_deref(),
        ) else {
            return true;
        };
        let mut seen = self.seen.lock().expect("lease clock lock poisoned");
        let leases = pool_leases(&mut seen, namespace, pool);
        let Some(entry) = leases.get_mut(name) else {
            leases.insert(name.into(), Seen::new(said, now));
            return true;
        };
        if entry.said == said {
            return false;
        }
        let wake =
            entry.expired || entry.said.holder != said.holder || entry.said.acked != said.acked;
        *entry = Seen::new(said, now);
        wake
    }

    /// Forgets a deleted Lease.
    pub fn forget(&self, lease: &LeaseSummary) {
        let (Some((namespace, pool)), Some(name)) =
            (pool_of(lease), lease.metadata.name.as_deref())
        else {
            return;
        };
        let mut seen = self.seen.lock().expect("lease clock lock poisoned");
        if let Some(leases) = seen
            .get_mut(namespace)
            .and_then(|pools| pools.get_mut(pool))
        {
            leases.remove(name);
        }
        prune(&mut seen, namespace, pool);
    }

    /// Records in `acks` the Leases of pool `pool` in `namespace` (all of them `leases`) as
    /// timed on this clock, judged at the reading `now`, and when the next one expires unless
    /// renewed; forgets Leases no longer there.
    pub fn judge<'a>(
        &self,
        namespace: &str,
        pool: &str,
        leases: impl IntoIterator<Item = &'a LeaseSummary>,
        grace: Duration,
        now: ClockReading,
        acks: &mut Acks,
    ) {
        let mut seen = self.seen.lock().expect("lease clock lock poisoned");
        let known = pool_leases(&mut seen, namespace, pool);
        let mut present = HashSet::new();
        let mut next_expiry: Option<Duration> = None;
        acks.judged_at(now.monotonic);
        for lease in leases {
            let (Some(name), Some(said), Some(duration), Some(renewal)) = (
                lease.metadata.name.as_deref(),
                Said::of(lease),
                lease.duration_seconds,
                Renewal::of(lease),
            ) else {
                continue;
            };
            // Looked up before inserting: nearly every Lease has its record, and a key costs an
            // allocation.
            if !known.contains_key(name) {
                known.insert(name.into(), Seen::new(said, now.monotonic));
            }
            let entry = known.get_mut(name).expect("inserted above");
            if entry.said != said {
                *entry = Seen::new(said, now.monotonic);
            }
            let timed = Timed {
                unchanged_since: entry.since,
                lasts: Duration::from_secs(u64::try_from(duration).unwrap_or(0)) + grace,
            };
            let observed = ObservedLease {
                timed: Some(timed),
                ..ObservedLease::new(renewal)
            };
            let state = WorkerLeaseState::of(
                Some(&observed),
                &observed.renewal.holder,
                Some(now.monotonic),
            );
            entry.expired = state.is_expired();
            if !entry.expired {
                let left = timed.left(now.monotonic);
                next_expiry = Some(next_expiry.map_or(left, |next| next.min(left)));
            }
            acks.observe(name, observed);
            present.insert(name);
        }
        if let Some(left) = next_expiry.and_then(|left| SignedDuration::try_from(left).ok()) {
            acks.note_expiry(now.wall + left);
        }
        known.retain(|name, _| present.contains(&**name));
        prune(&mut seen, namespace, pool);
    }
}

/// One reading of this operator's clocks, taken by the caller: the judgment reads none.
#[derive(Clone, Copy, Debug)]
pub struct ClockReading {
    /// The monotonic clock, which times the Leases.
    pub monotonic: Instant,
    /// The wall clock, which dates the next expiry for the requeue.
    pub wall: Timestamp,
}

/// Drops the records of `pool` in `namespace` once it has no Lease left (a deleted pool).
fn prune(seen: &mut HashMap<String, HashMap<String, PoolLeases>>, namespace: &str, pool: &str) {
    let Some(pools) = seen.get_mut(namespace) else {
        return;
    };
    if pools.get(pool).is_some_and(HashMap::is_empty) {
        pools.remove(pool);
    }
    if pools.is_empty() {
        seen.remove(namespace);
    }
}

/// The records of the Leases of `pool` in `namespace`, made on first use.
fn pool_leases<'a>(
    seen: &'a mut HashMap<String, HashMap<String, PoolLeases>>,
    namespace: &str,
    pool: &str,
) -> &'a mut PoolLeases {
    if !seen.contains_key(namespace) {
        seen.insert(namespace.to_owned(), HashMap::new());
    }
    let pools = seen.get_mut(namespace).expect("inserted above");
    if !pools.contains_key(pool) {
        pools.insert(pool.to_owned(), PoolLeases::new());
    }
    pools.get_mut(pool).expect("inserted above")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use swarm_protocol::names::POOL_LABEL;

    fn lease(renewed: i64) -> LeaseSummary {
        LeaseSummary::from(&Lease {
            metadata: ObjectMeta {
                name: Some("w-0".into()),
                namespace: Some("ns".into()),
                labels: Some([(POOL_LABEL.to_owned(), "p".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("uid-0".into()),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                ..LeaseSpec::default()
            }),
        })
    }

    fn reading(monotonic: Instant) -> ClockReading {
        ClockReading {
            monotonic,
            wall: Timestamp::from_second(5_000).unwrap(),
        }
    }

    fn judge(clock: &LeaseClock, lease: &LeaseSummary, at: Instant) -> Acks {
        let mut acks = Acks::default();
        clock.judge(
            "ns",
            "p",
            [lease],
            Duration::from_secs(2),
            reading(at),
            &mut acks,
        );
        acks
    }

    fn expired(acks: &Acks, uid: &str) -> bool {
        acks.state("w-0", uid).is_expired()
    }

    #[test]
    fn a_lease_expires_after_its_duration_and_grace_without_a_change_on_this_clock() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        // A renewTime long past says nothing: a new operator observes a full duration first.
        let old = lease(1_000);
        assert!(!expired(&judge(&clock, &old, t0), "uid-0"));
        assert_eq!(
            judge(&clock, &old, t0).next_expiry(),
            Some(Timestamp::from_second(5_012).unwrap()),
            "dated on the wall clock read"
        );
        assert!(!expired(
            &judge(&clock, &old, t0 + Duration::from_secs(11)),
            "uid-0"
        ));
        assert!(expired(
            &judge(&clock, &old, t0 + Duration::from_secs(12)),
            "uid-0"
        ));
        // A renewal starts the count again.
        let renewed = lease(1_003);
        let at = t0 + Duration::from_secs(13);
        assert!(!expired(&judge(&clock, &renewed, at), "uid-0"));
        assert!(!expired(
            &judge(&clock, &renewed, at + Duration::from_secs(11)),
            "uid-0"
        ));
        assert!(
            !expired(
                &judge(&clock, &renewed, at + Duration::from_secs(12)),
                "uid-1"
            ),
            "only the holder's instance is expired"
        );
    }

    #[test]
    fn a_renewal_alone_wakes_no_pool_but_is_timed_from_its_delivery() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        let expired =
            |lease: &LeaseSummary, at: Instant| expired(&judge(&clock, lease, at), "uid-0");
        assert!(clock.observe(&lease(1_000), t0), "a new Lease");
        let at = t0 + Duration::from_secs(3);
        assert!(!clock.observe(&lease(1_003), at));
        // Timed from the delivery at 3 s, though nothing judged it then.
        assert!(!expired(&lease(1_003), at + Duration::from_secs(11)));
        assert!(expired(&lease(1_003), at + Duration::from_secs(12)));

        // Judged expired, its next renewal wakes the pool: the worker is a member again.
        assert!(clock.observe(&lease(1_020), at + Duration::from_secs(13)));
        assert!(!clock.observe(&lease(1_022), at + Duration::from_secs(15)));

        let mut acked = lease(1_024);
        acked.acked = Some("4".to_owned());
        assert!(
            clock.observe(&acked, at + Duration::from_secs(17)),
            "a new acknowledgement"
        );
        let mut taken_over = acked.clone();
        taken_over.holder = Some("uid-1".into());
        assert!(
            clock.observe(&taken_over, at + Duration::from_secs(18)),
            "a new holder"
        );

        clock.forget(&taken_over);
        assert!(
            clock.observe(&taken_over, at + Duration::from_secs(19)),
            "new again"
        );
    }

    #[test]
    fn a_pool_without_leases_leaves_no_record() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        judge(&clock, &lease(1_000), t0);
        assert_eq!(clock.seen.lock().unwrap()["ns"]["p"].len(), 1);
        let mut acks = Acks::default();
        clock.judge(
            "ns",
            "p",
            [],
            Duration::from_secs(2),
            reading(t0),
            &mut acks,
        );
        assert!(
            clock.seen.lock().unwrap().is_empty(),
            "the pool was deleted"
        );

        assert!(clock.observe(&lease(1_001), t0));
        clock.forget(&lease(1_001));
        assert!(
            clock.seen.lock().unwrap().is_empty(),
            "its last Lease was deleted"
        );
    }
}
