//! Where the worker reads its entry: its own ConfigMap, `<pool's ConfigMap>.<pod>`, through the
//! API. A fence read (`read`) is a GET with no `resourceVersion`, which the API server answers
//! with a quorum read; nothing else may let a job run. The WATCH by name (`follow`) is only
//! for speed: each event makes the worker send a fence read at once. There is no fallback to a
//! mounted file.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use swarm_protocol::config::{CONFIG_KEY, ParseError, WorkerConfig};
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};

use crate::backoff::Retry;
use crate::handoff::Entry;
use crate::shed::Shed;

/// This pod's entry of a `config.yml` text, or why it cannot be read.
pub fn parse(text: &str, pod: &str) -> Result<Entry, ParseError> {
    let config = WorkerConfig::parse(text)?;
    let jobs = config
        .workload(pod)
        .map(|workload| workload.jobs.clone())
        .unwrap_or_default();
    Ok(Entry::new(Some(config.version), jobs))
}

/// What a fence read found.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// This pod's entry; no version and no jobs when there is no ConfigMap or no config in it.
    pub(crate) entry: Entry,
    /// The ConfigMap's resourceVersion, empty when there is none: where the watch starts.
    pub(crate) resource_version: String,
}

/// Why a fence read failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    Api(kube::Error),
    #[error("the ConfigMap's worker config is unreadable: {0}")]
    Unreadable(ParseError),
    #[error("no answer in time")]
    TimedOut,
}

impl ReadError {
    /// Whether the API server shed the read (429 Too Many Requests), rather than failed it.
    pub(crate) fn is_shed(&self) -> bool {
        matches!(self, ReadError::Api(error) if is_shed(error))
    }
}

/// Whether `error` is the API server shedding load (429 Too Many Requests).
pub(crate) fn is_shed(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 429)
}

/// One fence read of the ConfigMap `name`: a GET with no `resourceVersion` (a quorum read),
/// given up after `timeout`. A config that cannot be parsed fails the read rather than showing
/// no jobs: it is no entry the operator wrote.
pub(crate) async fn read(
    api: &Api<ConfigMap>,
    name: &str,
    pod: &str,
    timeout: Duration,
) -> Result<Found, ReadError> {
    let answer = tokio::time::timeout(timeout, api.get_opt(name))
        .await
        .map_err(|_| ReadError::TimedOut)?
        .map_err(ReadError::Api)?;
    let Some(config_map) = answer else {
        return Ok(Found {
            entry: Entry::default(),
            resource_version: String::new(),
        });
    };
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(CONFIG_KEY));
    let entry = match text {
        Some(text) => parse(text, pod).map_err(ReadError::Unreadable)?,
        None => Entry::default(),
    };
    Ok(Found {
        entry,
        resource_version: config_map.metadata.resource_version.unwrap_or_default(),
    })
}

/// Watches the ConfigMap `name` and wakes `wake` on each event, until aborted. It starts from
/// the resourceVersion of the first fence read (`seen`), so it reports only changes after it;
/// after a 410 it watches without one, from the object as it is. A watch that cannot be
/// started again is retried after a growing delay, up to `ceiling`, or once `shed` lets it
/// after a 429: it only brings reads forward, and thousands of workers re-watching every
/// second would keep an API server that sheds load overloaded.
pub(crate) async fn follow(
    api: Api<ConfigMap>,
    name: String,
    mut seen: watch::Receiver<Option<String>>,
    wake: Arc<Notify>,
    ceiling: Duration,
    shed: Arc<Shed>,
) {
    let mut from = match seen.wait_for(Option::is_some).await {
        Ok(first) => first.clone().unwrap_or_default(),
        Err(_) => return,
    };
    let mut retry = Retry::default();
    loop {
        match watch_from(&api, &name, &mut from, &wake, &mut retry, &shed).await {
            WatchEnd::Expired => from.clear(),
            WatchEnd::Failed => tokio::time::sleep(retry.next_delay(ceiling)).await,
            // `shed` holds the next attempt.
            WatchEnd::Shed => {}
        }
    }
}

/// How long one watch request lasts: the API server's own range for a watch that names none
/// (30 to 60 minutes), where kube's default of 290 s would have 10,000 workers start 34 watches a
/// second at rest. A connection that dies silently meanwhile costs nothing but speed: the fence
/// reads go on every half permit whatever the watch does.
const WATCH_SECONDS: u32 = 1_800;

/// A watch of the one ConfigMap `name`, with bookmarks, for [`WATCH_SECONDS`].
fn watch_params(name: &str) -> WatchParams {
    WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_SECONDS)
}

/// Why a watch ended, so a failing watch is not retried in a tight loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchEnd {
    /// The resourceVersion is too old (410 Gone): watch without one at once.
    Expired,
    /// The watch failed: watch again after a pause.
    Failed,
    /// The API server shed the watch (429): watch again once the worker's hold ends.
    Shed,
}

/// Watches the ConfigMap from `version` until the watch fails or expires; a watch that times
/// out is resumed from the last version seen, which `version` keeps.
async fn watch_from(
    api: &Api<ConfigMap>,
    name: &str,
    version: &mut String,
    wake: &Notify,
    retry: &mut Retry,
    shed: &Arc<Shed>,
) -> WatchEnd {
    let params = watch_params(name);
    loop {
        let pass = shed.admit().await;
        let started = api.watch(&params, version).await;
        let was_shed = pass.ended(started.as_ref().err());
        let stream = match started {
            Ok(stream) => {
                *retry = Retry::default();
                stream
            }
            Err(kube::Error::Api(status)) if status.code == 410 => return WatchEnd::Expired,
            Err(_) if was_shed => {
                debug!(config_map = %name, "watch shed; waiting for the worker's hold to end");
                return WatchEnd::Shed;
            }
            Err(error) => {
                warn!(config_map = %name, %error, "cannot watch the ConfigMap");
                return WatchEnd::Failed;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    WatchEvent::Added(config_map)
                    | WatchEvent::Modified(config_map)
                    | WatchEvent::Deleted(config_map),
                ) => {
                    if let Some(seen) = &config_map.metadata.resource_version {
                        version.clone_from(seen);
                    }
                    // The event proves nothing: only the fence read it brings forward counts.
                    wake.notify_one();
                }
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    *version = bookmark.metadata.resource_version;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    debug!(config_map = %name, "watch expired; watching the object as it is");
                    return WatchEnd::Expired;
                }
                Ok(WatchEvent::Error(status)) => {
                    warn!(config_map = %name, error = %status, "watch failed; watching again");
                    return WatchEnd::Failed;
                }
                Err(error) => {
                    warn!(config_map = %name, %error, "watch failed; watching again");
                    return WatchEnd::Failed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "version: 3\nworkloads:\n  w-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  w-1:\n    version: 1\n    jobs: []\nfuture: field\n";

    #[test]
    fn a_watch_lasts_as_long_as_the_api_server_lets_one_and_keeps_its_bookmarks() {
        let params = watch_params("cm.w-0");
        assert_eq!(params.timeout, Some(1_800));
        assert!(params.bookmarks);
        assert_eq!(
            params.field_selector.as_deref(),
            Some("metadata.name=cm.w-0")
        );
    }

    #[test]
    fn a_pod_reads_its_own_entry_and_the_config_version() {
        assert_eq!(
            parse(CONFIG, "w-0").unwrap(),
            Entry::new(Some(3), ["a", "b"])
        );
    }

    #[test]
    fn a_missing_entry_means_no_jobs() {
        let entry = parse(CONFIG, "w-7").unwrap();
        assert_eq!(entry.version, Some(3));
        assert!(entry.jobs.is_empty());
    }

    #[test]
    fn an_unreadable_config_is_an_error() {
        assert!(parse("{{{ not yaml", "w-0").is_err());
        assert!(parse("", "w-0").is_err());
    }
}
