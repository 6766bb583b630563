//! Injecting the faults of the plan, one at a time, and the log of what was injected when:
//! the status checks read it to pause their clocks while a fault is on, and to measure how
//! long the pools take to settle once it is over.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use crate::Soak;
use crate::pools::NAMESPACE;
use crate::replicas::Replica;
use crate::schedule::{Fault, Target};

/// One injected fault.
#[derive(Clone, Debug)]
pub struct Record {
    pub kind: &'static str,
    pub start: f64,
    pub end: f64,
    pub detail: String,
    /// Why injecting or undoing it failed, if it did.
    pub error: Option<String>,
    /// Seconds from its end until every pool was settled again (`None`: not yet, or never).
    pub settled_after: Option<f64>,
}

#[derive(Default)]
struct Inner {
    records: Vec<Record>,
    active: Option<&'static str>,
}

/// What was injected, and what is on now.
#[derive(Default)]
pub struct FaultLog(Mutex<Inner>);

impl FaultLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a fault is being injected right now.
    pub fn active(&self) -> bool {
        self.lock().active.is_some()
    }

    /// Every fault so far.
    pub fn records(&self) -> Vec<Record> {
        self.lock().records.clone()
    }

    /// Every pool was settled at `at`: the faults over by then and not yet settled get their
    /// time to settle.
    pub fn all_settled(&self, at: f64) {
        for record in &mut self.lock().records {
            if record.settled_after.is_none() && record.end <= at {
                record.settled_after = Some(at - record.end);
            }
        }
    }

    /// Whether `at` falls within a fault or within `grace` seconds after one.
    pub fn near_fault(&self, at: f64, grace: f64) -> bool {
        self.lock()
            .records
            .iter()
            .any(|r| r.start - 1.0 <= at && at <= r.end + grace)
    }

    /// Faults injected by kind.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for record in &self.lock().records {
            *counts.entry(record.kind).or_default() += 1;
        }
        counts
    }
}

/// Injects `fault`, waits out its duration, undoes it, and logs it.
pub async fn inject(soak: &Soak, fault: &Fault) {
    let kind = fault.kind();
    let start = soak.clock.now();
    soak.faults.lock().active = Some(kind);
    let (detail, error) = match run(soak, fault).await {
        Ok(detail) => (detail, None),
        Err(e) => (String::new(), Some(e)),
    };
    let end = soak.clock.now();
    eprintln!(
        "soak: t={start:.1}s..{end:.1}s fault {kind} {detail}{}",
        error
            .as_deref()
            .map(|e| format!(" FAILED: {e}"))
            .unwrap_or_default()
    );
    let mut log = soak.faults.lock();
    log.active = None;
    log.records.push(Record {
        kind,
        start,
        end,
        detail,
        error,
        settled_after: None,
    });
}

/// Injects `fault` and undoes it once it has lasted; what was done, in a few words.
async fn run(soak: &Soak, fault: &Fault) -> Result<String, String> {
    match fault {
        Fault::ApiserverRestart { down } => restart(soak, "kube-apiserver", *down).await,
        Fault::EtcdRestart { down } => restart(soak, "etcd", *down).await,
        Fault::EtcdFreeze { frozen } => {
            soak.cluster.script("signal", &["etcd", "STOP"]).await?;
            tokio::time::sleep(*frozen).await;
            soak.cluster.script("signal", &["etcd", "CONT"]).await?;
            Ok(format!("frozen {} s", frozen.as_secs()))
        }
        Fault::ApfReject { shares, lasts } => {
            let accounts: Vec<String> = soak.replicas.iter().map(|r| r.name.clone()).collect();
            soak.cluster
                .apply("apf.yaml", &apf_manifests(&accounts, *shares))
                .await?;
            tokio::time::sleep(*lasts).await;
            remove_apf(soak).await?;
            Ok(format!("{shares} shares for {} s", lasts.as_secs()))
        }
        Fault::Latency {
            target,
            millis,
            lasts,
        } => {
            let replica = resolve(soak, *target)?;
            let attributes = json!({"latency": millis, "jitter": millis / 4});
            toxic(soak, replica, "latency", attributes, *lasts).await?;
            Ok(format!(
                "{} +{millis} ms for {} s",
                replica.name,
                lasts.as_secs()
            ))
        }
        Fault::ResetPeer {
            target,
            after_millis,
            lasts,
        } => {
            let replica = resolve(soak, *target)?;
            let attributes = json!({"timeout": after_millis});
            toxic(soak, replica, "reset_peer", attributes, *lasts).await?;
            Ok(format!(
                "{} reset after {after_millis} ms for {} s",
                replica.name,
                lasts.as_secs()
            ))
        }
        Fault::Blackhole { target, lasts } => {
            let replica = resolve(soak, *target)?;
            toxic(soak, replica, "timeout", json!({"timeout": 0}), *lasts).await?;
            Ok(format!("{} for {} s", replica.name, lasts.as_secs()))
        }
        Fault::LeaderKill => {
            let replica = resolve(soak, Target::Leader)?;
            if !replica.signal("KILL") {
                return Err(format!("{} was not running", replica.name));
            }
            Ok(replica.name.clone())
        }
        Fault::LeaderFreeze { frozen } => freeze_leader(soak, *frozen).await,
        Fault::WorkerDelete { pick } => delete_worker(soak, *pick).await,
    }
}

/// SIGKILLs the control plane's `component`, keeps it down for `down`, starts it again.
async fn restart(soak: &Soak, component: &str, down: Duration) -> Result<String, String> {
    soak.cluster
        .script("restart", &[component, &down.as_secs().to_string()])
        .await?;
    Ok(format!("down {} s", down.as_secs()))
}

/// SIGSTOPs the leader for `frozen`, then SIGCONTs it.
async fn freeze_leader(soak: &Soak, frozen: Duration) -> Result<String, String> {
    let replica = resolve(soak, Target::Leader)?;
    if !replica.signal("STOP") {
        return Err(format!("{} was not running", replica.name));
    }
    tokio::time::sleep(frozen).await;
    replica.signal("CONT");
    Ok(format!("{} for {} s", replica.name, frozen.as_secs()))
}

/// Deletes the `pick`th (modulo their number) of the live worker pods; its name.
async fn delete_worker(soak: &Soak, pick: u64) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(soak.cluster.client.clone(), NAMESPACE);
    let live: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list pods: {e}"))?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    if live.is_empty() {
        return Err("no worker pod".into());
    }
    let name = &live[pick as usize % live.len()];
    pods.delete(name, &DeleteParams::default())
        .await
        .map_err(|e| format!("delete pod {name}: {e}"))?;
    Ok(name.clone())
}

/// The replica a per-replica fault hits: the lease holder, or another one.
fn resolve(soak: &Soak, target: Target) -> Result<&Replica, String> {
    let holder = soak.history.holder();
    let found = soak.replicas.iter().find(|r| {
        let leads = holder.as_deref() == Some(r.name.as_str());
        (target == Target::Leader) == leads
    });
    found.ok_or_else(|| format!("no {target:?} replica (lease holder {holder:?})"))
}

async fn toxic(
    soak: &Soak,
    replica: &Replica,
    kind: &str,
    attributes: serde_json::Value,
    lasts: Duration,
) -> Result<(), String> {
    soak.toxiproxy
        .add_toxic(&replica.proxy, kind, kind, attributes)
        .await?;
    tokio::time::sleep(lasts).await;
    soak.toxiproxy.remove_toxic(&replica.proxy, kind).await
}

const APF_NAME: &str = "swarm-soak-reject";

/// A priority level with `shares` nominal concurrency shares, nothing lent or borrowed, that
/// rejects what it cannot serve at once, and a FlowSchema that puts every request of the
/// operator's `accounts` in it.
fn apf_manifests(accounts: &[String], shares: u32) -> Vec<serde_json::Value> {
    let subjects: Vec<serde_json::Value> = accounts
        .iter()
        .map(|name| {
            json!({"kind": "ServiceAccount",
                   "serviceAccount": {"name": name, "namespace": crate::replicas::LEASE_NAMESPACE}})
        })
        .collect();
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": APF_NAME},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            }},
        }),
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": APF_NAME},
            "spec": {
                "priorityLevelConfiguration": {"name": APF_NAME},
                "matchingPrecedence": 500,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": subjects,
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                       "clusterScope": true, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }],
            },
        }),
    ]
}

/// Deletes the FlowSchema and priority level, if there.
pub async fn remove_apf(soak: &Soak) -> Result<(), String> {
    soak.cluster
        .kubectl_ok(&[
            "delete",
            "--ignore-not-found",
            &format!("flowschema.flowcontrol.apiserver.k8s.io/{APF_NAME}"),
            &format!("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/{APF_NAME}"),
        ])
        .await
        .map(drop)
}

/// Undoes whatever a fault may have left behind (the soak's end, or after an error).
pub async fn clear_all(soak: &Soak) -> Vec<String> {
    let mut errors = Vec::new();
    for replica in &soak.replicas {
        replica.signal("CONT");
    }
    let _ = soak.cluster.script("signal", &["etcd", "CONT"]).await;
    if let Err(e) = soak.toxiproxy.clear().await {
        errors.push(e);
    }
    for _ in 0..10 {
        match remove_apf(soak).await {
            Ok(()) => break,
            Err(e) => {
                errors.push(e);
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    }
    errors
}
