//! The load driver of `:ack` cells: one `swarm-worker` [`Worker`] per worker pod, all in this
//! process, sharing [`CONNECTIONS`] HTTP/2 connections and the benchmark's tokio runtime. A
//! worker starts once its pod is Ready (the pods Ready when the driver starts, over one read
//! interval), as that pod (its real name and uid), and stops when the pod is deleted (or
//! terminating, or re-created with another uid) or the cell ends. Its jobs do nothing. It
//! serves no readiness endpoint: 10,000 of them would exceed this process's file limit, and
//! neither kwok nor the benchmark's kube-sim pods probe them.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use swarm_operator::runtime::api_requests::{RequestCounter, counting_layer};
use swarm_protocol::fence;
use swarm_worker::{Jobs, Permit, WorkerBuilder};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cluster::{is_ready, load_config};
use crate::process::Requests;
use crate::worker_identity;

/// The user agent of the load driver's requests.
pub const USER_AGENT: &str = "swarm-operator-bench-workers";
/// The label naming a worker pod's StatefulSet, which is also its pool's name.
const POOL_LABEL: &str = "app";

/// Connections the driver's workers share, each an HTTP/2 connection to the API server that
/// carries the streams of the workers hashed to it. Each worker process of a real pool keeps a
/// connection of its own; 10,000 workers in one process, each with its watch and reads on
/// HTTP/1.1 connections, exceed this process's file limit and the API server's (20,000 each
/// here), and a slow API server makes reads pile up into more connections still. The API
/// server's work per request is the same either way.
const CONNECTIONS: usize = 512;

/// The driver's clients, one per connection: a worker's requests all go over the one its pod's
/// name hashes to. At 10,000 workers about 20 share a connection, each with its watch, at most
/// one read and one Lease write in flight: within the 100 concurrent streams kube-apiserver
/// allows a connection (a request past them waits for a stream, it is not refused).
struct Clients {
    shards: Vec<Client>,
}

impl Clients {
    fn new(config: &kube::Config, counter: &RequestCounter) -> Self {
        let shards = (0..CONNECTIONS)
            .map(|_| http2_client(config.clone(), counter.clone()))
            .collect();
        Clients { shards }
    }

    /// The client of the worker of pod `name`.
    fn of(&self, name: &str) -> Client {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        let shard =
            usize::try_from(hasher.finish() % CONNECTIONS as u64).expect("below CONNECTIONS");
        self.shards[shard].clone()
    }
}

/// A client over one HTTP/2 connection (offered in TLS with ALPN, which the API server accepts):
/// kube's stack otherwise (TLS, the kubeconfig's credentials and headers), counting each request
/// in `counter`.
fn http2_client(config: kube::Config, counter: RequestCounter) -> Client {
    use kube::client::ConfigExt as _;
    let tls = config
        .rustls_client_config()
        .expect("the load driver's TLS configuration");
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http2()
        .wrap_connector(http);
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().expect("the kubeconfig's credentials"))
        .layer(config.extra_headers_layer().expect("the driver's headers"))
        .layer(counting_layer(counter))
        .map_err(tower::BoxError::from)
        .service(http);
    Client::new(service, config.default_namespace)
}

/// Jobs that cost nothing: the driver measures the protocol, not an application.
struct NoJobs;

impl Jobs for NoJobs {
    async fn start(&mut self, _job: &str, _permit: Permit) {}
    async fn stop(&mut self, _job: &str) {}
}

/// One worker running for one pod.
struct Running {
    uid: String,
    /// Dropping it lets the worker terminate as on SIGTERM.
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    /// By pod name.
    running: HashMap<String, Running>,
    /// Workers told to stop, still acknowledging their last version.
    stopping: Vec<JoinHandle<()>>,
    /// When the worker of each pod name last started (its pod seen Ready).
    started_at: HashMap<String, Instant>,
    /// Workers started.
    starts: u64,
}

/// The running load driver; [`LoadDriver::stop`] ends every worker.
pub struct LoadDriver {
    state: Arc<Mutex<State>>,
    registry: Registry,
    pods: JoinHandle<()>,
}

impl LoadDriver {
    /// Starts following the pods of `namespace` with a client of its own from `kubeconfig`;
    /// `permit` overrides the library's permit (30 s, a fence read every 15 s). On a real
    /// control plane the workers authenticate as the worker ServiceAccount (see
    /// [`worker_identity`]); kube-sim checks no credentials.
    pub async fn start(
        kubeconfig: &Path,
        namespace: &str,
        permit: Option<Duration>,
        real: bool,
    ) -> Self {
        let mut config = load_config(kubeconfig).await;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        ));
        let counter = RequestCounter::default();
        let mut registry = Registry::default();
        registry.register(
            "swarm_operator_api_requests",
            "requests of the load driver",
            counter.clone(),
        );
        let pod_watch = http2_client(config.clone(), counter.clone());
        let workers = if real {
            worker_identity::worker_config(&config, &pod_watch, namespace).await
        } else {
            config
        };
        let clients = Clients::new(&workers, &counter);
        let state = Arc::new(Mutex::new(State::default()));
        let pods = tokio::spawn(follow_pods(
            (pod_watch, clients),
            namespace.to_owned(),
            permit,
            state.clone(),
        ));
        LoadDriver {
            state,
            registry,
            pods,
        }
    }

    /// The driver's requests so far (its workers' and its pod watch's), by verb and resource.
    pub fn requests(&self) -> Requests {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encode the driver's counters");
        Requests::parse(&text)
    }

    /// Workers running now.
    pub fn running(&self) -> usize {
        self.state.lock().expect("driver state").running.len()
    }

    /// When the worker of pod `name` last started.
    pub fn started_at(&self, name: &str) -> Option<Instant> {
        self.state
            .lock()
            .expect("driver state")
            .started_at
            .get(name)
            .copied()
    }

    /// The latest start among the running workers: when the last of their pods was seen Ready.
    pub fn last_start(&self) -> Option<Instant> {
        let state = self.state.lock().expect("driver state");
        state
            .running
            .keys()
            .filter_map(|name| state.started_at.get(name))
            .max()
            .copied()
    }

    /// Workers started so far.
    pub fn starts(&self) -> u64 {
        self.state.lock().expect("driver state").starts
    }

    /// Ends every worker at once (the cell is over: no acknowledgement is waited for).
    pub fn stop(self) {
        self.pods.abort();
        let mut state = self.state.lock().expect("driver state");
        for (_, running) in state.running.drain() {
            running.task.abort();
        }
        for task in state.stopping.drain(..) {
            task.abort();
        }
    }
}

/// Watches the namespace's pods (with `pod_watch`, the benchmark's own identity) and keeps one
/// worker per Ready pod (with `clients`).
async fn follow_pods(
    (pod_watch, clients): (Client, Clients),
    namespace: String,
    permit: Option<Duration>,
    state: Arc<Mutex<State>>,
) {
    let pods: Api<Pod> = Api::namespaced(pod_watch, &namespace);
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).default_backoff());
    let spread = fence::read_interval(permit.unwrap_or(fence::DEFAULT_PERMIT));
    let mut listed = Vec::new();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let mut state = state.lock().expect("driver state");
        match event {
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(pod) => listed.push(pod),
            watcher::Event::InitDone => {
                let names: HashSet<String> = listed.iter().map(ResourceExt::name_any).collect();
                let gone: Vec<String> = state
                    .running
                    .keys()
                    .filter(|name| !names.contains(*name))
                    .cloned()
                    .collect();
                for name in gone {
                    stop(&mut state, &name);
                }
                // The pods listed at once start their workers over one read interval, as a
                // pool's worker processes started together spread their reads over it.
                let count = u32::try_from(listed.len()).unwrap_or(u32::MAX).max(1);
                for (i, pod) in (0..).zip(listed.drain(..)) {
                    let delay = spread * i / count;
                    observe(&mut state, &pod, &clients, &namespace, (permit, delay));
                }
            }
            watcher::Event::Apply(pod) => observe(
                &mut state,
                &pod,
                &clients,
                &namespace,
                (permit, Duration::ZERO),
            ),
            watcher::Event::Delete(pod) => stop(&mut state, &pod.name_any()),
        }
    }
}

/// Starts (after `delay`) or stops the worker of `pod` as its state says.
fn observe(
    state: &mut State,
    pod: &Pod,
    clients: &Clients,
    namespace: &str,
    (permit, delay): (Option<Duration>, Duration),
) {
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let same = state.running.get(&name).is_some_and(|r| r.uid == uid);
    if pod.metadata.deletion_timestamp.is_some() || (!same && state.running.contains_key(&name)) {
        stop(state, &name);
    }
    if pod.metadata.deletion_timestamp.is_some() || same || !is_ready(pod) {
        return;
    }
    let Some(pool) = pod.labels().get(POOL_LABEL).cloned() else {
        return;
    };
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let mut builder = WorkerBuilder::empty()
        .pod_name(&name)
        .namespace(namespace)
        .pod_uid(&uid)
        .config_map(format!("{pool}-config"))
        .pool(pool)
        .client(clients.of(&name))
        .without_health_server()
        .shutdown_on(async move {
            let _ = stop_rx.await;
        });
    if let Some(permit) = permit {
        builder = builder.permit(permit);
    }
    let task = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        match builder.build().await {
            Ok(worker) => {
                worker.run(NoJobs).await;
            }
            Err(error) => eprintln!("  load driver: cannot build a worker: {error}"),
        }
    });
    state.starts += 1;
    state
        .started_at
        .insert(name.clone(), Instant::now() + delay);
    state.running.insert(
        name,
        Running {
            uid,
            _stop: stop_tx,
            task,
        },
    );
}

/// Tells the worker of pod `name` to terminate; it acknowledges what it still can.
fn stop(state: &mut State, name: &str) {
    state.stopping.retain(|task| !task.is_finished());
    if let Some(running) = state.running.remove(name) {
        state.stopping.push(running.task);
    }
}
