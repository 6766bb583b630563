//! A watch that starts over with a fresh list after any failure, as client-go's reflector does.
//!
//! kube-runtime's watcher resumes a failed watch from its last resourceVersion and relists only
//! on `410 Gone`, with a backoff that grows to 30 s plus as much again in jitter and resets
//! only after two quiet minutes. After an API server restart that left the operator's caches
//! minutes behind: every watch waited out a long backoff, and a resumed watch proves nothing
//! about the events it may have missed. Here a failure drops the watch (and its connection),
//! waits a short jittered backoff ([`crate::runtime::retry::backoff`]) (longer only when the server asks
//! for it with `Retry-After`), and lists again; a complete list resets the backoff. The list is
//! served from the API server's watch cache, so starting over is cheap.

use std::fmt::Debug;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;

use crate::runtime::retry::{MAX_DELAY, backoff};

/// Longest wait a server's `Retry-After` can impose on a watch.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Server-side timeout of each watch request: the API server ends a healthy watch this often
/// and it resumes without a list, so a watch whose connection silently died is noticed within
/// about this long (kube-runtime adds a client-side idle timeout a little above it).
pub const WATCH_TIMEOUT_SECONDS: u32 = 60;

/// How long the server asked the client to wait before retrying, if it did (`429 Too Many
/// Requests` from API Priority and Fairness, `503` while starting), capped.
pub fn retry_after(error: &kube::Error) -> Option<Duration> {
    match error {
        kube::Error::Api(status) => status
            .details
            .as_ref()
            .map(|details| details.retry_after_seconds)
            .filter(|&seconds| seconds > 0)
            .map(|seconds| Duration::from_secs(seconds.into()).min(MAX_RETRY_AFTER)),
        _ => None,
    }
}

/// The client error inside a watcher error, if any.
fn client_error(error: &watcher::Error) -> Option<&kube::Error> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => Some(e),
        _ => None,
    }
}

/// The watch of `api` with `config` as a stream of watcher events that never ends: after an
/// error (which it yields, for logging and health), it backs off and starts over with a list.
pub fn relisting_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = config.timeout(WATCH_TIMEOUT_SECONDS);
    let start = move || watcher(api.clone(), config.clone()).boxed();
    futures::stream::unfold(Relisting::new(start), Relisting::next)
}

/// The state between two items of [`relisting_watcher`].
struct Relisting<K, F> {
    start: F,
    current: Option<BoxStream<'static, watcher::Result<Event<K>>>>,
    delays: Box<dyn Iterator<Item = Duration> + Send>,
    /// Wait this long before starting over.
    pause: Option<Duration>,
}

impl<K, F> Relisting<K, F>
where
    K: Resource + Send + 'static,
    F: Fn() -> BoxStream<'static, watcher::Result<Event<K>>> + Send,
{
    fn new(start: F) -> Self {
        Self {
            start,
            current: None,
            delays: Box::new(backoff()),
            pause: None,
        }
    }

    async fn next(mut self) -> Option<(watcher::Result<Event<K>>, Self)> {
        loop {
            if let Some(pause) = self.pause.take() {
                tracing::debug!(?pause, "watch failed; listing again after a pause");
                tokio::time::sleep(pause).await;
            }
            let stream = self.current.get_or_insert_with(&self.start);
            match stream.next().await {
                Some(Ok(event)) => {
                    if matches!(event, Event::InitDone) {
                        self.delays = Box::new(backoff());
                    }
                    return Some((Ok(event), self));
                }
                Some(Err(error)) => {
                    // Drop the watch (its connection with it) and list anew after a pause.
                    self.current = None;
                    let delay = self.delays.next().unwrap_or(MAX_DELAY);
                    let asked = client_error(&error).and_then(retry_after);
                    self.pause = Some(asked.map_or(delay, |asked| asked.max(delay)));
                    return Some((Err(error), self));
                }
                // kube-runtime's watcher does not end; should it, start over.
                None => self.current = None,
            }
        }
    }
}

/// A `429 Too Many Requests` asking for a retry after `seconds`, as API Priority and Fairness
/// answers.
#[cfg(test)]
pub(crate) fn throttled(seconds: u32) -> kube::Error {
    use kube::core::{Status, response::StatusDetails};
    kube::Error::Api(
        Status {
            code: 429,
            details: Some(StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: seconds,
            }),
            ..Status::default()
        }
        .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn retry_after_is_read_from_the_status_details_and_capped() {
        let status = throttled;
        assert_eq!(retry_after(&status(2)), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(&status(0)), None);
        assert_eq!(retry_after(&status(600)), Some(MAX_RETRY_AFTER));
    }

    #[tokio::test]
    async fn a_failure_is_passed_on_then_the_watch_starts_over_with_a_list() {
        let started = Arc::new(AtomicUsize::new(0));
        let counter = started.clone();
        // Each watch lists one ConfigMap, then fails.
        let start = move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(format!("list-{n}"));
            futures::stream::iter(vec![
                Ok(Event::Init),
                Ok(Event::InitApply(cm)),
                Ok(Event::InitDone),
                Err(watcher::Error::NoResourceVersion),
            ])
            .boxed()
        };
        let events: Vec<_> = futures::stream::unfold(Relisting::new(start), Relisting::next)
            .take(8)
            .collect()
            .await;
        let names: Vec<String> = events
            .iter()
            .map(|e| match e {
                Ok(Event::InitApply(cm)) => cm.metadata.name.clone().unwrap(),
                Ok(Event::Init) => "init".into(),
                Ok(Event::InitDone) => "done".into(),
                Ok(_) => "other".into(),
                Err(_) => "error".into(),
            })
            .collect();
        assert_eq!(
            names,
            [
                "init", "list-0", "done", "error", "init", "list-1", "done", "error"
            ]
        );
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "a new watch after the error"
        );
    }
}
