//! The kubelets' node Leases (`kube-node-lease/<node>`), as far as a pool's membership needs
//! them: when each node's kubelet last renewed. A kubelet renews every 10 s; a node whose
//! Lease has gone unrenewed for [`NODE_SILENCE`] is cut off or lost, and its workers' jobs move
//! before the node controller would mark it NotReady (40 to 50 s).
//!
//! Silence is judged against the other nodes' renewals as well as against the clock: a view
//! that is behind as a whole (the operator's watch lagging, or an API server too loaded to take
//! the kubelets' renewals in time) shows every node silent at once, and taking every worker out
//! for it would move every job of every pool. A node is silent only once another node renewed a
//! kubelet's period ([`RENEW_PERIOD`]) or more after it: in a view behind as a whole every node
//! renewed within one period of the freshest, while a lost node falls that far behind the others
//! by the time the clock says it is silent, so the rule delays no failover. As the node
//! lifecycle controller stops evicting when every node is unhealthy, no node is silent while
//! none renews.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a node's Lease may go unrenewed before its workers count as gone: two of the
/// kubelet's renewals.
pub const NODE_SILENCE: SignedDuration = SignedDuration::from_secs(20);

/// How often a kubelet renews its node's Lease.
pub const RENEW_PERIOD: SignedDuration = SignedDuration::from_secs(10);

/// How soon a node that the clock shows silent, but the other nodes' renewals not yet, is
/// looked at again.
const RECHECK: SignedDuration = SignedDuration::from_secs(2);

/// When each node's kubelet last renewed its Lease, by node name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLeases {
    renewed: BTreeMap<String, Timestamp>,
    /// The latest renewal of any node.
    freshest: Option<Timestamp>,
}

impl NodeLeases {
    /// The renewals of `(node, renewTime)` pairs.
    pub fn new(renewed: impl IntoIterator<Item = (String, Timestamp)>) -> Self {
        let renewed: BTreeMap<String, Timestamp> = renewed.into_iter().collect();
        let freshest = renewed.values().max().copied();
        Self { renewed, freshest }
    }

    /// Since when `node`'s Lease has been silent at `now`: unrenewed for [`NODE_SILENCE`] or
    /// longer by the clock, and [`RENEW_PERIOD`] or more behind another node's latest renewal.
    /// A node without a Lease (or whose Leases this operator may not read) is never silent.
    pub fn silent_since(&self, node: &str, now: Timestamp) -> Option<Timestamp> {
        let renewed = *self.renewed.get(node)?;
        let freshest = self.freshest.unwrap_or(renewed);
        let by_clock = now.duration_since(renewed) >= NODE_SILENCE;
        let behind_others = freshest.duration_since(renewed) >= RENEW_PERIOD;
        (by_clock && behind_others).then_some(renewed)
    }

    /// How long until `node`'s Lease may turn silent at `now` unless renewed: by the clock, and
    /// once the clock says so, as soon as another node's renewal could show it behind.
    pub fn silent_in(&self, node: &str, now: Timestamp) -> Option<SignedDuration> {
        let renewed = *self.renewed.get(node)?;
        let by_clock = NODE_SILENCE - now.duration_since(renewed);
        if by_clock.is_positive() {
            return Some(by_clock);
        }
        let freshest = self.freshest.unwrap_or(renewed);
        let behind_others = RENEW_PERIOD - freshest.duration_since(renewed);
        behind_others
            .is_positive()
            .then(|| behind_others.max(RECHECK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_000 + s).unwrap()
    }

    #[test]
    fn a_node_is_silent_from_twenty_seconds_after_its_last_renewal() {
        let leases = NodeLeases::new([("n".to_owned(), t(0)), ("m".to_owned(), t(20))]);
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

    #[test]
    fn no_node_is_silent_while_none_is_renewed_as_when_the_view_is_behind_as_a_whole() {
        // Renewed 9 s apart, then nothing for a minute: the view is behind, not every kubelet.
        let leases = NodeLeases::new([("n".to_owned(), t(0)), ("m".to_owned(), t(9))]);
        assert_eq!(leases.silent_since("n", t(60)), None);
        assert_eq!(leases.silent_since("m", t(60)), None);
        assert_eq!(
            leases.silent_in("n", t(60)),
            Some(RECHECK),
            "looked at again soon: another renewal could show it behind"
        );
        let one_left = NodeLeases::new([("n".to_owned(), t(0))]);
        assert_eq!(one_left.silent_since("n", t(600)), None, "a single node");
        assert_eq!(one_left.silent_in("n", t(600)), Some(RENEW_PERIOD));
        // Another node renewed a period after it: silent as soon as the clock says so.
        let renewing = NodeLeases::new([("n".to_owned(), t(0)), ("m".to_owned(), t(10))]);
        assert_eq!(renewing.silent_since("n", t(19)), None);
        assert_eq!(renewing.silent_since("n", t(20)), Some(t(0)));
    }
}
