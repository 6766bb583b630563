//! The bounded change history watches replay from, and the channel they follow.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::EventType;

/// How many changes the history keeps; a watch from before them gets 410 Expired.
const HISTORY_LIMIT: usize = 20_000;

/// One committed change, with the storage bucket it belongs to.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub storage: String,
    /// The object before the change (None for creations).
    pub prev: Option<Value>,
    pub event_type: EventType,
    pub object: Value,
}

/// What a watch starts from: synthetic initial objects or a backlog of changes, then the
/// live channel (subscribed under the same lock, so nothing falls in between).
pub(crate) struct WatchStart {
    pub initial: Vec<Value>,
    pub backlog: Vec<Arc<Change>>,
    pub rx: broadcast::Receiver<Arc<Change>>,
    pub rv: u64,
}

pub(crate) struct History {
    entries: VecDeque<Arc<Change>>,
    /// Every change with a resourceVersion above this one is in `entries`.
    compacted: u64,
    tx: broadcast::Sender<Arc<Change>>,
}

impl History {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(8192);
        Self {
            entries: VecDeque::new(),
            compacted: 0,
            tx,
        }
    }

    pub(crate) fn push(&mut self, change: Arc<Change>) {
        if self.entries.len() >= HISTORY_LIMIT
            && let Some(old) = self.entries.pop_front()
        {
            self.compacted = old.rv;
        }
        self.entries.push_back(change.clone());
        let _ = self.tx.send(change);
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Drops everything up to `rv`.
    pub(crate) fn compact(&mut self, rv: u64) {
        self.entries.clear();
        self.compacted = rv;
    }

    /// Changes of one bucket strictly after `rv`, or `None` when `rv` is compacted away.
    pub(crate) fn since(&self, rv: u64, storage: &str) -> Option<Vec<Arc<Change>>> {
        if rv < self.compacted {
            return None;
        }
        Some(
            self.entries
                .iter()
                .filter(|c| c.rv > rv && c.storage == storage)
                .cloned()
                .collect(),
        )
    }
}
