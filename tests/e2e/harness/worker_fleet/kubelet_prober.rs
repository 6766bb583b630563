//! The kubelet's readiness prober for pods on kwok's nodes, which run no probes: every
//! [`readiness_probe`](super::readiness_probe) period it GETs each worker's `/readyz` and, when the
//! answer differs from the pod's Ready condition, writes the condition (and ContainersReady) as a
//! kubelet does, only on change. A node kwok no longer plays (lost) has no kubelet: its pods are
//! left as they are.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::State;

/// The probe's period, timeout and failure threshold (1): [`super::readiness_probe`].
const PERIOD: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(2);

/// The annotation by which kwok plays a node, and its value for the nodes it plays.
const KWOK_NODE: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

pub(super) async fn run(pods: Api<Pod>, nodes: Api<Node>, state: Arc<Mutex<State>>) {
    let mut ticker = tokio::time::interval(PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Ok(played) = played_nodes(&nodes).await else {
            continue;
        };
        let probed = state.lock().expect("fleet state").probed();
        for (pod, uid, health) in probed {
            let ready = probe(&health).await;
            let Ok(current) = pods.get(&pod).await else {
                continue;
            };
            let node = current.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if current.metadata.uid.as_deref() != Some(uid.as_str())
                || !node.is_some_and(|node| played.contains(node))
            {
                continue;
            }
            if is_ready(&current) != ready {
                let _ = write_ready(&pods, &pod, ready).await;
            }
        }
    }
}

/// The nodes kwok plays: their kubelet is this prober.
async fn played_nodes(nodes: &Api<Node>) -> kube::Result<BTreeSet<String>> {
    let (key, value) = KWOK_NODE;
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|node| {
            node.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .is_some_and(|v| v == value)
        })
        .filter_map(|node| node.metadata.name)
        .collect())
}

/// Whether `GET /readyz` at `address` answers 2xx or 3xx within the timeout.
async fn probe(address: &str) -> bool {
    let answer = tokio::time::timeout(TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request = format!("GET /readyz HTTP/1.0\r\nHost: {address}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse::<u16>().ok()
    })
    .await;
    matches!(answer, Ok(Some(200..=399)))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

async fn write_ready(pods: &Api<Pod>, pod: &str, ready: bool) -> kube::Result<Pod> {
    let status = if ready { "True" } else { "False" };
    let now = Timestamp::now().to_string();
    let condition =
        |type_: &str| json!({"type": type_, "status": status, "lastTransitionTime": now});
    let patch =
        json!({"status": {"conditions": [condition("Ready"), condition("ContainersReady")]}});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
}
