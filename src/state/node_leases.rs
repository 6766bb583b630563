//! The kubelets' node Leases (`kube-node-lease/<node>`), as far as a pool's membership needs
//! them: when each node's kubelet last renewed. A kubelet renews every 10 s; a node whose
//! Lease has gone unrenewed for [`NODE_SILENCE`] is cut off or lost, and its workers' jobs move
//! before the node controller would mark it NotReady (40 to 50 s).

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a node's Lease may go unrenewed before its workers count as gone: two of the
/// kubelet's renewals.
pub const NODE_SILENCE: SignedDuration = SignedDuration::from_secs(20);

/// When each node's kubelet last renewed its Lease, by node name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLeases {
    renewed: BTreeMap<String, Timestamp>,
}

impl NodeLeases {
    /// The renewals of `(node, renewTime)` pairs.
    pub fn new(renewed: impl IntoIterator<Item = (String, Timestamp)>) -> Self {
        Self {
            renewed: renewed.into_iter().collect(),
        }
    }

    /// Since when `node`'s Lease has been silent at `now`, if for [`NODE_SILENCE`] or longer.
    /// A node without a Lease (or whose Leases this operator may not read) is never silent.
    pub fn silent_since(&self, node: &str, now: Timestamp) -> Option<Timestamp> {
        let renewed = *self.renewed.get(node)?;
        (now.duration_since(renewed) >= NODE_SILENCE).then_some(renewed)
    }

    /// How long until `node`'s Lease turns silent at `now` unless renewed.
    pub fn silent_in(&self, node: &str, now: Timestamp) -> Option<SignedDuration> {
        let renewed = *self.renewed.get(node)?;
        let left = NODE_SILENCE - now.duration_since(renewed);
        left.is_positive().then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_silent_from_twenty_seconds_after_its_last_renewal() {
        let t = |s: i64| Timestamp::from_second(1_000 + s).unwrap();
        let leases = NodeLeases::new([("n".to_owned(), t(0))]);
        assert_eq!(leases.silent_since("n", t(19)), None);
        assert_eq!(
            leases.silent_in("n", t(19)),
            Some(SignedDuration::from_secs(1))
        );
        assert_eq!(leases.silent_since("n", t(20)), Some(t(0)));
        assert_eq!(leases.silent_in("n", t(20)), None);
        assert_eq!(
            leases.silent_since("other", t(100)),
            None,
            "no Lease: unknown"
        );
    }
}
