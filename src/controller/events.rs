//! The events a reconcile publishes on its pool, and the pool counters they stand for.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use tracing::{debug, warn};

use super::Context;
use crate::api::conditions;
use crate::api::crd::SwarmPool;
use crate::planner::PlannedEvent;
use crate::runtime::pool_metrics::PoolCounter;

/// Publishes events; a failure to publish is logged, never fails the reconcile.
pub(super) async fn publish_events(ctx: &Context, pool: &SwarmPool, events: Vec<PlannedEvent>) {
    if events.is_empty() || ctx.may_write().is_err() {
        return;
    }
    // A recorder per reconcile: the recorder folds events with the same reason into one series
    // without updating the note, which would hide each new version and each refreshed pod.
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = pool.object_ref(&());
    let namespace = pool.namespace().unwrap_or_default();
    let acknowledged = events
        .iter()
        .filter(|e| e.reason == conditions::reason::WORKER_ACKNOWLEDGED)
        .count();
    for _ in 0..acknowledged {
        let counter = PoolCounter::Acknowledgements;
        ctx.metrics.count(counter, &namespace, &pool.name_any());
    }
    for event in crate::planner::coalesce_acknowledgements(events) {
        if event.warning {
            ctx.metrics.warned(event.reason);
        }
        let counted: &[PoolCounter] = match (event.reason, event.action) {
            (conditions::reason::ACK_TIMED_OUT, _) => &[PoolCounter::AckTimeouts],
            (conditions::reason::WORKER_UNAVAILABLE, crate::planner::FAILOVER) => {
                &[PoolCounter::Unavailable, PoolCounter::Failovers]
            }
            (conditions::reason::WORKER_UNAVAILABLE, _) => &[PoolCounter::Unavailable],
            _ => &[],
        };
        for counter in counted {
            ctx.metrics.count(*counter, &namespace, &pool.name_any());
        }
        let secondary = event
            .related_pod
            .as_ref()
            .map(|(name, uid)| ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(name.clone()),
                namespace: pool.namespace(),
                uid: Some(uid.clone()),
                ..ObjectReference::default()
            });
        let result = recorder
            .publish(
                &Event {
                    type_: if event.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: event.reason.to_owned(),
                    note: Some(event.note.clone()),
                    action: event.action.to_owned(),
                    secondary,
                },
                &reference,
            )
            .await;
        match result {
            Ok(()) => debug!(reason = event.reason, note = %event.note, "published event"),
            Err(error) => warn!(%error, reason = event.reason, "failed to publish event"),
        }
    }
}
