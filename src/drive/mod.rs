//! The round protocol of one reconcile, written once: plan, carry out the step the planner
//! asks for, plan again on what that step changed, until the planner is done; then delete the
//! pods it names and hand back its outcome (status and events) for the caller to report.
//!
//! ```text
//!  cached snapshot ──▶ planner::next_step ──▶ Write(cm)      ──▶ fenced write ──┐ conflict: read
//!        ▲                                  ├▶ ListLive(names) ──▶ list pods ────┤ the ConfigMap
//!        └───────── plan again on the fresher state ─────────────────────────────┘
//!                                           └▶ Done(outcome) ──▶ delete pods (uid precondition)
//!                                                                 ──▶ caller reports status
//! ```
//!
//! The controller runs it against the API server ([`crate::controller`]); the what-if
//! commands and the tests run it against [`memory::MemoryCluster`]. Either way the same
//! planner decides and the same loop orders the actions.

pub mod memory;
pub mod whatif;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::future::Future;

use k8s_openapi::api::core::v1::ConfigMap;

use crate::planner::rollout::PodDelete;
use crate::planner::{self, Observed, Outcome, PlannedEvent, Step};
use crate::state::cached::CachedPod;
use crate::state::lease::Acks;
use crate::state::revokes::RevokeWaits;
use crate::state::slice_summary::SliceSummary;
use crate::state::worker_slices::SliceWrites;

/// Planning rounds in one reconcile: confirm holders gone live, write the grant, list live,
/// resolve, write, plan deletes (and a spare).
pub const MAX_ROUNDS: usize = 8;

/// What a reconcile can do to the cluster, and nothing more.
pub trait Cluster {
    /// Why an action failed; an unsettled plan is one of them.
    type Error: From<Unsettled>;

    /// The time the planner decides at.
    fn now(&self) -> k8s_openapi::jiff::Timestamp;

    /// Whether the pool still exists as the same, undeleted object, as the API server has it:
    /// asked once, before the first write or delete of a reconcile.
    fn pool_is_live(&mut self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Writes `desired` over `current`, the copy it was planned on: a write planned on a copy
    /// that is no longer current is refused with [`Written::Conflict`].
    fn write(
        &mut self,
        current: Option<&ConfigMap>,
        desired: ConfigMap,
    ) -> impl Future<Output = Result<Written, Self::Error>> + Send;

    /// The ConfigMap as the API server has it now.
    fn read(&mut self) -> impl Future<Output = Result<Option<ConfigMap>, Self::Error>> + Send;

    /// The pods named in `names` that exist, listed from the API server.
    fn list_live(
        &mut self,
        names: &BTreeSet<String>,
    ) -> impl Future<Output = Result<Vec<CachedPod>, Self::Error>> + Send;

    /// Notes on this cluster's monotonic clock that the workers' ConfigMaps `slices` (as
    /// written, read or cached) show what they show, and returns since when each has shown
    /// each version: where each revoke wait starts (see [`crate::state::revokes`]).
    fn revoke_waits<'s>(&mut self, slices: impl Iterator<Item = &'s SliceSummary>) -> RevokeWaits;

    /// The workers' acknowledgements as known now (`None`: those of the snapshot). A round
    /// that follows minutes of writes must see the acknowledgements that came meanwhile, or
    /// it would count their workers as silent and time them out.
    fn acks(&mut self) -> Option<Acks>;

    /// The workers' own ConfigMaps labelled with the pool, listed from the API server.
    fn list_slices(
        &mut self,
    ) -> impl Future<Output = Result<Vec<SliceSummary>, Self::Error>> + Send;

    /// Writes (or deletes) workers' own ConfigMaps, each fenced like [`Cluster::write`] by the
    /// copy it was planned on; they may go out at once, in any order.
    fn write_slices(
        &mut self,
        batch: Vec<SliceWrite>,
    ) -> impl Future<Output = Result<Vec<SliceWritten>, Self::Error>> + Send;

    /// Deletes the pod if it still has the given uid.
    fn delete(
        &mut self,
        pod: &PodDelete,
    ) -> impl Future<Output = Result<Deleted, Self::Error>> + Send;
}

/// The result of a fenced write.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per round, moved on at once"
)]
pub enum Written {
    /// Written; the ConfigMap as it now is.
    Applied(ConfigMap),
    /// The ConfigMap changed since the copy the write was planned on (or one now exists where
    /// none was seen): nothing was written.
    Conflict,
}

/// One write of a worker's own ConfigMap.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceWrite {
    /// Its name.
    pub name: String,
    /// The resourceVersion of the copy the write was planned on; `None`: there was none, and
    /// it is created.
    pub based_on: Option<String>,
    /// What to apply; `None`: delete it.
    pub desired: Option<ConfigMap>,
}

/// The result of a [`SliceWrite`].
#[derive(Clone, Debug, PartialEq)]
pub enum SliceWritten {
    /// Written; the ConfigMap as it now is (`None`: deleted or already gone).
    Applied(Option<SliceSummary>),
    /// It changed since the copy the write was planned on: nothing was written; it is now this.
    Conflict(Option<SliceSummary>),
}

/// The result of a uid-preconditioned delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The pod instance is being deleted.
    Deleted,
    /// Gone already, or replaced by another instance of the same name: nothing to do.
    AlreadyGone,
}

/// How a reconcile ended.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per round, moved on at once"
)]
pub enum Driven {
    /// The rounds settled and the deletes were sent: the status to report (the outcome's
    /// events are in the journal).
    Done(Outcome),
    /// The pool was deleted (or replaced) since the snapshot: nothing was written.
    PoolGone,
}

/// The planner kept asking for writes or lists: the ConfigMap keeps changing under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the plan did not settle after {rounds} rounds; the ConfigMap keeps changing")]
pub struct Unsettled {
    /// Planning rounds run.
    pub rounds: usize,
}

/// What was done so far, kept when a later action fails: the events of what was done are
/// published either way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Journal {
    /// Events of the writes and deletes that went through, and the outcome's own.
    pub events: Vec<PlannedEvent>,
    /// Seconds each granted job spent in transit, over the writes that went through.
    pub granted_after_seconds: Vec<f64>,
}

/// Runs one reconcile of `cached.pool` against `cluster`. `cached` is the snapshot from the
/// caches: its pods and ConfigMap are where the rounds start (its `pods_are_live` and `now`
/// are replaced in every round).
pub async fn drive<C: Cluster + Send>(
    cluster: &mut C,
    cached: &Observed<'_>,
    journal: &mut Journal,
) -> Result<Driven, C::Error> {
    let mut round = Round {
        config_map: cached.config_map.cloned(),
        slices: cached
            .worker_config_maps
            .iter()
            .map(|&cm| Cow::Borrowed(cm))
            .collect(),
        slices_are_live: false,
        listed_pods: None,
        pods_are_live: false,
        pool_confirmed: false,
        acks: None,
    };
    for rounds in 1..=MAX_ROUNDS {
        let revokes = cluster.revoke_waits(round.slices.iter().map(AsRef::as_ref));
        // The first round plans on the snapshot, taken a moment ago from the same cache.
        if rounds > 1 {
            round.acks = cluster.acks();
        }
        let step = planner::next_step(&round.observe(cached, cluster.now(), &revokes));
        if rounds == MAX_ROUNDS && !matches!(step, Step::Done(_)) {
            return Err(Unsettled { rounds }.into());
        }
        match step {
            Step::Write(write) => {
                if !round.confirm_pool(cluster).await? {
                    return Ok(Driven::PoolGone);
                }
                round.write(cluster, write, journal).await?;
            }
            Step::ListSlices => {
                round.slices = cluster
                    .list_slices()
                    .await?
                    .into_iter()
                    .map(Cow::Owned)
                    .collect();
                round.slices_are_live = true;
            }
            Step::ListLive(names) => {
                round.listed_pods = Some(cluster.list_live(&names).await?);
                round.pods_are_live = true;
            }
            Step::Done(outcome) => {
                if !outcome.deletes.is_empty() && !round.confirm_pool(cluster).await? {
                    return Ok(Driven::PoolGone);
                }
                return finish(cluster, outcome, journal).await.map(Driven::Done);
            }
        }
    }
    unreachable!("the last round returns")
}

/// The state one round plans on, as the earlier rounds left it.
struct Round<'a> {
    /// The ConfigMap as last written or read.
    config_map: Option<ConfigMap>,
    /// The workers' own ConfigMaps as last written or read: the cache's own copies until then
    /// (a pool may have thousands).
    slices: Vec<Cow<'a, SliceSummary>>,
    /// Whether `slices` were listed live (and kept up to date by the writes since).
    slices_are_live: bool,
    /// The pods of the last live list, if there was one: fresher than the cache even once a
    /// write made them unreliable for resolving stale workers.
    listed_pods: Option<Vec<CachedPod>>,
    /// Whether `listed_pods` was listed after the last write that recorded unresolved stale
    /// workers or holders.
    pods_are_live: bool,
    /// Whether the pool was confirmed to exist in this reconcile.
    pool_confirmed: bool,
    /// The acknowledgements as known when this round began, if fresher than the snapshot's.
    acks: Option<Acks>,
}

impl<'a> Round<'a> {
    fn observe<'r>(
        &'r self,
        cached: &Observed<'r>,
        now: k8s_openapi::jiff::Timestamp,
        revokes: &'r RevokeWaits,
    ) -> Observed<'r> {
        Observed {
            pods: match &self.listed_pods {
                Some(listed) => listed.iter().collect(),
                None => cached.pods.clone(),
            },
            pods_are_live: self.pods_are_live,
            config_map: self.config_map.as_ref(),
            worker_config_maps: self.slices.iter().map(AsRef::as_ref).collect(),
            slices_are_live: self.slices_are_live,
            revokes,
            acks: self.acks.as_ref().unwrap_or(cached.acks),
            now,
            ..cached.clone()
        }
    }

    /// One GET before the first write or delete: the caches may show a pool the API server
    /// no longer has, and writing for it would re-create what the garbage collector removes.
    async fn confirm_pool<C: Cluster>(&mut self, cluster: &mut C) -> Result<bool, C::Error> {
        if !self.pool_confirmed {
            self.pool_confirmed = cluster.pool_is_live().await?;
        }
        Ok(self.pool_confirmed)
    }

    async fn write<C: Cluster>(
        &mut self,
        cluster: &mut C,
        write: planner::Write,
        journal: &mut Journal,
    ) -> Result<(), C::Error> {
        if let Some(config_map) = write.config_map {
            let unresolved = crate::state::config_map::records_unresolved(&config_map);
            match cluster.write(self.config_map.as_ref(), config_map).await? {
                Written::Applied(applied) => {
                    self.config_map = Some(applied);
                    self.wrote(unresolved);
                }
                // Planned on a copy that is no longer current: read it and plan again.
                Written::Conflict => {
                    self.config_map = cluster.read().await?;
                    return Ok(());
                }
            }
        }
        journal.events.extend(write.events);
        journal
            .granted_after_seconds
            .extend(write.granted_after_seconds);
        // The index is written; then the slices that lose jobs, and only once every one of
        // them went through, the slices that gain some.
        let SliceWrites {
            first,
            deletes,
            then,
        } = write.slices;
        let first = first
            .into_iter()
            .map(|cm| self.slice_write(Some(cm), None))
            .chain(
                deletes
                    .into_iter()
                    .map(|cm| self.slice_write(None, Some(cm))),
            )
            .collect();
        if self.write_slices(cluster, first).await? {
            let then = then
                .into_iter()
                .map(|cm| self.slice_write(Some(cm), None))
                .collect();
            self.write_slices(cluster, then).await?;
        }
        Ok(())
    }

    /// After a write: pods listed before it cannot tell which instances saw the old content.
    fn wrote(&mut self, unresolved: bool) {
        if unresolved {
            self.pods_are_live = false;
        }
    }

    /// The write of `desired` (or the delete of `gone`), planned on the copy this round holds.
    fn slice_write(&self, desired: Option<ConfigMap>, gone: Option<SliceSummary>) -> SliceWrite {
        let name = desired
            .as_ref()
            .and_then(|cm| cm.metadata.name.as_deref())
            .or(gone.as_ref().and_then(SliceSummary::name))
            .unwrap_or_default()
            .to_owned();
        let based_on = self
            .slices
            .iter()
            .find(|cm| cm.name() == Some(name.as_str()))
            .and_then(|cm| cm.metadata.resource_version.clone());
        SliceWrite {
            name,
            based_on,
            desired,
        }
    }

    /// Sends one batch of slice writes and keeps what they left. Returns false when one was
    /// planned on a copy that is no longer current: plan again on what it is now.
    async fn write_slices<C: Cluster>(
        &mut self,
        cluster: &mut C,
        batch: Vec<SliceWrite>,
    ) -> Result<bool, C::Error> {
        if batch.is_empty() {
            return Ok(true);
        }
        let names: Vec<String> = batch.iter().map(|w| w.name.clone()).collect();
        let results = cluster.write_slices(batch).await?;
        let mut settled = true;
        let mut now_there = Vec::with_capacity(results.len());
        for result in results {
            now_there.push(match result {
                SliceWritten::Applied(now) => now,
                SliceWritten::Conflict(now) => {
                    settled = false;
                    now
                }
            });
        }
        // One pass over the slices, not one per write: a first rollout writes every worker's.
        let written: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.slices
            .retain(|cm| cm.name().is_none_or(|name| !written.contains(name)));
        self.slices
            .extend(now_there.into_iter().flatten().map(Cow::Owned));
        Ok(settled)
    }
}

/// Sends the outcome's deletes, and moves its events to the journal: an event about a pod only
/// once that pod's delete went through.
async fn finish<C: Cluster>(
    cluster: &mut C,
    mut outcome: Outcome,
    journal: &mut Journal,
) -> Result<Outcome, C::Error> {
    let (about_pods, others): (Vec<_>, Vec<_>) = std::mem::take(&mut outcome.events)
        .into_iter()
        .partition(|e| e.related_pod.is_some());
    journal.events.extend(others);
    for delete in &outcome.deletes {
        if cluster.delete(delete).await? == Deleted::Deleted {
            let about_this_pod = |e: &&PlannedEvent| {
                e.related_pod
                    .as_ref()
                    .is_some_and(|(_, uid)| *uid == delete.uid)
            };
            journal
                .events
                .extend(about_pods.iter().filter(about_this_pod).cloned());
        }
    }
    Ok(outcome)
}
