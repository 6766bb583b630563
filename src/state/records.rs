//! The rollout records as the ConfigMap's annotations hold them: the stale workers
//! ([`PENDING_REFRESH_ANNOTATION`]) and the handoff's holders ([`HANDOFF_ANNOTATION`]), each a
//! compact JSON object with sorted keys, and the size rule they are checked against before a
//! write.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use swarm_protocol::names::{
    AWAITING_ACK_ANNOTATION, HANDOFF_ANNOTATION, PENDING_REFRESH_ANNOTATION,
};

/// The stale-worker bookkeeping: pod name to the uid of the pod instance that must be replaced,
/// `""` while unresolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingRefresh {
    pub(crate) entries: BTreeMap<String, String>,
}

/// One pod instance that may still run jobs revoked from its pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Uid of the instance, `""` until resolved against a live pod list.
    pub uid: String,
    /// When jobs were first revoked from this pod (the start of their time unheld).
    pub revoked_at: Timestamp,
    /// The instance is gone: its jobs are free, and wait only for the rest of their worker's
    /// grant.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// The config version that last revoked jobs from it (`None` until that version is
    /// known): under `Acknowledge`, an acknowledgement of this version or a later one by the
    /// recorded instance frees its jobs as its end would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// The holders of jobs in transit, by pod name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    pub(crate) entries: BTreeMap<String, Holder>,
}

/// One worker waited for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Awaiting {
    /// Uid of the pod instance that must acknowledge.
    pub uid: String,
    /// Since when: the write that changed its jobs, the start of this instance or the pool's
    /// last acknowledgement, whichever is latest (the ack timeout runs from it).
    pub since: Timestamp,
}

/// The workers that owe an acknowledgement, by pod name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwaitingAcks {
    pub(crate) entries: BTreeMap<String, Awaiting>,
}

/// Uids are 36 characters; a record sized with it fits once it is resolved.
const UID_LEN: usize = 36;

/// The stale-worker annotation could not be read.
#[derive(Debug, thiserror::Error)]
#[error("annotation {PENDING_REFRESH_ANNOTATION} is not a JSON object of strings: {0}")]
pub struct PendingRefreshParseError(#[source] serde_json::Error);

/// The handoff annotation could not be read.
#[derive(Debug, thiserror::Error)]
#[error("annotation {HANDOFF_ANNOTATION} is not a JSON object of holders: {0}")]
pub struct HoldersParseError(#[source] serde_json::Error);

/// The awaiting-ack annotation could not be read.
#[derive(Debug, thiserror::Error)]
#[error("annotation {AWAITING_ACK_ANNOTATION} is not a JSON object of workers waited for: {0}")]
pub struct AwaitingAcksParseError(#[source] serde_json::Error);

/// Reads a JSON object annotation; a missing or blank one is empty.
fn parse_object<T: serde::de::DeserializeOwned + Default>(
    annotation: Option<&str>,
) -> Result<T, serde_json::Error> {
    match annotation {
        Some(text) if !text.trim().is_empty() => serde_json::from_str(text),
        _ => Ok(T::default()),
    }
}

impl PendingRefresh {
    /// A set with these entries: pod name to uid (`""` while unresolved).
    pub(crate) fn from_entries(entries: BTreeMap<String, String>) -> Self {
        Self { entries }
    }

    /// The entries: pod name to uid (`""` while unresolved).
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.entries
    }

    /// Reads the annotation value; a missing annotation is an empty set.
    pub fn parse(annotation: Option<&str>) -> Result<Self, PendingRefreshParseError> {
        parse_object(annotation)
            .map(Self::from_entries)
            .map_err(PendingRefreshParseError)
    }

    /// The annotation value: compact JSON, keys sorted (`{}` when empty).
    pub fn render(&self) -> String {
        serde_json::to_string(self.entries()).expect("a map of strings always serializes")
    }

    /// Length of the annotation once every entry is resolved, so a size check before the first
    /// write holds after resolution too.
    pub fn resolved_size_bound(&self) -> usize {
        // "name":"uid",
        let entries: usize = self
            .entries()
            .iter()
            .map(|(pod, uid)| pod.len() + uid.len().max(UID_LEN) + 6)
            .sum();
        entries + 2
    }
}

impl Holders {
    /// A set with these entries: pod name to holder.
    pub(crate) fn from_entries(entries: BTreeMap<String, Holder>) -> Self {
        Self { entries }
    }

    /// The entries: pod name to holder.
    pub fn entries(&self) -> &BTreeMap<String, Holder> {
        &self.entries
    }

    /// Reads the annotation value; a missing annotation is an empty set.
    pub fn parse(annotation: Option<&str>) -> Result<Self, HoldersParseError> {
        parse_object(annotation)
            .map(Self::from_entries)
            .map_err(HoldersParseError)
    }

    /// The annotation value: compact JSON, keys sorted (`{}` when empty).
    pub fn render(&self) -> String {
        serde_json::to_string(self.entries()).expect("holders always serialize")
    }

    /// Length of the annotation once every holder is resolved, for the size check.
    pub fn resolved_size_bound(&self) -> usize {
        // "name":{"uid":"…","revokedAt":"2026-01-01T00:00:00.000000000Z","gone":true,
        // "version":18446744073709551615},
        const PER_ENTRY: usize = 100;
        self.entries()
            .iter()
            .map(|(pod, h)| pod.len() + h.uid.len().max(UID_LEN) + PER_ENTRY)
            .sum::<usize>()
            + 2
    }
}

impl AwaitingAcks {
    /// Records with these entries.
    pub(crate) fn from_entries(entries: BTreeMap<String, Awaiting>) -> Self {
        Self { entries }
    }

    /// The entries: pod name to the instance waited for.
    pub fn entries(&self) -> &BTreeMap<String, Awaiting> {
        &self.entries
    }

    /// True when no worker owes an acknowledgement.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads the annotation value; a missing annotation is an empty set.
    pub fn parse(annotation: Option<&str>) -> Result<Self, AwaitingAcksParseError> {
        parse_object(annotation)
            .map(Self::from_entries)
            .map_err(AwaitingAcksParseError)
    }

    /// The annotation value: compact JSON, keys sorted (`{}` when empty).
    pub fn render(&self) -> String {
        serde_json::to_string(self.entries()).expect("records always serialize")
    }

    /// Length of the annotation once every worker waited for is resolved, for the size check.
    pub fn resolved_size_bound(&self) -> usize {
        // "name":{"uid":"…","since":"2026-01-01T00:00:00.000000000Z"},
        const PER_ENTRY: usize = 60;
        self.entries()
            .iter()
            .map(|(pod, a)| pod.len() + a.uid.len().max(UID_LEN) + PER_ENTRY)
            .sum::<usize>()
            + 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_refresh_round_trips_through_sorted_compact_json() {
        let mut p = PendingRefresh::default();
        p.mark_unresolved(["w-2", "w-10", "w-1"]);
        assert_eq!(p.render(), r#"{"w-1":"","w-10":"","w-2":""}"#);
        assert_eq!(PendingRefresh::parse(Some(&p.render())).unwrap(), p);
        assert_eq!(
            PendingRefresh::parse(None).unwrap(),
            PendingRefresh::default()
        );
        assert!(PendingRefresh::parse(Some("[1]")).is_err());
    }

    #[test]
    fn holders_round_trip_through_sorted_compact_json() {
        let text = r#"{"w-0":{"uid":"","revokedAt":"2026-01-01T00:00:00Z"},"w-1":{"uid":"u1","revokedAt":"2026-01-01T00:00:05Z","gone":true}}"#;
        let h = Holders::parse(Some(text)).unwrap();
        assert_eq!(h.entries().len(), 2);
        assert!(h.entries()["w-1"].gone);
        assert_eq!(h.render(), text);
        assert!(h.render().len() <= h.resolved_size_bound());
        assert_eq!(Holders::parse(Some(" ")).unwrap(), Holders::default());
        assert!(Holders::parse(Some("[")).is_err());
    }

    #[test]
    fn awaiting_acks_round_trip_through_sorted_compact_json() {
        let text = r#"{"w-0":{"uid":"0f8fad5b-d9cb-469f-a165-70867728950e","since":"2026-01-01T00:00:00.123456789Z"}}"#;
        let a = AwaitingAcks::parse(Some(text)).unwrap();
        assert_eq!(a.render(), text);
        assert!(a.render().len() <= a.resolved_size_bound());
        assert!(AwaitingAcks::parse(None).unwrap().is_empty());
        assert!(AwaitingAcks::parse(Some("{")).is_err());
    }
}
