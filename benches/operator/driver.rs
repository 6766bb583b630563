//! The load driver of `:ack` cells: one `swarm-worker` [`Worker`] per worker pod, all in this
//! process, sharing one client and the benchmark's tokio runtime. A worker starts once its
//! pod is Ready, as that pod (its real name and uid), and stops when the pod is deleted (or
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
use swarm_worker::{Jobs, Permit, WorkerBuilder};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cluster::{is_ready, load_config};
use crate::process::Requests;

/// The user agent of the load driver's requests.
pub const USER_AGENT: &str = "swarm-operator-bench-workers";
/// The label naming a worker pod's StatefulSet, which is also its pool's name.
const POOL_LABEL: &str = "app";

/// Idle connections the driver's client keeps for its workers' reads. Each worker process of a
/// real pool keeps one of its own; all of them in one process would hold a connection per worker
/// beside its watch, and 10,000 workers would then exceed this process's file limit and the API
/// server's (20,000 each here). The API server's work per read is the same either way.
const IDLE_CONNECTIONS: usize = 256;

/// The one client of every worker in the driver: kube's default stack (TLS, the kubeconfig's
/// credentials and headers) over a connection pool that keeps at most [`IDLE_CONNECTIONS`]
/// idle, counting each request in `counter`.
fn shared_client(config: kube::Config, counter: RequestCounter) -> Client {
    use kube::client::ConfigExt as _;
    let connector = config
        .rustls_https_connector()
        .expect("the load driver's TLS connector");
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
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
    /// `permit` overrides the library's permit (30 s, a fence read every 15 s).
    pub async fn start(kubeconfig: &Path, namespace: &str, permit: Option<Duration>) -> Self {
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
        let client = shared_client(config, counter);
        let state = Arc::new(Mutex::new(State::default()));
        let pods = tokio::spawn(follow_pods(
            client,
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

/// Watches the namespace's pods and keeps one worker per Ready pod.
async fn follow_pods(
    client: Client,
    namespace: String,
    permit: Option<Duration>,
    state: Arc<Mutex<State>>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).default_backoff());
    let mut listed = HashSet::new();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let mut state = state.lock().expect("driver state");
        match event {
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(pod) => {
                listed.insert(pod.name_any());
                observe(&mut state, &pod, &client, &namespace, permit);
            }
            watcher::Event::InitDone => {
                let gone: Vec<String> = state
                    .running
                    .keys()
                    .filter(|name| !listed.contains(*name))
                    .cloned()
                    .collect();
                for name in gone {
                    stop(&mut state, &name);
                }
            }
            watcher::Event::Apply(pod) => observe(&mut state, &pod, &client, &namespace, permit),
            watcher::Event::Delete(pod) => stop(&mut state, &pod.name_any()),
        }
    }
}

/// Starts or stops the worker of `pod` as its state says.
fn observe(
    state: &mut State,
    pod: &Pod,
    client: &Client,
    namespace: &str,
    permit: Option<Duration>,
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
        .client(client.clone())
        .without_health_server()
        .shutdown_on(async move {
            let _ = stop_rx.await;
        });
    if let Some(permit) = permit {
        builder = builder.permit(permit);
    }
    let task = tokio::spawn(async move {
        match builder.build().await {
            Ok(worker) => {
                worker.run(NoJobs).await;
            }
            Err(error) => eprintln!("  load driver: cannot build a worker: {error}"),
        }
    });
    state.starts += 1;
    state.started_at.insert(name.clone(), Instant::now());
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
