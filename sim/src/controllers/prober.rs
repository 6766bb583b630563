//! Readiness probes, as a kubelet's prober runs them: one worker per container with an
//! `httpGet` readinessProbe, from the moment the container runs until the pod is gone or
//! finished, writing the pod's status only when the container's readiness flips.
//!
//! A real kubelet probes the pod IP; kube-sim's pods have no network, so the probe goes to the
//! address in the pod annotation [`PROBE_ADDRESS_ANNOTATION`] (a test harness sets it to where
//! the pod's stand-in process listens). Without it the probe fails, as against a pod whose
//! process is not up. Periods and timeouts are not scaled by `SimConfig::time_scale`: they
//! measure real processes answering on real sockets in real time.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::debug;

use super::meta;
use crate::store::Store;

/// The pod annotation naming where its probes go (`IP:port` or `host:port`), in place of the
/// pod IP and the probe's port.
pub const PROBE_ADDRESS_ANNOTATION: &str = "kube-sim.swarm.io/probe-address";
/// What a kubelet sends as `User-Agent`.
const USER_AGENT: &str = "kube-probe/1.36";
/// How soon a status write that failed for another reason than a conflict is retried.
const WRITE_RETRY: Duration = Duration::from_millis(50);
/// How much of a response is read looking for its status line.
const MAX_STATUS_LINE: usize = 1024;

/// An `httpGet` readinessProbe with the API's defaults filled in.
#[derive(Clone, Debug, PartialEq)]
struct HttpProbe {
    path: String,
    headers: Vec<(String, String)>,
    https: bool,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

impl HttpProbe {
    /// The container's readinessProbe, if it is an `httpGet` one.
    fn of(container: &Value) -> Option<HttpProbe> {
        let probe = container.get("readinessProbe")?;
        let get = probe.get("httpGet")?;
        let int = |field: &str, default: u64, min: u64| {
            probe
                .get(field)
                .and_then(Value::as_u64)
                .unwrap_or(default)
                .max(min)
        };
        let headers = get
            .get("httpHeaders")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|h| Some((h.get("name")?.as_str()?, h.get("value")?.as_str()?)))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Some(HttpProbe {
            path: get
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| p.starts_with('/'))
                .unwrap_or("/")
                .to_string(),
            headers,
            https: get.get("scheme").and_then(Value::as_str) == Some("HTTPS"),
            initial_delay: Duration::from_secs(int("initialDelaySeconds", 0, 0)),
            period: Duration::from_secs(int("periodSeconds", 10, 1)),
            timeout: Duration::from_secs(int("timeoutSeconds", 1, 1)),
            success_threshold: u32::try_from(int("successThreshold", 1, 1)).unwrap_or(1),
            failure_threshold: u32::try_from(int("failureThreshold", 3, 1)).unwrap_or(3),
        })
    }
}

/// Whether the kubelet probes the container's readiness; a container it does not probe is
/// ready as soon as it runs.
pub(crate) fn probes_readiness(container: &Value) -> bool {
    HttpProbe::of(container).is_some()
}

/// A container's readiness from its probe results, as the kubelet's worker keeps it: a flip
/// needs `successThreshold` successes or `failureThreshold` failures in a row.
#[derive(Debug)]
struct Readiness {
    ready: bool,
    last: Option<bool>,
    run: u32,
    success_threshold: u32,
    failure_threshold: u32,
}

impl Readiness {
    fn new(ready: bool, probe: &HttpProbe) -> Self {
        Self {
            ready,
            last: None,
            run: 0,
            success_threshold: probe.success_threshold,
            failure_threshold: probe.failure_threshold,
        }
    }

    /// Records one probe result; returns the readiness after it.
    fn record(&mut self, success: bool) -> bool {
        if self.last == Some(success) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(success);
            self.run = 1;
        }
        let threshold = if success {
            self.success_threshold
        } else {
            self.failure_threshold
        };
        if self.run >= threshold {
            self.ready = success;
        }
        self.ready
    }
}

/// The probe workers of one pod instance; dropping it stops them.
pub(crate) struct Probes(Vec<JoinHandle<()>>);

impl Drop for Probes {
    fn drop(&mut self) {
        for worker in &self.0 {
            worker.abort();
        }
    }
}

/// Starts a worker for each container of `pod` (a started pod) with an `httpGet`
/// readinessProbe; `None` when it has none.
pub(crate) fn start(store: &Store, pod: &Value) -> Option<Probes> {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array)?;
    let workers: Vec<JoinHandle<()>> = containers
        .iter()
        .filter_map(|c| Some((c.get("name")?.as_str()?, HttpProbe::of(c)?)))
        .map(|(name, probe)| {
            let worker = Worker {
                store: store.clone(),
                namespace: meta::namespace(pod).unwrap_or_default().to_string(),
                pod: meta::name(pod).to_string(),
                uid: meta::uid(pod).to_string(),
                container: name.to_string(),
            };
            tokio::spawn(worker.run(probe))
        })
        .collect();
    (!workers.is_empty()).then_some(Probes(workers))
}

/// Probes one container of one pod instance.
struct Worker {
    store: Store,
    namespace: String,
    pod: String,
    uid: String,
    container: String,
}

impl Worker {
    async fn run(self, probe: HttpProbe) {
        let Some(pod) = self.current() else {
            return;
        };
        let mut readiness = Readiness::new(container_ready(&pod, &self.container), &probe);
        // Like the kubelet's ticker: one probe per period, the first after the initial delay.
        let mut ticks =
            tokio::time::interval_at(Instant::now() + probe.initial_delay, probe.period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(pod) = self.current() else {
                return;
            };
            let address = meta::string_map(pod.pointer("/metadata/annotations"))
                .get(PROBE_ADDRESS_ANNOTATION)
                .map(|a| a.to_string());
            let success = http_get(address.as_deref(), &probe).await;
            let ready = readiness.record(success);
            if !self.report(ready).await {
                return;
            }
        }
    }

    /// The pod instance while it lives and has not finished.
    fn current(&self) -> Option<Value> {
        self.store
            .get("v1", "Pod", Some(&self.namespace), &self.pod)
            .filter(|pod| meta::uid(pod) == self.uid && !meta::is_finished(pod))
    }

    /// Writes the container's readiness into the pod's status if the status says otherwise;
    /// false once the pod instance is gone or finished.
    async fn report(&self, ready: bool) -> bool {
        loop {
            let Some(mut pod) = self.current() else {
                return false;
            };
            if !set_container_ready(&mut pod, &self.container, ready, &meta::now_rfc3339()) {
                return true;
            }
            // Fenced by the resourceVersion just read: another writer's status is never lost.
            match self.store.update_status(pod) {
                Ok(_) => return true,
                Err(err) if err.code == 409 => {}
                Err(err) => {
                    debug!(pod = %self.pod, error = %err.message, "readiness write failed; retrying");
                    tokio::time::sleep(WRITE_RETRY).await;
                }
            }
        }
    }
}

/// One HTTP GET of the probe's path at `address`: true on a 2xx or 3xx answer within the
/// timeout. No address, a refused connection, a timeout or another status fail it.
async fn http_get(address: Option<&str>, probe: &HttpProbe) -> bool {
    let Some(address) = address else {
        return false;
    };
    if probe.https {
        debug!(
            address,
            "HTTPS readiness probes are not supported; failing it"
        );
        return false;
    }
    match tokio::time::timeout(probe.timeout, status_code(address, probe)).await {
        Ok(Ok(code)) => (200..400).contains(&code),
        Ok(Err(err)) => {
            debug!(address, error = %err, "readiness probe failed");
            false
        }
        Err(_) => false,
    }
}

/// Sends the request and reads the status code from the response's status line.
async fn status_code(address: &str, probe: &HttpProbe) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(address).await?;
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\n\
         Connection: close\r\n",
        probe.path
    );
    for (name, value) in &probe.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 256];
    while !response.windows(2).any(|w| w == b"\r\n") && response.len() < MAX_STATUS_LINE {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..read]);
    }
    parse_status_line(&response).ok_or_else(|| std::io::Error::other("no HTTP status line"))
}

fn parse_status_line(response: &[u8]) -> Option<u16> {
    let line = response.split(|b| *b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

/// The `ready` of container `name` in the pod's status.
fn container_ready(pod: &Value, name: &str) -> bool {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|statuses| statuses.iter().find(|s| s["name"] == name))
        .and_then(|s| s.get("ready"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Sets container `name`'s `ready` and the pod's `ContainersReady` and `Ready` conditions to
/// match; a condition's `lastTransitionTime` moves to `now` only when it flips. Returns whether
/// anything changed.
fn set_container_ready(pod: &mut Value, name: &str, ready: bool, now: &str) -> bool {
    let Some(statuses) = pod
        .pointer_mut("/status/containerStatuses")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let Some(status) = statuses.iter_mut().find(|s| s["name"] == name) else {
        return false;
    };
    if status.get("ready").and_then(Value::as_bool) == Some(ready) {
        return false;
    }
    status["ready"] = json!(ready);
    let unready = unready_containers(statuses);
    let Some(conditions) = pod
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return true;
    };
    for type_ in ["ContainersReady", "Ready"] {
        let fresh = readiness_condition(type_, &unready, now);
        match conditions.iter_mut().find(|c| c["type"] == type_) {
            // Still false, for another set of containers: only the message says so.
            Some(old) if old["status"] == fresh["status"] => {
                if let Some(message) = fresh.get("message") {
                    old["message"] = message.clone();
                }
            }
            Some(old) => *old = fresh,
            None => conditions.push(fresh),
        }
    }
    true
}

/// The names of the containers whose status is not ready.
pub(crate) fn unready_containers(statuses: &[Value]) -> Vec<String> {
    statuses
        .iter()
        .filter(|s| s.get("ready").and_then(Value::as_bool) != Some(true))
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// The `ContainersReady` or `Ready` condition of a pod whose `unready` containers are not
/// ready, worded as the kubelet words it.
pub(crate) fn readiness_condition(type_: &str, unready: &[String], transition: &str) -> Value {
    if unready.is_empty() {
        return json!({"type": type_, "status": "True", "lastProbeTime": null,
                      "lastTransitionTime": transition});
    }
    json!({
        "type": type_,
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": transition,
        "reason": "ContainersNotReady",
        "message": format!("containers with unready status: [{}]", unready.join(" ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(thresholds: (u32, u32)) -> HttpProbe {
        let container = json!({"name": "w", "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": 8081},
            "successThreshold": thresholds.0, "failureThreshold": thresholds.1}});
        HttpProbe::of(&container).unwrap()
    }

    #[test]
    fn an_http_probe_takes_the_api_defaults() {
        let container = json!({"name": "w", "readinessProbe": {"httpGet": {"port": 8081}}});
        let probe = HttpProbe::of(&container).unwrap();
        assert_eq!(probe.path, "/");
        assert_eq!(probe.period, Duration::from_secs(10));
        assert_eq!(probe.timeout, Duration::from_secs(1));
        assert_eq!((probe.success_threshold, probe.failure_threshold), (1, 3));
        assert_eq!(probe.initial_delay, Duration::ZERO);
        let exec = json!({"name": "w", "readinessProbe": {"exec": {"command": ["true"]}}});
        assert!(!probes_readiness(&exec));
        assert!(!probes_readiness(&json!({"name": "w"})));
    }

    #[test]
    fn readiness_flips_only_after_a_run_of_threshold_results() {
        let mut readiness = Readiness::new(false, &probe((2, 3)));
        assert!(!readiness.record(true));
        assert!(readiness.record(true));
        assert!(readiness.record(false));
        assert!(readiness.record(false));
        assert!(
            readiness.record(true),
            "a success breaks the run of failures"
        );
        assert!(readiness.record(false));
        assert!(readiness.record(false));
        assert!(!readiness.record(false));
    }

    #[test]
    fn the_status_line_gives_the_code() {
        assert_eq!(
            parse_status_line(b"HTTP/1.1 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(
            parse_status_line(b"HTTP/1.0 200 OK\r\nx: y\r\n\r\n"),
            Some(200)
        );
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
    }

    #[test]
    fn a_readiness_flip_moves_both_conditions_and_only_then_their_transition_time() {
        let mut pod = json!({"status": {
            "conditions": [
                readiness_condition("ContainersReady", &["w".into()], "t0"),
                readiness_condition("Ready", &["w".into()], "t0"),
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"}],
            "containerStatuses": [{"name": "w", "ready": false}, {"name": "v", "ready": true}]}});
        assert!(!set_container_ready(&mut pod, "w", false, "t1"));
        assert!(set_container_ready(&mut pod, "w", true, "t2"));
        for condition in &pod["status"]["conditions"].as_array().unwrap()[..2] {
            assert_eq!(condition["status"], "True");
            assert_eq!(condition["lastTransitionTime"], "t2");
        }
        assert!(set_container_ready(&mut pod, "v", false, "t3"));
        let ready = &pod["status"]["conditions"][1];
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["message"], "containers with unready status: [v]");
        assert_eq!(pod["status"]["conditions"][2]["lastTransitionTime"], "t0");
    }
}
