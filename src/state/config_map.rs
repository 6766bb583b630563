//! The pool's ConfigMap on the cluster: `config.yml` and the `swarm.io/*` annotations, read
//! (what it says now), written (what to write) and the rules on them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use swarm_assign::SlotTable;
use swarm_protocol::config::{CONFIG_KEY, WorkerConfig};
use swarm_protocol::slices::{INDEX_KEY, Index};

use crate::api::crd::SwarmPool;
use crate::api::failure::{Failure, FailureReason};
use crate::state::records::{AwaitingAcks, Holders, PendingRefresh};
use crate::state::slice_summary::SliceSummary;
use crate::state::worker_slices;
use swarm_protocol::names::{
    AWAITING_ACK_ANNOTATION, HANDOFF_ANNOTATION, MANAGED_BY_LABEL, MANAGER,
    PENDING_REFRESH_ANNOTATION, POOL_LABEL, SLOTS_ANNOTATION, VERSION_ANNOTATION,
};

/// The most data the operator writes into one ConfigMap (keys plus values): half of what the
/// API server accepts, so that no write of the operator's is a large object for etcd and the
/// watchers. A pool whose whole config is larger uses the per-worker layout
/// ([`crate::state::worker_slices`]).
pub const CONFIG_MAP_MAX_BYTES: usize = 512 * 1024;
/// The most annotation data an object can hold (keys plus values), as the API server enforces it.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// What the ConfigMap says now.
#[derive(Default)]
pub(crate) struct Previous {
    /// The config, or only its version (from the annotation) when `config.yml` is unreadable.
    pub config: Option<WorkerConfig>,
    /// Why `config.yml` could not be read, if it could not.
    pub error: Option<String>,
    /// The stale-worker records.
    pub pending: PendingRefresh,
    /// The handoff's holders; `None` when the annotation is unreadable.
    pub holders: Option<Holders>,
    /// The workers that owe an acknowledgement; unreadable records count as none.
    pub awaiting: AwaitingAcks,
    /// In the per-worker layout: the index, and the workers whose slice is unsettled.
    pub index: Option<Index>,
    /// Workers whose slice does not show what the index records (see
    /// [`worker_slices::Assembled`]).
    pub unsettled: BTreeSet<String>,
}

impl Previous {
    /// Reads the ConfigMap, if there is one, with the workers' slices when it holds an index.
    pub fn read(cm: Option<&ConfigMap>, slices: &mut worker_slices::Observed) -> Previous {
        let Some(cm) = cm else {
            return Previous {
                holders: Some(Holders::default()),
                ..Previous::default()
            };
        };
        let annotation = |key: &str| cm.annotations().get(key).map(String::as_str);
        let pending =
            PendingRefresh::parse(annotation(PENDING_REFRESH_ANNOTATION)).unwrap_or_default();
        let holders = Holders::parse(annotation(HANDOFF_ANNOTATION)).ok();
        let awaiting = AwaitingAcks::parse(annotation(AWAITING_ACK_ANNOTATION)).unwrap_or_default();
        let mut index = None;
        let mut unsettled = BTreeSet::new();
        let text = cm.data.as_ref().and_then(|d| d.get(CONFIG_KEY));
        let parsed = match (text, worker_slices::index_of(cm)) {
            (None, Some(Ok(read))) => {
                let assembled = worker_slices::assemble(&read, slices);
                unsettled = assembled.unsettled;
                index = Some(read);
                Some(Ok(assembled.config))
            }
            (None, Some(Err(e))) => Some(Err(format!("{INDEX_KEY} is unreadable ({e})"))),
            (text, _) => text.map(|t| {
                WorkerConfig::parse(t).map_err(|e| format!("{CONFIG_KEY} is unreadable ({e})"))
            }),
        };
        let (config, error) = match parsed {
            Some(Ok(config)) => (Some(config), None),
            parsed => {
                let error = match parsed {
                    Some(Err(e)) => Some(e),
                    _ => None,
                };
                // Keep the version moving forward from what the annotation says, with no
                // workloads to stick to.
                let config = annotation_version(cm).map(|v| WorkerConfig::new(v, []));
                (config, error)
            }
        };
        Previous {
            config,
            error,
            pending,
            holders,
            awaiting,
            index,
            unsettled,
        }
    }
}

impl Previous {
    /// The config, when it is assembled from the workers' slices: it holds what each
    /// observed slice lists (see [`worker_slices::Observed::slice`]).
    pub fn assembled(&self) -> Option<&WorkerConfig> {
        self.index.as_ref().and(self.config.as_ref())
    }

    /// The config version in the ConfigMap: `version` of `config.yml`, else the annotation.
    pub fn version(&self) -> Option<i64> {
        self.config
            .as_ref()
            .map(|c| i64::try_from(c.version).unwrap_or(i64::MAX))
    }
}

/// The text of `config.yml`, if the ConfigMap has one.
pub fn config_text(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get(CONFIG_KEY).map(String::as_str)
}

/// The worker config, if the ConfigMap holds a readable one.
pub fn worker_config(cm: &ConfigMap) -> Option<WorkerConfig> {
    WorkerConfig::parse(config_text(cm)?).ok()
}

/// The worker config a pool's ConfigMaps hold: the `config.yml` of `main`, or in the
/// per-worker layout its index with the workers' own ConfigMaps among `others`.
pub fn pool_config<'a>(
    main: &ConfigMap,
    others: impl IntoIterator<Item = &'a SliceSummary>,
) -> Option<WorkerConfig> {
    if let Some(config) = worker_config(main) {
        return Some(config);
    }
    let index = worker_slices::index_of(main)?.ok()?;
    let mut slices = worker_slices::Observed::of(main.metadata.name.as_deref()?, others);
    Some(worker_slices::assemble(&index, &mut slices).config)
}

/// The config version the ConfigMap records in its annotation.
pub fn recorded_version(cm: &ConfigMap) -> Option<&str> {
    cm.annotations().get(VERSION_ANNOTATION).map(String::as_str)
}

/// The stale-worker records; unreadable ones count as none.
pub fn pending_refresh(cm: Option<&ConfigMap>) -> PendingRefresh {
    let annotation = cm.and_then(|cm| cm.annotations().get(PENDING_REFRESH_ANNOTATION));
    PendingRefresh::parse(annotation.map(String::as_str)).unwrap_or_default()
}

/// The ConfigMap of a config the operator wrote for `pool`, as it writes one with no rollout
/// in flight: `config.yml`, its labels, the version annotation and the pool as controller.
pub fn written(pool: &SwarmPool, config: &WorkerConfig) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(pool.config_map_name()),
            namespace: pool.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned()),
                (POOL_LABEL.to_owned(), pool.name_any()),
            ])),
            annotations: Some(BTreeMap::from([(
                VERSION_ANNOTATION.to_owned(),
                config.version.to_string(),
            )])),
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), config.render())])),
        ..ConfigMap::default()
    }
}

/// The slot table of a Deployment pool as the ConfigMap records it. A missing or unreadable
/// annotation is an empty table: every pod takes a slot afresh, and the handoff still keeps each
/// job on one pod at a time.
pub fn slot_table(cm: Option<&ConfigMap>) -> SlotTable {
    cm.and_then(|cm| cm.annotations().get(SLOTS_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

fn annotation_version(cm: &ConfigMap) -> Option<u64> {
    cm.annotations()
        .get(VERSION_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// The ConfigMap to write: `config.yml` (or, in the per-worker layout, the `index`), our
/// labels, the version and the rollout bookkeeping (with the workers that owe an
/// acknowledgement under `Acknowledge`, and the slot table of a Deployment pool), and the pool
/// as controller. Fails when it would not fit.
#[allow(
    clippy::too_many_arguments,
    reason = "one input per record the ConfigMap holds"
)]
pub(crate) fn desired(
    pool: &SwarmPool,
    name: &str,
    config: &WorkerConfig,
    index: Option<&Index>,
    pending: &PendingRefresh,
    holders: &Holders,
    awaiting: Option<&AwaitingAcks>,
    slots: Option<&SlotTable>,
) -> Result<ConfigMap, Failure> {
    let (key, text) = match index {
        Some(index) => (INDEX_KEY, index.render()),
        None => (CONFIG_KEY, config.render()),
    };
    let size = key.len() + text.len();
    if size > CONFIG_MAP_MAX_BYTES {
        let message = match index {
            Some(index) => format!(
                "{INDEX_KEY} would be {size} bytes for {} workers; a ConfigMap holds at most {CONFIG_MAP_MAX_BYTES}",
                index.workers.len()
            ),
            None => format!(
                "config.yml would be {size} bytes for {} jobs; a ConfigMap holds at most {CONFIG_MAP_MAX_BYTES}: set rollout.policy: Acknowledge to give each worker a ConfigMap of its own",
                pool.spec.jobs.len()
            ),
        };
        return Err(Failure::new(FailureReason::ConfigMapTooLarge, message));
    }
    let slots = slots.map(|table| serde_json::to_string(table).expect("slots always serialize"));
    let bookkeeping = PENDING_REFRESH_ANNOTATION.len()
        + pending.resolved_size_bound()
        + HANDOFF_ANNOTATION.len()
        + holders.resolved_size_bound()
        + awaiting.map_or(0, |a| {
            AWAITING_ACK_ANNOTATION.len() + a.resolved_size_bound()
        })
        + slots
            .as_ref()
            .map_or(0, |text| SLOTS_ANNOTATION.len() + text.len());
    if bookkeeping > ANNOTATIONS_MAX_BYTES {
        return Err(Failure::new(
            FailureReason::ConfigMapTooLarge,
            format!(
                "the rollout records of {} workers would be {bookkeeping} bytes of annotations; an object holds at most {ANNOTATIONS_MAX_BYTES}",
                pending.entries().len() + holders.entries().len()
            ),
        ));
    }
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned()),
        (POOL_LABEL.to_owned(), pool.name_any()),
    ]);
    let mut annotations = BTreeMap::from([
        (VERSION_ANNOTATION.to_owned(), config.version.to_string()),
        (PENDING_REFRESH_ANNOTATION.to_owned(), pending.render()),
        (HANDOFF_ANNOTATION.to_owned(), holders.render()),
    ]);
    if let Some(awaiting) = awaiting {
        annotations.insert(AWAITING_ACK_ANNOTATION.to_owned(), awaiting.render());
    }
    if let Some(slots) = slots {
        annotations.insert(SLOTS_ANNOTATION.to_owned(), slots);
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: pool.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_owned(), text)])),
        ..ConfigMap::default()
    })
}

/// Whether `observed` already holds everything `desired` sets: the config, our labels and
/// annotations, and the controller reference. Fields others added are not ours to compare.
pub(crate) fn is_current(observed: &ConfigMap, desired: &ConfigMap) -> bool {
    let subset = |want: Option<&BTreeMap<String, String>>,
                  have: Option<&BTreeMap<String, String>>| {
        want.into_iter()
            .flatten()
            .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
    };
    let owned = desired.owner_references().iter().all(|want| {
        observed
            .owner_references()
            .iter()
            .any(|have| have.uid == want.uid && have.controller == Some(true))
    });
    subset(desired.data.as_ref(), observed.data.as_ref())
        && subset(
            desired.metadata.labels.as_ref(),
            observed.metadata.labels.as_ref(),
        )
        && subset(
            desired.metadata.annotations.as_ref(),
            observed.metadata.annotations.as_ref(),
        )
        && owned
}

/// Whether a ConfigMap about to be written records holders or stale workers still to be
/// resolved against a live pod list.
pub fn records_unresolved(cm: &ConfigMap) -> bool {
    let annotation = |key: &str| cm.annotations().get(key).map(String::as_str);
    PendingRefresh::parse(annotation(PENDING_REFRESH_ANNOTATION)).is_ok_and(|p| p.has_unresolved())
        || Holders::parse(annotation(HANDOFF_ANNOTATION)).is_ok_and(|h| h.has_unresolved())
}
