//! What the soak remembers of the API's history, from its own watches on a connection no
//! fault touches: every config version each pool's ConfigMap went through (a version that goes
//! back is a violation the moment it is seen), and who held the leader Lease when.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::clock::Clock;
use crate::harness::worker_config::WorkerConfig;
use crate::pools::NAMESPACE;
use crate::replicas::{LEASE_NAME, LEASE_NAMESPACE};
use crate::violations::Violations;

#[derive(Default)]
struct Inner {
    /// ConfigMap name -> each config version it went through, in the order seen.
    versions: BTreeMap<String, Vec<Seen>>,
    /// (since, holderIdentity) at each change, in time order: since its acquireTime (the
    /// replica's own clock, the machine's), not since the soak saw it, so a watch that lags
    /// behind a takeover does not shift it.
    holders: Vec<(f64, Option<String>)>,
}

/// One config version, and when it may have been written: a watch delivers a change within
/// moments, but one made while the watch was reconnecting (the API server restarted, etcd
/// compacted) arrives only with the next list, so it was written at some time since the
/// watch last delivered anything.
#[derive(Clone, Copy, Debug)]
struct Seen {
    earliest: f64,
    seen: f64,
    version: u64,
}

/// How late a live watch may deliver a change (the soak shares two cores).
const WATCH_LAG: f64 = 0.25;

#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Inner>>);

impl History {
    /// Starts the watches.
    pub fn start(client: kube::Client, clock: Clock, violations: Violations) -> History {
        let history = History::default();
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
        tokio::spawn(
            history
                .clone()
                .watch_config_maps(config_maps, clock, violations),
        );
        let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
        tokio::spawn(history.clone().watch_lease(leases, clock));
        history
    }

    /// Records every config version the pools' ConfigMaps show, and since when each may have.
    async fn watch_config_maps(
        self,
        config_maps: Api<ConfigMap>,
        clock: Clock,
        violations: Violations,
    ) {
        let mut events = watcher::watcher(config_maps, watcher::Config::default())
            .default_backoff()
            .boxed();
        // When the watch last delivered anything, and, while it re-lists, when it did
        // before the re-list began.
        let mut last_event = clock.now();
        let mut relisting_since: Option<f64> = None;
        while let Some(event) = events.next().await {
            let now = clock.now();
            let (cm, earliest) = match event {
                Ok(Event::Apply(cm)) => (cm, now - WATCH_LAG),
                Ok(Event::InitApply(cm)) => (cm, relisting_since.unwrap_or(last_event)),
                Ok(Event::Init) => {
                    relisting_since = Some(last_event);
                    continue;
                }
                Ok(Event::InitDone) => {
                    relisting_since = None;
                    last_event = now;
                    continue;
                }
                Ok(Event::Delete(_)) => {
                    last_event = now;
                    continue;
                }
                Err(_) => continue,
            };
            last_event = now;
            let Some(version) = config_version(&cm) else {
                continue;
            };
            let name = cm.metadata.name.clone().unwrap_or_default();
            self.saw_version(name, version, earliest, now, &violations);
        }
    }

    /// ConfigMap `name` shows `version` at `now`, written since `earliest`: a version lower
    /// than one seen before is a violation, a new one is recorded.
    fn saw_version(
        &self,
        name: String,
        version: u64,
        earliest: f64,
        now: f64,
        violations: &Violations,
    ) {
        let mut inner = self.lock();
        let seen = inner.versions.entry(name.clone()).or_default();
        if let Some(max) = seen.iter().map(|s| s.version).max()
            && version < max
        {
            violations.add(
                &format!("version-back-{name}-{version}"),
                now,
                format!("ConfigMap {name}: config version went back from {max} to {version}"),
            );
        }
        if seen.last().is_none_or(|last| last.version != version) {
            seen.push(Seen {
                earliest: earliest.min(now),
                seen: now,
                version,
            });
        }
    }

    /// Records who holds the leader Lease, and since when.
    async fn watch_lease(self, leases: Api<Lease>, clock: Clock) {
        let config = watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}"));
        let mut events = watcher::watcher(leases, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let (Ok(Event::Apply(lease)) | Ok(Event::InitApply(lease))) = event else {
                continue;
            };
            let spec = lease.spec.unwrap_or_default();
            // An identity is `<replica>_<suffix drawn at each start>`.
            let holder = spec.holder_identity.map(|identity| {
                identity
                    .rsplit_once('_')
                    .map_or(identity.as_str(), |(replica, _)| replica)
                    .to_owned()
            });
            let since = match (&holder, spec.acquire_time) {
                (Some(_), Some(acquired)) => clock.at_timestamp(acquired.0),
                _ => clock.now(),
            };
            let mut inner = self.lock();
            if inner.holders.last().is_none_or(|(_, h)| *h != holder) {
                // The watch delivers changes in order: a change seen late (a cleared
                // holder, stamped when seen) cannot outlast the acquisition after it.
                for (at, _) in inner.holders.iter_mut().filter(|(at, _)| *at > since) {
                    *at = since;
                }
                inner.holders.push((since, holder));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The config version ConfigMap `name` had at `at`; `None` if unknown, or if a version
    /// change may have happened around then that the watch delivered only later.
    pub fn version_at(&self, name: &str, at: f64) -> Option<u64> {
        let inner = self.lock();
        let versions = inner.versions.get(name)?;
        if versions.iter().any(|s| s.earliest <= at && at < s.seen) {
            return None;
        }
        versions
            .iter()
            .take_while(|s| s.seen <= at)
            .last()
            .map(|s| s.version)
    }

    /// Adds the Lease's holders that the audit log shows: each `(at, replica)` is a write of the
    /// Lease the API server accepted from that replica, so it held the Lease at `at`.
    pub fn record_lease_writes(&self, writes: &[(f64, String)]) {
        let mut inner = self.lock();
        inner.holders.extend(
            writes
                .iter()
                .map(|(at, replica)| (*at, Some(replica.clone()))),
        );
        inner.holders.sort_by(|a, b| a.0.total_cmp(&b.0));
    }

    /// Whether `identity` held the lease at some moment of `from..=to`.
    pub fn held_between(&self, identity: &str, from: f64, to: f64) -> bool {
        let inner = self.lock();
        let before = inner
            .holders
            .iter()
            .take_while(|(t, _)| *t <= from)
            .last()
            .into_iter();
        let during = inner.holders.iter().filter(|(t, _)| *t > from && *t <= to);
        before
            .chain(during)
            .any(|(_, h)| h.as_deref() == Some(identity))
    }

    /// Who the Lease named at `at`, and since when (for the messages).
    pub fn describe_holder_at(&self, at: f64) -> String {
        let inner = self.lock();
        match inner.holders.iter().take_while(|(t, _)| *t <= at).last() {
            Some((since, Some(holder))) => format!("the Lease named {holder} since t={since:.1}s"),
            Some((since, None)) => format!("the Lease named no holder since t={since:.1}s"),
            None => "the Lease was not seen yet".to_owned(),
        }
    }

    /// The current holder, as last seen; if the Lease names none now, the last one it named
    /// (a replica may go on renewing a Lease whose holder a standby has cleared).
    pub fn holder(&self) -> Option<String> {
        self.lock()
            .holders
            .iter()
            .rev()
            .find_map(|(_, h)| h.clone())
    }

    /// How many times the holder changed (to another replica or to none).
    pub fn handovers(&self) -> usize {
        self.lock()
            .holders
            .windows(2)
            .filter(|pair| pair[0].1 != pair[1].1)
            .count()
    }
}

/// `version` of the ConfigMap's `config.yml`.
pub fn config_version(cm: &ConfigMap) -> Option<u64> {
    let text = cm.data.as_ref()?.get("config.yml")?;
    WorkerConfig::parse(text).ok().map(|c| c.version)
}
