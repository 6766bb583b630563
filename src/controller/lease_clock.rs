//! When this operator saw each worker Lease renewed, on its own monotonic clock.
//!
//! A worker's Lease is expired once what it says (holder, `renewTime`, acknowledged version)
//! has not changed for `leaseDurationSeconds` plus the pool's `leaseGraceSeconds` of this
//! operator's observation, as client-go's leader election judges a leader's lease: no clock is
//! shared with the workers, only their rates must agree within the grace. An operator that
//! (re)starts has seen nothing yet, so it observes every Lease for a full duration before it
//! calls one expired.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::state::lease::{Acks, Renewal};

/// What one Lease said when last seen, and since when this operator has seen it say that.
#[derive(Debug)]
struct Seen {
    said: Renewal,
    since: Instant,
}

/// The observations of every worker Lease, by namespace, pool and name.
#[derive(Debug, Default)]
pub struct LeaseClock {
    seen: Mutex<HashMap<(String, String, String), Seen>>,
}

impl LeaseClock {
    /// Marks in `acks` the Leases of pool `pool` in `namespace` (all of them `leases`) that
    /// expired by `now`, and notes when the next one will; forgets Leases no longer there.
    pub fn judge<'a>(
        &self,
        namespace: &str,
        pool: &str,
        leases: impl IntoIterator<Item = &'a Lease>,
        grace: Duration,
        now: Instant,
        acks: &mut Acks,
    ) {
        let mut seen = self.seen.lock().expect("lease clock lock poisoned");
        let mut present = BTreeSet::new();
        for lease in leases {
            let name = lease.name_any();
            let duration = lease.spec.as_ref().and_then(|s| s.lease_duration_seconds);
            let (Some(said), Some(duration)) = (Renewal::of(lease), duration) else {
                continue;
            };
            let key = (namespace.to_owned(), pool.to_owned(), name.clone());
            let entry = seen.entry(key).or_insert_with(|| Seen {
                said: said.clone(),
                since: now,
            });
            if entry.said != said {
                *entry = Seen { said, since: now };
            }
            let lasts = Duration::from_secs(u64::try_from(duration).unwrap_or(0)) + grace;
            let left = lasts.saturating_sub(now.duration_since(entry.since));
            if left.is_zero() {
                acks.mark_expired(name.clone(), entry.said.clone());
            } else if let Ok(left) = SignedDuration::try_from(left) {
                acks.note_expiry(Timestamp::now() + left);
            }
            present.insert(name);
        }
        seen.retain(|(ns, p, name), _| ns != namespace || p != pool || present.contains(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("w-0".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("uid-0".into()),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    fn judge(clock: &LeaseClock, lease: &Lease, at: Instant) -> Acks {
        let mut acks = Acks::default();
        clock.judge("ns", "p", [lease], Duration::from_secs(2), at, &mut acks);
        acks
    }

    #[test]
    fn a_lease_expires_after_its_duration_and_grace_without_a_change_on_this_clock() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        // A renewTime long past says nothing: a new operator observes a full duration first.
        let old = lease(1_000);
        assert!(!judge(&clock, &old, t0).is_expired("w-0", "uid-0"));
        assert!(judge(&clock, &old, t0).next_expiry().is_some());
        assert!(!judge(&clock, &old, t0 + Duration::from_secs(11)).is_expired("w-0", "uid-0"));
        assert!(judge(&clock, &old, t0 + Duration::from_secs(12)).is_expired("w-0", "uid-0"));
        // A renewal starts the count again.
        let renewed = lease(1_003);
        let at = t0 + Duration::from_secs(13);
        assert!(!judge(&clock, &renewed, at).is_expired("w-0", "uid-0"));
        assert!(!judge(&clock, &renewed, at + Duration::from_secs(11)).is_expired("w-0", "uid-0"));
        assert!(
            !judge(&clock, &renewed, at + Duration::from_secs(12)).is_expired("w-0", "uid-1"),
            "only the holder's instance is expired"
        );
    }
}
