//! Watch streams: newline-separated `{"type","object"}` events strictly after a
//! resourceVersion, with selector transitions, bookmarks, initial events, the 410 ERROR
//! event after compaction, and `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch as signal};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use super::http::RequestContext;
use super::resources::selectors;
use super::table::{self, Mode};
use super::{ApiServer, stream_body};
use crate::store::{
    ApiError, Change, EventType, FieldSelector, LabelSelector, ResourceType, Store, WatchStart,
    meta, served_shared,
};

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(15);
/// Watch length when the client sets no `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct Filter {
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| meta::namespace(obj) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

struct Encoder {
    rt: Arc<ResourceType>,
    mode: Mode,
    include: String,
    headers_sent: bool,
}

impl Encoder {
    fn event(&mut self, kind: &str, obj: &Value) -> Bytes {
        let object = match self.mode {
            Mode::Full => return line(kind, obj),
            Mode::Metadata => table::partial(obj),
            Mode::Table => {
                let md = json!({"resourceVersion": meta::resource_version(obj)});
                let t = table::table(&self.rt, &[obj], md, &self.include, !self.headers_sent);
                self.headers_sent = true;
                t
            }
        };
        line(kind, &object)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, api_version) = match self.mode {
            Mode::Metadata => (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            ),
            _ => (self.rt.kind.clone(), self.rt.api_version()),
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
        )
    }
}

/// One watch event, borrowing its object: `{"type": ..., "object": ...}` as kube-apiserver
/// writes it.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut buf = serde_json::to_vec(&Line { kind, object }).unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

fn expired_event(err: &ApiError) -> Bytes {
    line("ERROR", &err.to_status())
}

/// The event (if any) one change produces for this watch.
fn event_for(filter: &Filter, enc: &mut Encoder, change: &Change) -> Option<Bytes> {
    if change.storage != filter.rt.storage {
        return None;
    }
    // Shared, not copied, unless the watched version differs from the stored one.
    let cur = served_shared(&change.object, &filter.rt);
    let cur_matches = filter.matches(&cur);
    let prev_matches = change
        .prev
        .as_ref()
        .map(|p| filter.matches(&served_shared(p, &filter.rt)))
        .unwrap_or(false);
    let kind = match change.event_type {
        EventType::Added => cur_matches.then_some("ADDED"),
        EventType::Deleted => (cur_matches || prev_matches).then_some("DELETED"),
        EventType::Modified => match (prev_matches, cur_matches) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
    }?;
    Some(enc.event(kind, &cur))
}

/// The query parameters of a watch request.
struct Params {
    /// `resourceVersion`: deliver the changes after it (none: the current objects first).
    from: Option<u64>,
    /// `sendInitialEvents`: the current objects as ADDED, then an initial-events-end bookmark.
    send_initial: bool,
    /// `allowWatchBookmarks`.
    bookmarks: bool,
    /// `timeoutSeconds`, else [`DEFAULT_TIMEOUT`].
    timeout: Duration,
}

impl Params {
    fn parse(ctx: &RequestContext) -> Result<Self, ApiError> {
        let from =
            match ctx.param("resourceVersion").filter(|s| !s.is_empty()) {
                None => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv:?}"))
                })?),
            };
        let timeout = match ctx.param("timeoutSeconds") {
            Some(t) => Duration::from_secs(
                t.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
            ),
            None => DEFAULT_TIMEOUT,
        };
        Ok(Self {
            from,
            send_initial: ctx.flag("sendInitialEvents"),
            bookmarks: ctx.flag("allowWatchBookmarks"),
            timeout,
        })
    }
}

/// Starts a watch response.
pub(crate) fn serve(
    api: &ApiServer,
    rt: &Arc<ResourceType>,
    namespace: Option<&str>,
    ctx: &RequestContext,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rt, ctx)?;
    let params = Params::parse(ctx)?;
    let filter = Filter {
        rt: rt.clone(),
        namespace: namespace.map(String::from),
        labels,
        fields,
    };
    let enc = Encoder {
        rt: rt.clone(),
        mode: table::mode(&ctx.accept),
        include: ctx.param("includeObject").unwrap_or("Metadata").to_string(),
        headers_sent: false,
    };
    let start = {
        let state = api.store().lock();
        if params.send_initial {
            state.watch(rt, None)
        } else {
            state.watch(rt, params.from)
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    match start {
        Err(err) => {
            // A too-old resourceVersion is an ERROR event in a 200 stream, which makes
            // clients relist instead of retrying the same watch.
            let _ = tx.try_send(expired_event(&err));
        }
        Ok(start) => {
            let watch = Watch {
                filter,
                enc,
                tx,
                store: api.store().clone(),
            };
            tokio::spawn(watch.run(start, params, api.closing()));
        }
    }
    let stream = ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(stream_body(stream))
        .expect("valid response"))
}

/// One open watch: what it selects, how it encodes, and where its events go.
struct Watch {
    filter: Filter,
    enc: Encoder,
    tx: mpsc::Sender<Bytes>,
    store: Store,
}

impl Watch {
    /// Sends the initial events, then follows the history until the client goes, the
    /// timeout passes, the server closes or the watch falls behind.
    async fn run(mut self, start: WatchStart, params: Params, closing: signal::Receiver<bool>) {
        let initial = self.initial_events(&start, params.send_initial);
        for ev in initial {
            if self.tx.send(ev).await.is_err() {
                return;
            }
        }
        self.follow(start.rx, start.rv, &params, closing).await;
    }

    /// The current objects (with their end bookmark, when asked for) or the backlog after
    /// the requested resourceVersion.
    fn initial_events(&mut self, start: &WatchStart, send_initial: bool) -> Vec<Bytes> {
        let mut initial: Vec<Bytes> = start
            .initial
            .iter()
            .filter(|o| self.filter.matches(o))
            .map(|o| self.enc.event("ADDED", o))
            .collect();
        if send_initial {
            initial.push(self.enc.bookmark(start.rv, true));
        }
        for change in &start.backlog {
            if let Some(ev) = event_for(&self.filter, &mut self.enc, change) {
                initial.push(ev);
            }
        }
        initial
    }

    /// Live changes and bookmarks until the watch ends.
    async fn follow(
        &mut self,
        mut changed: signal::Receiver<u64>,
        mut last_rv: u64,
        params: &Params,
        mut closing: signal::Receiver<bool>,
    ) {
        let deadline = tokio::time::sleep(params.timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(BOOKMARK_EVERY);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = closing.changed() => break,
                _ = ticker.tick(), if params.bookmarks => {
                    if self.tx.send(self.enc.bookmark(last_rv, false)).await.is_err() {
                        break;
                    }
                }
                _ = self.tx.closed() => break,
                notified = changed.changed() => {
                    if notified.is_err() {
                        break;
                    }
                    match self.forward(last_rv).await {
                        Some(rv) => last_rv = rv,
                        None => break,
                    }
                }
            }
        }
    }

    /// Sends the changes after `last_rv`; returns the resourceVersion reached, or `None`
    /// when the watch ends (the client went, or the changes aged out of the history).
    async fn forward(&mut self, last_rv: u64) -> Option<u64> {
        // Read from the shared history, not a per-watch queue: a watch falls behind only
        // when changes age out of the history.
        let read = self.store.lock().watch_changes(&self.filter.rt, last_rv);
        match read {
            Ok((changes, rv)) => {
                for change in &changes {
                    if let Some(ev) = event_for(&self.filter, &mut self.enc, change)
                        && self.tx.send(ev).await.is_err()
                    {
                        return None;
                    }
                }
                Some(rv)
            }
            Err(_) => {
                let err = ApiError::expired("the watch fell behind; relist");
                let _ = self.tx.send(expired_event(&err)).await;
                None
            }
        }
    }
}
