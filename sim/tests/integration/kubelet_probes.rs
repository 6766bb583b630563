//! Readiness probes of the kubelet stand-in: a pod with an `httpGet` readinessProbe is Ready
//! while the endpoint named by its `kube-sim.swarm.io/probe-address` annotation answers, and
//! its status is written only when that changes. Each test serves the endpoint itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use kube_sim::controllers::prober::PROBE_ADDRESS_ANNOTATION;
use kube_sim::{Sim, SimConfig};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Generous upper bound for anything to happen; never a performance goal.
const PATIENCE: Duration = Duration::from_secs(20);
const PODS_PATH: &str = "/api/v1/namespaces/default/pods";

/// An HTTP endpoint answering every request with the status code it is set to.
struct Endpoint {
    address: String,
    code: Arc<AtomicU16>,
    /// Requests answered, and those answered with 503.
    answered: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    /// The request lines it received.
    requests: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    async fn serve() -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address").to_string();
        let code = Arc::new(AtomicU16::new(200));
        let answered = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, a, f, r) = (
            code.clone(),
            answered.clone(),
            failed.clone(),
            requests.clone(),
        );
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut chunk = [0u8; 512];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                r.lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or("").to_string());
                let code = c.load(Ordering::SeqCst);
                let response =
                    format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                // Counted before the answer goes out, so a status it causes never precedes it.
                a.fetch_add(1, Ordering::SeqCst);
                if code == 503 {
                    f.fetch_add(1, Ordering::SeqCst);
                }
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        Endpoint {
            address,
            code,
            answered,
            failed,
            requests,
            task,
        }
    }

    fn answer(&self, code: u16) {
        self.code.store(code, Ordering::SeqCst);
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Harness {
    sim: Sim,
    http: Client,
}

impl Harness {
    /// Pods start after 10 ms; probe periods are real seconds whatever the scale.
    async fn start() -> Harness {
        let config = SimConfig {
            time_scale: 0.01,
            pod_ready_delay: Duration::from_secs(1),
            ..SimConfig::default()
        };
        let sim = Sim::start(config).await.expect("simulation starts");
        Harness {
            sim,
            http: Client::new(),
        }
    }

    async fn create_pod(&self, pod: Value) {
        let resp = self
            .http
            .post(format!("{}{PODS_PATH}", self.sim.url()))
            .json(&pod)
            .send()
            .await
            .expect("POST is answered");
        assert_eq!(resp.status(), StatusCode::CREATED);
    }

    async fn annotate(&self, name: &str, address: &str) {
        let patch = json!({"metadata": {"annotations": {PROBE_ADDRESS_ANNOTATION: address}}});
        let resp = self
            .http
            .patch(format!("{}{PODS_PATH}/{name}", self.sim.url()))
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .expect("PATCH is answered");
        assert_eq!(resp.status(), StatusCode::OK);
    }

    async fn pod(&self, name: &str) -> Value {
        let resp = self
            .http
            .get(format!("{}{PODS_PATH}/{name}", self.sim.url()))
            .send()
            .await
            .expect("GET is answered");
        assert_eq!(resp.status(), StatusCode::OK, "pod {name} exists");
        resp.json().await.expect("a pod is JSON")
    }

    /// Waits until pod `name` satisfies `check`, panicking with `what` after [`PATIENCE`].
    async fn wait_pod(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let pod = self.pod(name).await;
            if check(&pod) {
                return pod;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {pod}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A pod whose one container `w` has `probe` as readinessProbe, if any.
fn pod(name: &str, probe: Option<Value>, address: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "w", "image": "busybox:1.36"}]}
    });
    if let Some(probe) = probe {
        pod["spec"]["containers"][0]["readinessProbe"] = probe;
    }
    if let Some(address) = address {
        pod["metadata"]["annotations"] = json!({PROBE_ADDRESS_ANNOTATION: address});
    }
    pod
}

/// `/readyz` every second, unready after `failures` failures in a row.
fn readyz_probe(failures: u32) -> Value {
    json!({"httpGet": {"path": "/readyz", "port": 8081}, "periodSeconds": 1,
           "timeoutSeconds": 1, "failureThreshold": failures})
}

fn condition<'a>(pod: &'a Value, type_: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

fn ready(pod: &Value) -> bool {
    condition(pod, "Ready")["status"] == "True"
}

/// Ready, ContainersReady and the container's `ready` all say `expected`.
fn assert_readiness(pod: &Value, expected: bool) {
    let status = if expected { "True" } else { "False" };
    assert_eq!(condition(pod, "Ready")["status"], status, "{pod}");
    assert_eq!(condition(pod, "ContainersReady")["status"], status, "{pod}");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["ready"], expected,
        "{pod}"
    );
    assert_eq!(
        pod["status"]["containerStatuses"][0]["started"], true,
        "{pod}"
    );
    if !expected {
        assert_eq!(condition(pod, "Ready")["reason"], "ContainersNotReady");
        assert_eq!(
            condition(pod, "Ready")["message"],
            "containers with unready status: [w]"
        );
    }
}

fn resource_version(pod: &Value) -> String {
    pod["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn readiness_follows_the_endpoint_once_the_probe_address_is_set() {
    let h = Harness::start().await;
    let endpoint = Endpoint::serve().await;
    h.create_pod(pod("probed", Some(readyz_probe(2)), None))
        .await;
    let started = h.wait_pod("probed", "the pod to run", running).await;
    assert_readiness(&started, false);

    h.annotate("probed", &endpoint.address).await;
    let up = h
        .wait_pod("probed", "Ready once the endpoint answers", ready)
        .await;
    assert_readiness(&up, true);
    let request = endpoint.requests.lock().unwrap()[0].clone();
    assert_eq!(request, "GET /readyz HTTP/1.1");

    endpoint.answer(503);
    let down = h
        .wait_pod("probed", "NotReady after 503s", |p| !ready(p))
        .await;
    assert_readiness(&down, false);
    assert!(
        endpoint.failed.load(Ordering::SeqCst) >= 2,
        "NotReady only after failureThreshold (2) failures in a row"
    );
    assert!(
        condition(&down, "Ready")["lastTransitionTime"].is_string(),
        "{down}"
    );

    endpoint.answer(200);
    let back = h.wait_pod("probed", "Ready again", ready).await;
    assert_readiness(&back, true);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn the_kubelet_writes_a_probed_pods_status_only_when_its_readiness_changes() {
    let h = Harness::start().await;
    let endpoint = Endpoint::serve().await;
    let probed = pod("steady", Some(readyz_probe(1)), Some(&endpoint.address));
    h.create_pod(probed).await;
    let up = h.wait_pod("steady", "Ready", ready).await;
    let probes_before = endpoint.answered();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        endpoint.answered() >= probes_before + 3,
        "the kubelet probes every period"
    );
    let later = h.pod("steady").await;
    assert_eq!(
        resource_version(&later),
        resource_version(&up),
        "a probe that changes nothing writes nothing"
    );
    assert_eq!(
        condition(&later, "Ready")["lastTransitionTime"],
        condition(&up, "Ready")["lastTransitionTime"]
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn a_probed_pod_stays_unready_without_a_probe_address_or_a_listener() {
    let h = Harness::start().await;
    // A port that was free a moment ago: nothing listens there now.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    h.create_pod(pod("no-address", Some(readyz_probe(1)), None))
        .await;
    h.create_pod(pod("refused", Some(readyz_probe(1)), Some(&closed)))
        .await;
    let mut started = Vec::new();
    for name in ["no-address", "refused"] {
        started.push(h.wait_pod(name, "the pod to run", running).await);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for before in started {
        let name = before["metadata"]["name"].as_str().unwrap();
        let after = h.pod(name).await;
        assert_readiness(&after, false);
        assert_eq!(
            resource_version(&after),
            resource_version(&before),
            "{name}: still unready, nothing written"
        );
    }
    h.sim.shutdown().await;
}

#[tokio::test]
async fn a_pod_without_an_http_readiness_probe_is_ready_when_it_runs() {
    let h = Harness::start().await;
    h.create_pod(pod("plain", None, None)).await;
    let exec = json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
    h.create_pod(pod("exec", Some(exec), None)).await;
    for name in ["plain", "exec"] {
        let started = h.wait_pod(name, "the pod to run", running).await;
        assert_readiness(&started, true);
        assert_eq!(
            condition(&started, "Ready")["lastTransitionTime"],
            started["status"]["startTime"],
            "Ready from the start"
        );
    }
    h.sim.shutdown().await;
}
