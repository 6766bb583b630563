//! Stress measurement, not a conformance check: 100 StatefulSets of 100 pods (10,000 pods),
//! a restart of every pod, and a client load of watches, LISTs and ConfigMap applies meanwhile.
//! It prints wall times per phase, the process RSS after each phase and request latencies.
//!
//! ```sh
//! cargo test -p kube-sim --release --test integration stress:: -- --ignored --nocapture
//! ```
//!
//! `STRESS_SETS` and `STRESS_REPLICAS` shrink it (defaults 100 and 100).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const NS: &str = "stress";
const APPLY: &str = "application/apply-patch+yaml";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Deletes (and applies) in flight at once.
const CONCURRENCY: usize = 32;
/// Jobs listed in each set's ConfigMap.
const JOBS_PER_SET: usize = 300;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process in MiB (kube-sim runs in-process).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    kib("VmRSS:") / 1024.0
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

#[derive(Default)]
struct Latencies {
    samples: Mutex<Vec<Duration>>,
}

impl Latencies {
    async fn record(&self, d: Duration) {
        self.samples.lock().await.push(d);
    }

    async fn report(&self, what: &str) {
        let mut s = self.samples.lock().await.clone();
        if s.is_empty() {
            println!("{what}: no samples");
            return;
        }
        s.sort();
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        println!(
            "{what}: n={} p50={:.1?} p99={:.1?} max={:.1?}",
            s.len(),
            at(0.5),
            at(0.99),
            s[s.len() - 1]
        );
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn send(&self, method: reqwest::Method, path: &str, ct: &str, body: Vec<u8>) -> Value {
        let resp = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = resp.status();
        let bytes = resp.bytes().await.expect("body read");
        assert!(
            status.is_success(),
            "{path}: {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice(&bytes).expect("JSON body")
    }

    /// A GET whose body is received but not parsed; returns its size.
    async fn get_bytes(&self, path: &str) -> usize {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request sent");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.bytes().await.expect("body read").len()
    }

    async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, "application/json", Vec::new())
            .await
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        self.send(
            reqwest::Method::POST,
            path,
            "application/json",
            serde_json::to_vec(body).unwrap(),
        )
        .await
    }

    async fn apply_config_map(&self, set: usize, round: u64) {
        let name = format!("pool-{set}-jobs");
        let replicas = env_usize("STRESS_REPLICAS", 100);
        let mut data = serde_json::Map::new();
        for worker in 0..replicas {
            let jobs: Vec<String> = (0..JOBS_PER_SET)
                .filter(|j| j % replicas == worker)
                .map(|j| format!("job-{j}"))
                .collect();
            data.insert(format!("pool-{set}-{worker}"), json!(jobs.join(",")));
        }
        data.insert("round".into(), json!(round.to_string()));
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS},
            "data": data,
        });
        self.send(
            reqwest::Method::PATCH,
            &format!("/api/v1/namespaces/{NS}/configmaps/{name}?fieldManager=stress&force=true"),
            APPLY,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    }
}

fn stateful_set(set: usize, replicas: usize) -> Value {
    let app = format!("pool-{set}");
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": app, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": app,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "containers": [{
                        "name": "worker",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "sleep infinity"],
                        "volumeMounts": [{"name": "jobs", "mountPath": "/etc/jobs"}],
                    }],
                    "volumes": [{"name": "jobs", "configMap": {"name": format!("{app}-jobs")}}],
                },
            },
        },
    })
}

/// Follows a collection like a kube-rs watcher: paged LIST (500), then a watch from its
/// resourceVersion; relists on an ERROR event or the end of the stream.
async fn follow(client: Arc<Client>, path: String, stop: Arc<AtomicBool>, events: Arc<AtomicU64>) {
    let mut relists = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut cont = String::new();
        let rv = loop {
            let sep = if path.contains('?') { '&' } else { '?' };
            let page = client
                .get(&format!("{path}{sep}limit=500&continue={cont}"))
                .await;
            match page["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => cont = c.to_string(),
                _ => {
                    break page["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string();
                }
            }
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{path}{sep}watch=true&allowWatchBookmarks=true&timeoutSeconds=290&resourceVersion={rv}",
            client.base
        );
        let resp = client.http.get(url).send().await.expect("watch starts");
        let mut stream = resp.bytes_stream();
        let mut line = Vec::new();
        'stream: while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            for b in chunk {
                if b == b'\n' {
                    if line.starts_with(br#"{"type":"ERROR""#)
                        || line.ends_with(br#""type":"ERROR"}"#)
                    {
                        break 'stream;
                    }
                    events.fetch_add(1, Ordering::Relaxed);
                    line.clear();
                } else {
                    line.push(b);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
        relists += 1;
        if relists > 1 {
            println!("watch {path}: relist #{relists}");
        }
    }
}

/// Ready pods of the namespace whose uid is not in `old`.
fn ready_pods(list: &Value, old: &HashSet<String>) -> usize {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            !old.contains(p["metadata"]["uid"].as_str().unwrap_or(""))
                && p["metadata"].get("deletionTimestamp").is_none()
                && p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
        .count()
}

async fn wait_ready(client: &Client, total: usize, old: &HashSet<String>, limit: Duration) {
    let started = Instant::now();
    loop {
        let list = client.get(&format!("/api/v1/namespaces/{NS}/pods")).await;
        let ready = ready_pods(&list, old);
        if ready == total {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "only {ready} of {total} pods ready after {limit:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn phase(name: &str, started: Instant) {
    println!(
        "phase {name}: {:.1?}, RSS {:.0} MiB (peak {:.0} MiB)",
        started.elapsed(),
        rss_mib(),
        peak_rss_mib()
    );
}

/// The client load that runs while the pods start and restart: a pod and a ConfigMap watch,
/// and rounds of a LIST of every pod then an apply of each set's ConfigMap.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pod_events: Arc<AtomicU64>,
    cm_events: Arc<AtomicU64>,
    list_latency: Arc<Latencies>,
    apply_latency: Arc<Latencies>,
    list_bytes: Arc<AtomicU64>,
}

impl Load {
    fn start(client: &Arc<Client>, sets: usize) -> Self {
        let load = Self {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
            pod_events: Arc::new(AtomicU64::new(0)),
            cm_events: Arc::new(AtomicU64::new(0)),
            list_latency: Arc::new(Latencies::default()),
            apply_latency: Arc::new(Latencies::default()),
            list_bytes: Arc::new(AtomicU64::new(0)),
        };
        let watches = [
            (
                format!("/api/v1/namespaces/{NS}/pods?labelSelector={POD_NAME_LABEL}"),
                &load.pod_events,
            ),
            (
                format!("/api/v1/namespaces/{NS}/configmaps"),
                &load.cm_events,
            ),
        ];
        let mut tasks: Vec<_> = watches
            .into_iter()
            .map(|(path, events)| {
                tokio::spawn(follow(
                    client.clone(),
                    path,
                    load.stop.clone(),
                    events.clone(),
                ))
            })
            .collect();
        let (client, stop, list_bytes) =
            (client.clone(), load.stop.clone(), load.list_bytes.clone());
        let (list_latency, apply_latency) = (load.list_latency.clone(), load.apply_latency.clone());
        // Until stopped, once a second: a LIST of every pod, then an apply of each ConfigMap.
        tasks.push(tokio::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let t = Instant::now();
                let bytes = client
                    .get_bytes(&format!("/api/v1/namespaces/{NS}/pods"))
                    .await;
                list_latency.record(t.elapsed()).await;
                list_bytes.store(bytes as u64, Ordering::Relaxed);
                for set in 0..sets {
                    let t = Instant::now();
                    client.apply_config_map(set, round).await;
                    apply_latency.record(t.elapsed()).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
        Self { tasks, ..load }
    }

    /// Stops the load and prints what it measured.
    async fn stop_and_report(self, sim: &Sim) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.abort();
        }
        self.list_latency
            .report("LIST pods (no limit, body received)")
            .await;
        println!(
            "LIST pods body: {:.1} MiB",
            self.list_bytes.load(Ordering::Relaxed) as f64 / 1048576.0
        );
        self.apply_latency.report("ConfigMap apply").await;
        println!(
            "watch events: pods {}, configmaps {}; resourceVersion {}",
            self.pod_events.load(Ordering::Relaxed),
            self.cm_events.load(Ordering::Relaxed),
            sim.store().resource_version()
        );
    }
}

/// Deletes every pod (`CONCURRENCY` at a time) and waits until all `total` are Ready again
/// as new instances.
async fn restart_every_pod(client: &Arc<Client>, total: usize) {
    let started = Instant::now();
    let list = client.get(&format!("/api/v1/namespaces/{NS}/pods")).await;
    let pods: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let old: HashSet<String> = pods.iter().map(|(_, uid)| uid.clone()).collect();
    futures::stream::iter(pods)
        .for_each_concurrent(CONCURRENCY, |(name, _)| {
            let client = client.clone();
            async move {
                client
                    .send(
                        reqwest::Method::DELETE,
                        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
                        "application/json",
                        Vec::new(),
                    )
                    .await;
            }
        })
        .await;
    phase("delete every pod (requests)", started);
    wait_ready(client, total, &old, Duration::from_secs(900)).await;
    phase("restart (all pods Ready again)", started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes; run it by name with --ignored"]
async fn ten_thousand_pods_restart_under_client_load() {
    let sets = env_usize("STRESS_SETS", 100);
    let replicas = env_usize("STRESS_REPLICAS", 100);
    let total = sets * replicas;
    let run = Instant::now();
    let sim = Sim::start(SimConfig {
        time_scale: 0.02,
        ..SimConfig::default()
    })
    .await
    .expect("sim starts");
    let client = Arc::new(Client {
        http: reqwest::Client::new(),
        base: sim.url(),
    });
    phase("start", run);

    client
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .await;
    for set in 0..sets {
        client.apply_config_map(set, 0).await;
    }
    let load = Load::start(&client, sets);

    let started = Instant::now();
    for set in 0..sets {
        client
            .post(
                &format!("/apis/apps/v1/namespaces/{NS}/statefulsets"),
                &stateful_set(set, replicas),
            )
            .await;
    }
    wait_ready(&client, total, &HashSet::new(), Duration::from_secs(900)).await;
    phase("create (all pods Ready)", started);

    restart_every_pod(&client, total).await;
    load.stop_and_report(&sim).await;
    phase("total", run);
    sim.shutdown().await;
}
