//! The operator's replicas as the cluster shows them: their pods on the real node, the
//! leader-election Lease, their containers in containerd, their logs and what they serve.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::harness::Env;
use crate::harness::poll::eventually_within;
use crate::harness::promtool;
use crate::harness::real_cluster::ctr;
use crate::scenarios::whole_cluster::metrics_auth::{assert_only_the_reader_gets_metrics, scrape};

/// The label selector of the operator's pods (deploy/manager/deployment.yaml).
pub(super) const SELECTOR: &str = "app.kubernetes.io/name=swarm-operator";
/// The leader-election Lease, in the operator's namespace (`--leader-elect-lease-name`'s
/// default; `--leader-elect-namespace` defaults to the pod's own namespace).
pub(super) const LEASE: &str = "swarm-operator";
/// The operator's replicas in every install.
pub(super) const REPLICAS: usize = 2;
/// The real node (scripts/lib/real-node.sh).
const NODE: &str = "real-node";
/// The operator's container in its pod.
const CONTAINER: &str = "manager";
/// The port of /healthz and /readyz, plain HTTP.
const HTTP_PORT: u16 = 8080;
/// The port of /metrics, HTTPS behind the API server's authentication.
const METRICS_PORT: u16 = 8443;

/// The operator's pods in `namespace`, terminating ones included.
pub(super) async fn operator_pods(env: &Env, namespace: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    api.list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("LIST the operator's pods")
        .items
}

/// A pod's name.
pub(super) fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// A pod's uid.
pub(super) fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The state of the pod's operator container.
fn manager(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == CONTAINER)
}

/// The containerd id of the pod's operator container.
pub(super) fn container_id(pod: &Pod) -> String {
    let id = manager(pod)
        .and_then(|c| c.container_id.clone())
        .unwrap_or_else(|| panic!("{} reports no container id", name(pod)));
    id.strip_prefix("containerd://")
        .unwrap_or_else(|| panic!("{} runs no containerd container: {id}", name(pod)))
        .to_owned()
}

/// How often the kubelet restarted the pod's operator container.
pub(super) fn restarts(pod: &Pod) -> i32 {
    manager(pod).map_or(0, |c| c.restart_count)
}

/// Seconds from the kubelet accepting the pod (`status.startTime`) to its Ready condition, as
/// the API server records them (to the second).
pub(super) fn seconds_to_ready(pod: &Pod) -> Option<i64> {
    let status = pod.status.as_ref()?;
    let started = status.start_time.as_ref()?.0.as_second();
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0
        .as_second();
    Some(ready - started)
}

/// Why the pod is not a ready replica on the real node, if it is not.
fn not_ready(pod: &Pod) -> Option<String> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
    if pod.metadata.deletion_timestamp.is_some() {
        Some(format!("{} terminating", name(pod)))
    } else if node != Some(NODE) {
        Some(format!("{} on node {node:?}", name(pod)))
    } else if !ready {
        Some(format!("{} not Ready (phase {phase:?})", name(pod)))
    } else {
        None
    }
}

/// Waits until the operator's pods are exactly [`REPLICAS`], each Ready on the real node and
/// none terminating, and `accept` takes them; returns them.
pub(super) async fn wait_ready<F>(env: &Env, namespace: &str, what: &str, accept: F) -> Vec<Pod>
where
    F: Fn(&[Pod]) -> Result<(), String>,
{
    let accept = &accept;
    eventually_within(what, Duration::from_secs(180), || async move {
        let pods = operator_pods(env, namespace).await;
        let names: Vec<String> = pods.iter().map(name).collect();
        if pods.len() != REPLICAS {
            return Err(format!("pods {names:?}"));
        }
        if let Some(why) = pods.iter().find_map(not_ready) {
            return Err(why);
        }
        accept(&pods)?;
        Ok(pods)
    })
    .await
}

/// The Lease's holder, if it exists and has one.
pub(super) async fn holder(env: &Env, namespace: &str) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(env.client.clone(), namespace);
    let lease = api.get_opt(LEASE).await.expect("GET the Lease")?;
    lease
        .spec?
        .holder_identity
        .filter(|holder| !holder.is_empty())
}

/// The pod an identity names: `<pod>_<suffix drawn at each start>`.
pub(super) fn pod_of(identity: &str) -> &str {
    swarm_operator::runtime::leader::identity_pod(identity)
}

/// Waits until `accept` takes the Lease's holder; returns it.
pub(super) async fn wait_holder(
    env: &Env,
    namespace: &str,
    what: &str,
    within: Duration,
    accept: impl Fn(&str) -> bool,
) -> String {
    let accept = &accept;
    eventually_within(what, within, || async move {
        match holder(env, namespace).await {
            Some(holder) if accept(&holder) => Ok(holder),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await
}

/// How long the Lease stays valid after a renewal, as its holder wrote it.
pub(super) async fn lease_duration(env: &Env, namespace: &str) -> Duration {
    let api: Api<Lease> = Api::namespaced(env.client.clone(), namespace);
    let lease = api.get(LEASE).await.expect("GET the Lease");
    let seconds = lease
        .spec
        .and_then(|s| s.lease_duration_seconds)
        .expect("the Lease's leaseDurationSeconds");
    Duration::from_secs(u64::try_from(seconds).expect("a positive lease duration"))
}

/// Waits until the Lease is held by one of `pods` and exactly that pod's log says it leads;
/// returns the holder.
pub(super) async fn wait_one_leader(env: &Env, namespace: &str, pods: &[Pod]) -> String {
    let names: Vec<String> = pods.iter().map(name).collect();
    let names = &names;
    eventually_within(
        "one replica holding the Lease",
        Duration::from_secs(60),
        || async move {
            let holder = holder(env, namespace).await.ok_or("no holder")?;
            if !names.iter().any(|pod| pod == pod_of(&holder)) {
                return Err(format!("holder {holder} is none of {names:?}"));
            }
            let mut leading = Vec::new();
            for pod in names {
                let log = env.kubectl.ok(&["-n", namespace, "logs", pod]).await;
                if log.contains("acquired the lease") {
                    leading.push(pod.clone());
                }
            }
            if leading != [pod_of(&holder)] {
                return Err(format!(
                    "holder {holder}; replicas that say they lead: {leading:?}"
                ));
            }
            Ok(holder)
        },
    )
    .await
}

/// `kubectl logs` of the pod's operator container, which must be JSON lines (deploy/ runs it
/// with `--log-format=json`, for a log collector); returns them parsed.
pub(super) async fn json_log(env: &Env, namespace: &str, pod: &str) -> Vec<Value> {
    let log = env
        .kubectl
        .ok(&["-n", namespace, "logs", pod, "-c", CONTAINER])
        .await;
    let lines: Vec<Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let parsed: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a log line of {pod} is not JSON ({e}): {line}"));
            assert!(
                parsed.is_object(),
                "a log line of {pod} is no object: {line}"
            );
            parsed
        })
        .collect();
    assert!(!lines.is_empty(), "{pod} logged nothing");
    lines
}

/// `GET http://<pod IP>:8080<path>` from this machine, as the kubelet's probes and a
/// Prometheus scraping the pod reach it: the status code and the body.
pub(super) async fn get(pod: &Pod, path: &str) -> (u16, String) {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_else(|| panic!("{} has no IP", name(pod)));
    let url = format!("http://{ip}:{HTTP_PORT}{path}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("build an HTTP client");
    let response = http
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Waits until the pod's `/readyz` answers 200. A standby replica answers 200 at once; one that
/// has just won the lease answers 503 until its caches have synced (a second or so), which the
/// kubelet's 5 s probe may not have seen yet when the leader is first found.
pub(super) async fn wait_readyz(pod: &Pod) {
    eventually_within(
        &format!("/readyz of {} to answer 200", name(pod)),
        Duration::from_secs(30),
        || async {
            match get(pod, "/readyz").await {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status}: {body}")),
            }
        },
    )
    .await;
}

/// `https://<pod IP>:8443/metrics`, as a ServiceMonitor has Prometheus reach it.
fn metrics_url(pod: &Pod) -> String {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_else(|| panic!("{} has no IP", name(pod)));
    format!("https://{ip}:{METRICS_PORT}/metrics")
}

/// Who may read the pod's `/metrics` (see [`assert_only_the_reader_gets_metrics`]), and
/// `/metrics` gone from the probes' port. Returns the reader's token.
pub(super) async fn assert_metrics_need_the_role(env: &Env, namespace: &str, pod: &Pod) -> String {
    let reader = assert_only_the_reader_gets_metrics(env, namespace, &metrics_url(pod)).await;
    let (status, _) = get(pod, "/metrics").await;
    assert_eq!(
        status,
        404,
        "/metrics left the probes' port of {}",
        name(pod)
    );
    reader
}

/// The pod's `/metrics` scraped with `token` as Prometheus scrapes it (HTTPS, bearer token),
/// checked: promtool accepts it, every sample is a series and a number, and the operator's own
/// families are there. Returns the samples by series.
pub(super) async fn metrics(pod: &Pod, token: &str) -> BTreeMap<String, f64> {
    let (status, text) = scrape(&metrics_url(pod), Some(token)).await;
    assert_eq!(status, 200, "/metrics of {}: {text}", name(pod));
    promtool::check_metrics(&text).unwrap_or_else(|why| panic!("{why}\n{text}"));
    let samples: BTreeMap<String, f64> = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("a sample without a value: {line}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|e| panic!("a sample whose value is no number ({e}): {line}"));
            (series.to_owned(), value)
        })
        .collect();
    for family in [
        "swarm_operator_reconciliations_total",
        "swarm_operator_config_writes_total",
        "swarm_operator_pod_refreshes_total",
    ] {
        assert!(
            samples.contains_key(family),
            "/metrics of {} has no {family}:\n{text}",
            name(pod)
        );
    }
    samples
}

/// Asserts that containerd on the real node has each pod's operator container, and that its
/// task (the process) runs.
pub(super) async fn assert_containers_run(cluster: &Path, pods: &[Pod]) {
    let containers = ctr(cluster, &["containers", "ls", "-q"]).await;
    let tasks = ctr(cluster, &["tasks", "ls"]).await;
    for pod in pods {
        let id = container_id(pod);
        assert!(
            containers.lines().any(|line| line.trim() == id),
            "ctr containers ls does not list {} of {}:\n{containers}",
            id,
            name(pod)
        );
        let task = tasks
            .lines()
            .find(|line| line.split_whitespace().next() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("ctr tasks ls has no task {id} of {}:\n{tasks}", name(pod)));
        assert!(task.contains("RUNNING"), "{} of {}: {task}", id, name(pod));
    }
}

/// What [`LeaderWatch`] saw, and when.
#[derive(Clone, Debug)]
pub(super) enum Seen {
    /// A new holder of the Lease.
    Holder(String),
    /// An operator pod began to terminate (its deletionTimestamp is set: SIGTERM is on its way).
    Terminating(String),
}

/// Samples the Lease's holder and the operator's pods every 100 ms in the background, so a
/// scenario can act while it runs and read the handover times afterwards.
pub(super) struct LeaderWatch {
    seen: Arc<Mutex<Vec<(Instant, Seen)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderWatch {
    /// Starts sampling the install in `namespace`.
    pub fn start(env: &Env, namespace: &str) -> LeaderWatch {
        let seen: Arc<Mutex<Vec<(Instant, Seen)>>> = Arc::default();
        let record = seen.clone();
        let leases: Api<Lease> = Api::namespaced(env.client.clone(), namespace);
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
        let task = tokio::spawn(async move {
            let (mut last, mut terminating) = (None, Vec::new());
            loop {
                let holder = leases
                    .get_opt(LEASE)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|l| l.spec?.holder_identity)
                    .filter(|h| !h.is_empty());
                let listed = pods.list(&ListParams::default().labels(SELECTOR)).await;
                let now = Instant::now();
                {
                    let mut record = record.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(holder) = holder.filter(|h| last.as_ref() != Some(h)) {
                        record.push((now, Seen::Holder(holder.clone())));
                        last = Some(holder);
                    }
                    for pod in listed.map(|l| l.items).unwrap_or_default() {
                        let pod_name = name(&pod);
                        if pod.metadata.deletion_timestamp.is_some()
                            && !terminating.contains(&pod_name)
                        {
                            record.push((now, Seen::Terminating(pod_name.clone())));
                            terminating.push(pod_name);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        LeaderWatch { seen, task }
    }

    /// The handovers after `since`: for each new holder, the holder before it, the new one,
    /// and how long the lease went without a live leader: from when the old holder's pod began
    /// to terminate (or from `since`, a fault the cluster does not show, as a SIGKILL) until
    /// the new holder was seen.
    pub fn handovers(&self, since: Instant) -> Vec<(String, String, Duration)> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut holder = seen
            .iter()
            .rev()
            .find_map(|(at, s)| match s {
                Seen::Holder(h) if *at <= since => Some(h.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let mut handovers = Vec::new();
        for (at, s) in seen.iter().filter(|(at, _)| *at > since) {
            let Seen::Holder(next) = s else { continue };
            let began = seen
                .iter()
                .find_map(|(t, s)| match s {
                    Seen::Terminating(pod) if *t > since && pod == pod_of(&holder) => Some(*t),
                    _ => None,
                })
                .unwrap_or(since);
            handovers.push((
                holder.clone(),
                next.clone(),
                at.saturating_duration_since(began),
            ));
            holder = next.clone();
        }
        handovers
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
