//! The bounded change history watches replay from, and the channel they follow.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::EventType;

/// How many changes the history keeps; a watch from before them gets 410 Expired.
const HISTORY_LIMIT: usize = 20_000;

/// One committed change, with the storage bucket it belongs to.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub storage: String,
    /// The object before the change (None for creations), shared with the store.
    pub prev: Option<Arc<Value>>,
    pub event_type: EventType,
    /// The object after the change, shared with the store while it is current.
    pub object: Arc<Value>,
}

/// What a watch starts from: synthetic initial objects or a backlog of changes, then the
/// live signal (subscribed under the same lock, so nothing falls in between).
pub(crate) struct WatchStart {
    pub initial: Vec<Arc<Value>>,
    pub backlog: Vec<Arc<Change>>,
    /// Changes whenever a change is committed; the watch then reads the history from the
    /// last resourceVersion it delivered.
    pub rx: watch::Receiver<u64>,
    pub rv: u64,
}

pub(crate) struct History {
    entries: VecDeque<Arc<Change>>,
    /// Changes up to this resourceVersion left `entries` to keep it bounded.
    evicted: u64,
    /// Watches may not start from a resourceVersion below this one ("compact now").
    compacted: u64,
    tx: watch::Sender<u64>,
}

impl History {
    pub(crate) fn new() -> Self {
        let (tx, _) = watch::channel(0);
        Self {
            entries: VecDeque::new(),
            evicted: 0,
            compacted: 0,
            tx,
        }
    }

    pub(crate) fn push(&mut self, change: Arc<Change>) {
        if self.entries.len() >= HISTORY_LIMIT
            && let Some(old) = self.entries.pop_front()
        {
            self.evicted = old.rv;
        }
        let rv = change.rv;
        self.entries.push_back(change);
        self.tx.send_replace(rv);
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The oldest resourceVersion a watch can start from.
    pub(crate) fn compacted(&self) -> u64 {
        self.compacted.max(self.evicted)
    }

    /// Watches from resourceVersions before `rv` get 410 Expired. Open watches keep
    /// following (what they have yet to deliver stays until it ages out).
    pub(crate) fn compact(&mut self, rv: u64) {
        self.compacted = rv;
    }

    /// Changes of one bucket strictly after `rv`, or `None` when `rv` is compacted away.
    pub(crate) fn since(&self, rv: u64, storage: &str) -> Option<Vec<Arc<Change>>> {
        if rv < self.compacted() {
            return None;
        }
        self.following(rv, storage)
    }

    /// Like [`History::since`] for an open watch, which only loses changes that aged out.
    pub(crate) fn following(&self, rv: u64, storage: &str) -> Option<Vec<Arc<Change>>> {
        if rv < self.evicted {
            return None;
        }
        // Entries are in resourceVersion order: skip the delivered ones without a scan.
        let first = self.entries.partition_point(|c| c.rv <= rv);
        Some(
            self.entries
                .range(first..)
                .filter(|c| c.storage == storage)
                .cloned()
                .collect(),
        )
    }
}
