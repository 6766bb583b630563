//! One reconcile of a pool: wait for its turn and for caches that follow the cluster, drive
//! its rounds against the API server, write its status; and the retry policy when it fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, instrument, warn};

use super::events::publish_events;
use super::jobs_sources::{self, Source};
use super::kube_cluster::{KubeCluster, Snapshot};
use super::turns::Turn;
use super::{Context, relisting_watch};
use crate::Error;
use crate::api::conditions;
use crate::api::crd::{Phase, SwarmPool, SwarmPoolStatus};
use crate::drive::{Driven, Journal, drive};
use crate::runtime::cache_health::{STALE_AFTER, StaleCache};
use crate::state::jobs_source::{self, Found};
use swarm_protocol::names::MANAGER as FIELD_MANAGER;

/// First and last retry delay of the per-pool backoff for transient errors. The cap is short:
/// a pool whose reconciles failed while the API server was away must not wait minutes once it
/// is back (the watches' relists also trigger it at once).
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How often a pool is reconsidered while a cache is stale, to report it and to resume.
const STALE_RECHECK: Duration = Duration::from_secs(5);

/// Retry delay after `failures` consecutive failures: 1s, 2s, 4s, ... capped at 30 s.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_MIN.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

/// The retry delay after a failed reconcile: the backoff, plus a jitter of up to a quarter so
/// pools that failed together do not retry together, and at least what the server asked for
/// with `Retry-After` (`429 Too Many Requests`).
fn retry_delay(failures: u32, error: &Error) -> Duration {
    let delay = backoff_delay(failures);
    let jitter = delay.mul_f64(rand_fraction() / 4.0);
    let asked = error
        .api_error()
        .and_then(relisting_watch::retry_after)
        .unwrap_or_default();
    (delay + jitter).max(asked)
}

/// A number in [0, 1) that differs between calls, for jitter.
fn rand_fraction() -> f64 {
    (crate::random_bits() >> 11) as f64 / (1u64 << 53) as f64
}

/// One reconcile: snapshot the caches, run the round protocol ([`drive`]) against the API
/// server, report the status. Events and metrics of what was done are published even when a
/// later step fails.
#[instrument(skip(pool, ctx), fields(pool = %pool.name_any(), namespace = pool.namespace().unwrap_or_default()))]
pub(super) async fn reconcile(pool: Arc<SwarmPool>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Turns first come, first served (see `super::turns`); the cluster lends this one out
    // while it writes a large batch.
    let turn = ctx.turns.take().await;
    // The pool as it is now: it may have changed while this reconcile waited.
    let Some(pool) = ctx.pools.get(&ObjectRef::from_obj(pool.as_ref())) else {
        return Ok(Action::await_change());
    };
    let pool = ctx.with_own_status(pool);
    let _timer = ctx.metrics.reconcile_started();
    let mut journal = Journal::default();
    let result = reconcile_pool(&pool, &ctx, turn, &mut journal).await;
    ctx.metrics.granted(&journal.granted_after_seconds);
    publish_events(&ctx, &pool, journal.events).await;
    if result.is_ok() {
        ctx.record_success(&ObjectRef::from_obj(pool.as_ref()));
    }
    result
}

async fn reconcile_pool<'a>(
    pool: &'a SwarmPool,
    ctx: &'a Context,
    turn: Turn<'a>,
    journal: &mut Journal,
) -> Result<Action, Error> {
    let namespace = pool.namespace().ok_or(Error::MissingNamespace)?;
    if let Some(wait) = not_ready_to_decide(ctx, pool).await? {
        return Ok(wait);
    }
    let sources = jobs_sources::look_up(ctx, pool, &namespace).await?;
    let (resolved, unresolved) = jobs_source::resolve(pool, |name| {
        sources.get(name).map_or(Found::Missing, Source::found)
    });
    let mut cluster = KubeCluster::new(ctx, pool, &namespace, turn);
    let config_map = cluster.starting_config_map().await?;
    let snapshot = Snapshot::of(ctx, &resolved, unresolved.as_ref(), &namespace, config_map);
    let outcome = match drive(&mut cluster, &snapshot.observed(), journal).await? {
        Driven::Done(outcome) => outcome,
        Driven::PoolGone => return Ok(Action::await_change()),
    };
    if !ctx.status_is_reported(pool, &outcome.status) {
        if !patch_status(ctx, pool, &outcome.status).await? {
            // Deleted since the cache saw it: there is no status left to report.
            return Ok(Action::await_change());
        }
        debug!(phase = ?outcome.status.phase, "status updated");
    }
    Ok(Action::requeue(outcome.requeue_after))
}

/// When the pool must not be decided on now, what to do instead: a pool on its way out keeps
/// nothing (the garbage collector removes its ConfigMap, and re-creating it would undo the
/// user's delete); a stale cache may have missed changes, so the status says it is not known
/// and the watch's relist (which reconciles every pool) is awaited.
async fn not_ready_to_decide(ctx: &Context, pool: &SwarmPool) -> Result<Option<Action>, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Some(Action::await_change()));
    }
    ctx.health.wait_synced().await;
    let stale = ctx.health.stale(Instant::now());
    if !stale.is_empty() {
        report_stale(ctx, pool, &stale).await?;
        return Ok(Some(Action::requeue(STALE_RECHECK)));
    }
    if ctx.health.any_failing() {
        return Ok(Some(Action::requeue(STALE_AFTER)));
    }
    Ok(None)
}

/// Writes `status` as the pool's whole status; `false` when the pool is gone.
async fn patch_status(
    ctx: &Context,
    pool: &SwarmPool,
    status: &SwarmPoolStatus,
) -> Result<bool, Error> {
    ctx.may_write()?;
    let pools: Api<SwarmPool> =
        Api::namespaced(ctx.client.clone(), &pool.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": SwarmPool::api_version(&()),
        "kind": SwarmPool::kind(&()),
        "metadata": { "name": pool.name_any() },
        "status": status,
    });
    match pools
        .patch_status(
            &pool.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {
            ctx.remember_status(pool, status);
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
        Err(source) => Err(Error::PatchStatus { source }),
    }
}

/// Writes the pool's status as not known: phase `Degraded`, `Ready` and `Progressing` Unknown
/// and `Degraded` True, all with reason `StaleCache` and a message naming the stale caches;
/// the other fields keep their last values.
async fn report_stale(ctx: &Context, pool: &SwarmPool, stale: &[StaleCache]) -> Result<(), Error> {
    let now = Timestamp::now();
    let (headline, message) = stale_message(stale, now);
    let already_reported = pool.status.as_ref().is_some_and(|s| {
        s.phase == Some(Phase::Degraded)
            && s.conditions
                .iter()
                .any(|c| c.type_ == conditions::READY && c.message.starts_with(&headline))
    });
    if already_reported {
        return Ok(());
    }
    let mut status = pool.status.clone().unwrap_or_default();
    status.phase = Some(Phase::Degraded);
    status.conditions =
        conditions::unknown(&status.conditions, pool.metadata.generation, now, &message);
    warn!(pool = %pool.name_any(), %message, "reporting the pool's status as unknown");
    patch_status(ctx, pool, &status).await.map(|_| ())
}

/// The headline and the whole message of a stale status at `now`. The headline names each
/// stale cache and its kind of error, so a status is rewritten when the reason changes (the API
/// server is back but refuses the read) and not on every retry of the same failure.
fn stale_message(stale: &[StaleCache], now: Timestamp) -> (String, String) {
    let causes: Vec<String> = stale
        .iter()
        .map(|s| format!("{} ({})", s.cache, s.cause))
        .collect();
    let headline = format!("caches not following the cluster: {}; ", causes.join(", "));
    let details: Vec<String> = stale
        .iter()
        .map(|s| {
            let since = now.checked_sub(s.failing_for).unwrap_or(now);
            let since = since
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or(since);
            format!(
                "the {} watch has failed since {since}: {}",
                s.cache, s.error
            )
        })
        .collect();
    let message = format!(
        "{headline}{}; the rest of this status is the last known state",
        details.join("; ")
    );
    (headline, message)
}

/// The retry of a failed reconcile: after the pool's backoff ([`retry_delay`]), logged and
/// counted.
pub(super) fn error_policy(pool: Arc<SwarmPool>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(pool.as_ref());
    let failures = ctx.record_failure(&key);
    let delay = retry_delay(failures, error);
    ctx.metrics.reconcile_failed(error);
    warn!(
        pool = %pool.name_any(),
        namespace = pool.namespace().unwrap_or_default(),
        error = %crate::error_chain(error),
        failures,
        retry_in_ms = delay.as_millis() as u64,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cache_health::{Cache, Cause};

    #[test]
    fn a_stale_status_is_rewritten_when_the_kind_of_error_changes_not_its_text() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let stale = |cause, error: &str| StaleCache {
            cache: Cache::Pods,
            failing_for: Duration::from_secs(30),
            cause,
            error: error.to_owned(),
        };
        let (down, message) = stale_message(&[stale(Cause::Transport, "connect to 10.0.0.1")], now);
        assert_eq!(
            message,
            "caches not following the cluster: statefulset-pods (connection failed); the \
             statefulset-pods watch has failed since 2026-01-01T00:00:30Z: connect to 10.0.0.1; \
             the rest of this status is the last known state"
        );
        let (retried, _) = stale_message(&[stale(Cause::Transport, "connect to 10.0.0.2")], now);
        assert_eq!(down, retried, "the same failure again is not news");
        let (refused, message) =
            stale_message(&[stale(Cause::Status(403), "pods is forbidden")], now);
        assert!(!message.starts_with(&down), "{message}");
        assert!(
            message.starts_with(&refused) && message.contains("HTTP 403"),
            "{message}"
        );
    }

    #[test]
    fn backoff_doubles_from_one_second_and_caps_at_thirty_seconds() {
        assert_eq!(backoff_delay(1), Duration::from_secs(1));
        assert_eq!(backoff_delay(2), Duration::from_secs(2));
        assert_eq!(backoff_delay(5), Duration::from_secs(16));
        assert_eq!(backoff_delay(6), Duration::from_secs(30));
        assert_eq!(backoff_delay(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn a_retry_is_jittered_within_a_quarter_and_waits_at_least_what_the_server_asked() {
        let transient = Error::MissingNamespace;
        for _ in 0..50 {
            let delay = retry_delay(3, &transient);
            assert!(
                delay >= Duration::from_secs(4) && delay <= Duration::from_secs(5),
                "{delay:?}"
            );
        }
        let throttled = Error::PatchStatus {
            source: crate::controller::relisting_watch::throttled(20),
        };
        assert_eq!(retry_delay(1, &throttled), Duration::from_secs(20));
    }
}
