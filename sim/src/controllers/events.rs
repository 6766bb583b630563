//! Events the simulated controllers record, shaped like client-go's event recorder output so
//! `kubectl describe` and event watchers see what a real cluster shows.

use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;
use serde_json::{Value, json};
use tracing::debug;

use super::meta;
use crate::store::Store;

/// Keeps event names unique when two are recorded within one clock tick.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Records a `Normal` core/v1 Event about `involved` from `component`.
pub(crate) fn normal(
    store: &Store,
    involved: &Value,
    component: &str,
    reason: &str,
    message: &str,
) {
    let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
    let unique = nanos.wrapping_add(SEQUENCE.fetch_add(1, Ordering::Relaxed));
    let now = meta::now_rfc3339();
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{unique:x}", meta::name(involved)),
            "namespace": meta::namespace(involved).unwrap_or("default"),
        },
        "involvedObject": {
            "apiVersion": meta::api_version(involved),
            "kind": meta::kind(involved),
            "name": meta::name(involved),
            "namespace": meta::namespace(involved),
            "uid": meta::uid(involved),
            "resourceVersion": involved.pointer("/metadata/resourceVersion"),
        },
        "type": "Normal",
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(err) = store.create(event) {
        debug!(reason, error = %err.message, "recording event failed");
    }
}
