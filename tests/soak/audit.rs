//! The operator's requests, from the API server's audit log (every ServiceAccount outside
//! kube-system at Metadata level, as `scripts/real-cluster.sh` configures it): what each
//! replica asked, how often it was throttled, and the writes that the guarantees are about:
//! a replica that writes while another holds the lease, and a pod deleted twice on one
//! config version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

use crate::clock::Clock;
use crate::history::History;
use crate::replicas::LEASE_NAME;
use crate::violations::Violations;

/// Prefix of the replicas' user names; the rest is the replica's identity.
const REPLICA_USER: &str = "system:serviceaccount:swarm-system:";

/// Seconds a deposed leader's write may trail its lease (in flight at the handover), and a
/// new leader's may precede the soak's view of its takeover.
const SLACK_BEFORE: f64 = 3.0;
const SLACK_AFTER: f64 = 1.0;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    #[serde(default)]
    stage_timestamp: String,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

/// A successful write by a replica.
#[derive(Clone, Debug)]
struct Write {
    at: f64,
    replica: String,
    verb: String,
    what: String,
}

/// What the audit log says about the replicas.
#[derive(Debug, Default)]
pub struct Audit {
    /// Requests by verb.
    pub by_verb: BTreeMap<String, u64>,
    /// Requests answered 429.
    pub throttled: u64,
    /// Requests that repeat one answered 429 or 5xx (same verb and URI) within 30 s.
    pub retries: u64,
    /// Requests answered 5xx.
    pub server_errors: u64,
    /// Requests RBAC refused.
    pub forbidden: u64,
    /// First and last request, seconds since the start.
    pub span: Option<(f64, f64)>,
}

/// Reads the whole audit log (`path`), counts the replicas' requests, and records the
/// violations its writes show against `history`.
pub fn analyse(
    path: &Path,
    clock: &Clock,
    history: &History,
    pools: &BTreeMap<String, String>,
    violations: &Violations,
) -> Audit {
    let mut audit = Audit::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return audit;
    };
    let mut writes = Vec::new();
    let mut lease_writes = Vec::new();
    let mut failed_at: BTreeMap<(String, String), f64> = BTreeMap::new();
    for event in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
    {
        let Some(replica) = event.user.username.strip_prefix(REPLICA_USER) else {
            continue;
        };
        let Some(at) = clock.at(&event.stage_timestamp) else {
            continue;
        };
        if at < 0.0 {
            continue;
        }
        let code = event.response_status.as_ref().map_or(0, |s| s.code);
        *audit.by_verb.entry(event.verb.clone()).or_default() += 1;
        audit.span = Some(audit.span.map_or((at, at), |(a, b)| (a.min(at), b.max(at))));
        let key = (event.verb.clone(), event.request_uri.clone());
        if failed_at.get(&key).is_some_and(|t| at - t <= 30.0) {
            audit.retries += 1;
        }
        match code {
            429 => audit.throttled += 1,
            403 => audit.forbidden += 1,
            500.. => audit.server_errors += 1,
            _ => {}
        }
        if code == 429 || code >= 500 {
            failed_at.insert(key, at);
        } else {
            failed_at.remove(&key);
        }
        let object = event.object_ref.unwrap_or_default();
        let write = matches!(
            event.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        // A replica's accepted write of the Lease (its acquisition or a renewal, fenced by the
        // Lease's resourceVersion) shows that it held the Lease then, even where the soak's own
        // watch of the Lease missed a whole tenure while reconnecting.
        if write
            && (200..300).contains(&code)
            && object.resource == "leases"
            && object.name == LEASE_NAME
            && event.verb != "delete"
        {
            lease_writes.push((at, replica.to_owned()));
        }
        if write && (200..300).contains(&code) && object.resource != "leases" {
            let sub = if object.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", object.subresource)
            };
            writes.push(Write {
                at,
                replica: replica.to_owned(),
                verb: event.verb.clone(),
                what: format!("{}{sub} {}", object.resource, object.name),
            });
        }
    }
    history.record_lease_writes(&lease_writes);
    check_leader_only(&writes, history, violations);
    check_deletes(&writes, history, pools, violations);
    audit
}

/// A successful write by a replica that did not hold the lease around that time.
fn check_leader_only(writes: &[Write], history: &History, violations: &Violations) {
    for write in writes {
        if !history.held_between(
            &write.replica,
            write.at - SLACK_BEFORE,
            write.at + SLACK_AFTER,
        ) {
            violations.add(
                &format!("non-leader-{}-{:.1}", write.replica, write.at),
                write.at,
                format!(
                    "replica {} wrote ({} {}) while it did not hold the lease ({})",
                    write.replica,
                    write.verb,
                    write.what,
                    history.describe_holder_at(write.at)
                ),
            );
        }
    }
}

/// Two successful deletes of one pod name while its pool's config version stayed the same.
/// `pools` maps a workload name (its pods' name prefix) to its pool's ConfigMap.
fn check_deletes(
    writes: &[Write],
    history: &History,
    pools: &BTreeMap<String, String>,
    violations: &Violations,
) {
    let mut seen: BTreeSet<(String, u64)> = BTreeSet::new();
    for write in writes.iter().filter(|w| w.verb == "delete") {
        let Some(pod) = write.what.strip_prefix("pods ") else {
            continue;
        };
        let Some(config_map) = pools
            .iter()
            .filter(|(workload, _)| pod.starts_with(&format!("{workload}-")))
            .max_by_key(|(workload, _)| workload.len())
            .map(|(_, cm)| cm)
        else {
            continue;
        };
        let Some(version) = history.version_at(config_map, write.at) else {
            continue;
        };
        if !seen.insert((pod.to_owned(), version)) {
            violations.add(
                &format!("deleted-twice-{pod}-{version}"),
                write.at,
                format!(
                    "pod {pod} deleted again by replica {} on config version {version} of {config_map}",
                    write.replica
                ),
            );
        }
    }
}
