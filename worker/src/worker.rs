//! The application-facing side and the shell around [`crate::fence::Fence`]: a [`Jobs`]
//! implementation starts and stops jobs; [`Worker::run`] sends the fence reads, follows the
//! watch, applies each read, stops jobs whose permit lapsed, acknowledges on the Lease, serves
//! readiness and terminates.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use swarm_protocol::fence;
use swarm_protocol::lease::Holder;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{debug, info, warn};

use crate::Error;
use crate::fence::{Action, Fence};
use crate::permit::Permit;
use crate::report::Report;
use crate::settings::{PartialSettings, Settings};
use crate::shed::Shed;
use crate::source::{self, Found, ReadError};
use crate::{backoff, health, lease};

/// What the application does with its jobs. The worker calls these one at a time, never for a
/// job in a state it is not in: `stop` only for a job it started.
pub trait Jobs: Send {
    /// Starts `job`; returns once it is launched (it then runs until stopped). The job checks
    /// `permit` before each unit of work and does none while it does not hold: that keeps a
    /// resumed process from working on a job the operator gave to another worker before this
    /// worker's timer stops it.
    fn start(&mut self, job: &str, permit: Permit) -> impl Future<Output = ()> + Send;
    /// Stops `job`; returns only once it no longer runs anywhere in this pod, since the
    /// acknowledgement that follows lets the operator grant it to another pod. Keep it prompt:
    /// no permit of the other jobs is extended and nothing starts until it returns.
    fn stop(&mut self, job: &str) -> impl Future<Output = ()> + Send;
}

/// How [`Worker::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Terminating, it acknowledged `version`, in which its own entry has no jobs.
    Acknowledged {
        /// The config version.
        version: u64,
    },
    /// Terminating, no version without jobs was acknowledged within the termination deadline.
    DeadlineReached,
}

type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Settings from the environment ([`WorkerBuilder::from_env`]), each overridable.
pub struct WorkerBuilder {
    settings: PartialSettings,
    client: Option<Client>,
    shutdown: Option<Shutdown>,
    /// Whether `build` binds the health address.
    serve_health: bool,
}

impl WorkerBuilder {
    /// Reads `POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `SWARM_POOL`, `SWARM_CONFIG_MAP`,
    /// `SWARM_WORKER_REPORT`, `SWARM_PERMIT_SECONDS`, `SWARM_WORKER_HEALTH_ADDR` and
    /// `SWARM_TERMINATION_SECONDS`.
    pub fn from_env() -> Self {
        Self {
            settings: PartialSettings::from_vars(|name| std::env::var(name).ok()),
            ..Self::empty()
        }
    }

    /// Settings from nothing but the builder's calls (for tests).
    pub fn empty() -> Self {
        Self {
            settings: PartialSettings::default(),
            client: None,
            shutdown: None,
            serve_health: true,
        }
    }

    /// Sets the pod name (`POD_NAME`).
    pub fn pod_name(mut self, name: impl Into<String>) -> Self {
        self.settings.pod_name = Some(name.into());
        self
    }

    /// Sets the namespace (`POD_NAMESPACE`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.namespace = Some(namespace.into());
        self
    }

    /// Sets the pod uid (`POD_UID`).
    pub fn pod_uid(mut self, uid: impl Into<String>) -> Self {
        self.settings.pod_uid = Some(uid.into());
        self
    }

    /// Sets the pool (`SWARM_POOL`).
    pub fn pool(mut self, pool: impl Into<String>) -> Self {
        self.settings.pool = Some(pool.into());
        self
    }

    /// Sets the ConfigMap (`SWARM_CONFIG_MAP`).
    pub fn config_map(mut self, name: impl Into<String>) -> Self {
        self.settings.config_map = Some(name.into());
        self
    }

    /// Sets the report file (`SWARM_WORKER_REPORT`).
    pub fn report(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.report = Some(path.into());
        self
    }

    /// Sets the permit (`SWARM_PERMIT_SECONDS`, default 30 s; whole seconds, at least 2): how
    /// long after its send a fence read lets the jobs it shows run. The worker reads every half
    /// of it and answers ready for three fifths of it after each read's send.
    pub fn permit(mut self, permit: Duration) -> Self {
        self.settings.permit = Some(permit);
        self
    }

    /// Sets where `/readyz` and `/healthz` are served (`SWARM_WORKER_HEALTH_ADDR`, default
    /// `0.0.0.0:8081`); port 0 picks a free one, see [`Worker::health_addr`].
    pub fn health_addr(mut self, addr: SocketAddr) -> Self {
        self.settings.health_addr = Some(addr);
        self
    }

    /// Serves no `/readyz` or `/healthz`, for many workers in one process (the operator
    /// benchmark runs 10,000, and a socket each would exceed its file limit). Only where no
    /// readiness probe runs: a probe of such a pod fails. [`Worker::health_addr`] is then the
    /// address of the settings, bound by nothing.
    pub fn without_health_server(mut self) -> Self {
        self.serve_health = false;
        self
    }

    /// Sets how long a terminating worker waits to acknowledge a version without jobs
    /// (`SWARM_TERMINATION_SECONDS`, default 25 s); keep it below the pod's grace period.
    pub fn termination_deadline(mut self, deadline: Duration) -> Self {
        self.settings.termination_deadline = Some(deadline);
        self
    }

    /// Uses `client` instead of one inferred from the environment (in-cluster or kubeconfig).
    /// Build it from a `kube::Config` with `default_retry = false`: kube's own retry of a 429
    /// would resend requests that the worker holds while the API server sheds load.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Terminates when `signal` completes instead of on SIGTERM or SIGINT.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// The worker, serving readiness (not ready yet) on its address; or the first setting
    /// refused or missing, why no client could be configured, or why the address cannot be
    /// bound.
    pub async fn build(self) -> Result<Worker, Error> {
        let settings = self.settings.complete()?;
        let client = match self.client {
            Some(client) => client,
            None => default_client().await?,
        };
        let shutdown = match self.shutdown {
            Some(shutdown) => shutdown,
            None => Box::pin(terminate_signal()?),
        };
        let health = match self.serve_health {
            true => Health::serve(settings.health_addr).await?,
            false => Health::unserved(settings.health_addr),
        };
        Ok(Worker {
            settings,
            client,
            shutdown,
            health,
        })
    }
}

/// A client from the pod's service account (or the kubeconfig), without kube's own retry of
/// 429, 503 and 504: up to 15 attempts out of the [`Shed`] gate's sight, which would keep
/// coming back to an overloaded API server however long the gate holds.
async fn default_client() -> Result<Client, Error> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|error| Error::Client(kube::Error::InferConfig(error)))?;
    config.default_retry = false;
    Client::try_from(config).map_err(Error::Client)
}

/// SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C when run by hand).
fn terminate_signal() -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// The readiness endpoint, served from [`WorkerBuilder::build`] on.
struct Health {
    addr: SocketAddr,
    /// Until when the worker answers ready: the fence's [`Fence::ready_until`].
    ready: Permit,
    /// `None` when built [`WorkerBuilder::without_health_server`].
    server: Option<JoinHandle<()>>,
}

impl Health {
    async fn serve(addr: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Health { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Health { addr, source })?;
        info!("serving readiness on {addr}");
        let ready = Permit::default();
        let holds = ready.clone();
        let server = tokio::spawn(health::serve(listener, move || holds.holds()));
        Ok(Self {
            addr,
            ready,
            server: Some(server),
        })
    }

    /// Readiness kept but served nowhere.
    fn unserved(addr: SocketAddr) -> Self {
        Self {
            addr,
            ready: Permit::default(),
            server: None,
        }
    }
}

/// A worker ready to run; see [`Worker::run`].
pub struct Worker {
    settings: Settings,
    client: Client,
    shutdown: Shutdown,
    health: Health,
}

impl Drop for Health {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// Aborts the worker's background tasks when it returns.
struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    /// Runs `task` alongside the others, forgetting those that have ended.
    fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.retain(|task| !task.is_finished());
        self.0.push(tokio::spawn(task));
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Worker {
    /// A builder with the settings from the environment.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::from_env()
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Where `/readyz` and `/healthz` are served: the bound address, so with port 0 the port
    /// picked (built [`WorkerBuilder::without_health_server`]: the address of the settings).
    pub fn health_addr(&self) -> SocketAddr {
        self.health.addr
    }

    /// Runs `jobs` as the pod's entry says until terminated: reads its ConfigMap every half
    /// permit (at once on a watch event, sooner after a failure), runs exactly the jobs of the
    /// last read while its permit holds (stops first, then starts), stops them when it lapses,
    /// and acknowledges each version on the Lease. On the shutdown signal it stops every job,
    /// starts none again, and returns once it has acknowledged a version whose entry has no
    /// jobs, or at the termination deadline.
    pub async fn run<J: Jobs>(self, jobs: J) -> Exit {
        let (orders, to_do) = mpsc::unbounded_channel();
        let (finished, done) = mpsc::unbounded_channel();
        let (tasks, shell, inputs) = self.start(orders);
        let permit = shell.permit.clone();
        // The jobs' calls run beside the loop, so that reads, readiness and the permit's timer
        // go on while a job takes its time to stop.
        tokio::select! {
            exit = shell.run(inputs, done, tasks) => exit,
            never = execute(jobs, permit, to_do, finished) => match never {},
        }
    }

    /// Writes the report's first line, starts the background tasks, and returns them with the
    /// event loop's state and what it reads.
    fn start(self, orders: mpsc::UnboundedSender<Order>) -> (Tasks, Shell, Inputs) {
        let Worker {
            settings,
            client,
            shutdown,
            health,
        } = self;
        let permit = Permit::default();
        let report = Report::new(
            settings.report.clone(),
            &settings.pod_name,
            &settings.pod_uid,
            permit.clone(),
        );
        report.write(None, &[]);
        let (ack, ack_rx) = watch::channel(None);
        let (written_tx, written) = watch::channel(None);
        let (seen, seen_rx) = watch::channel(None);
        let (terminate_tx, terminate) = watch::channel(false);
        let (answers, reads) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let shed = Shed::new(settings.permit);
        let holder = Holder {
            pod: settings.pod_name.clone(),
            namespace: settings.namespace.clone(),
            uid: settings.pod_uid.clone(),
            pool: settings.pool.clone(),
        };
        let config_maps = Api::namespaced(client.clone(), &settings.namespace);
        let tasks = Tasks(vec![
            tokio::spawn(lease::keep(
                Api::namespaced(client, &settings.namespace),
                holder,
                settings.permit,
                ack_rx,
                written_tx,
                shed.clone(),
            )),
            tokio::spawn(source::follow(
                config_maps.clone(),
                settings.own_config_map(),
                seen_rx,
                wake.clone(),
                fence::read_interval(settings.permit),
                shed.clone(),
            )),
            tokio::spawn(async move {
                shutdown.await;
                terminate_tx.send_replace(true);
            }),
        ]);
        let shell = Shell {
            fence: Fence::new(settings.permit, Instant::now()),
            permit,
            ready: health.ready.clone(),
            _health: health,
            report,
            ack,
            seen,
            orders,
            busy: None,
            reading: false,
            answers,
            config_maps,
            shed,
            settings,
            failing: false,
        };
        let inputs = Inputs {
            written,
            terminate,
            reads,
            wake,
        };
        (tasks, shell, inputs)
    }
}

/// What the event loop reads.
struct Inputs {
    /// From the Lease writer: the acknowledged version the Lease carries after each write.
    written: watch::Receiver<Option<u64>>,
    /// From the shutdown watch: SIGTERM came.
    terminate: watch::Receiver<bool>,
    /// The answers of the fence reads.
    reads: mpsc::UnboundedReceiver<Answer>,
    /// From the watch: an event came.
    wake: Arc<Notify>,
}

/// A fence read's answer, with when it was sent.
struct Answer {
    sent: Instant,
    result: Result<Found, ReadError>,
}

/// What the jobs' executor is asked to do; it reports each order done.
enum Order {
    Stop(Vec<String>),
    Start(Vec<String>),
}

/// The order under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    Stopping,
    Starting,
}

/// Carries out each order with `jobs`, one call at a time, and says when it is done; runs until
/// the worker returns.
async fn execute<J: Jobs>(
    mut jobs: J,
    permit: Permit,
    mut orders: mpsc::UnboundedReceiver<Order>,
    done: mpsc::UnboundedSender<()>,
) -> Infallible {
    while let Some(order) = orders.recv().await {
        match order {
            Order::Stop(list) => {
                for job in &list {
                    jobs.stop(job).await;
                }
            }
            Order::Start(list) => {
                for job in &list {
                    jobs.start(job, permit.clone()).await;
                }
            }
        }
        if done.send(()).is_err() {
            break;
        }
    }
    std::future::pending().await
}

/// The event loop's state and what it drives.
struct Shell {
    fence: Fence,
    /// What the jobs check before each unit of work: the fence's `until`.
    permit: Permit,
    /// What `/readyz` answers: the fence's `ready_until`.
    ready: Permit,
    /// Served until the worker returns.
    _health: Health,
    report: Report,
    /// To the Lease writer: the version to acknowledge.
    ack: watch::Sender<Option<u64>>,
    /// To the watch: the resourceVersion of the last fence read.
    seen: watch::Sender<Option<String>>,
    orders: mpsc::UnboundedSender<Order>,
    busy: Option<Busy>,
    /// A fence read is in flight.
    reading: bool,
    answers: mpsc::UnboundedSender<Answer>,
    config_maps: Api<ConfigMap>,
    /// Shared with the Lease writer and the watch: what the API server turned away holds all.
    shed: Arc<Shed>,
    settings: Settings,
    /// The last fence read failed, for the log.
    failing: bool,
}

impl Shell {
    /// The event loop: returns once terminated and done, or at the termination deadline.
    async fn run(
        mut self,
        mut inputs: Inputs,
        mut done: mpsc::UnboundedReceiver<()>,
        mut tasks: Tasks,
    ) -> Exit {
        let mut deadline: Option<Instant> = None;
        loop {
            // While an order runs, its end applies what lapsed meanwhile.
            let lapse = self.fence.until().filter(|_| self.busy.is_none());
            let read_at = (!self.reading).then(|| self.fence.next_read_at());
            tokio::select! {
                biased;
                Some(()) = done.recv() => self.finished(),
                () = sleep_until(lapse.unwrap_or_else(Instant::now)), if lapse.is_some() => {
                    self.advance();
                }
                Some(answer) = inputs.reads.recv() => self.answer(answer),
                Ok(()) = inputs.terminate.changed(), if !self.fence.terminating() => {
                    self.terminate();
                    deadline = Some(Instant::now() + self.settings.termination_deadline);
                }
                Ok(()) = inputs.written.changed() => {
                    let written = *inputs.written.borrow_and_update();
                    if let Some(version) = written {
                        info!(version, "acknowledged");
                        self.fence.written(version);
                    }
                }
                () = inputs.wake.notified() => self.fence.watched(Instant::now()),
                () = sleep_until(read_at.unwrap_or_else(Instant::now)), if read_at.is_some() => {
                    self.send_read(&mut tasks);
                }
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    warn!("termination deadline reached without an acknowledgement");
                    return Exit::DeadlineReached;
                }
            }
            if self.busy.is_none()
                && self.fence.done()
                && let Some(version) = self.fence.acknowledged()
            {
                info!(version, "terminated: acknowledged a version without jobs");
                return Exit::Acknowledged { version };
            }
        }
    }

    /// Sends a fence read as soon as the API server is not shedding the worker's requests: a
    /// GET with no resourceVersion, one at a time, given up only once its answer could renew
    /// nothing ([`fence::read_timeout`]).
    fn send_read(&mut self, tasks: &mut Tasks) {
        self.reading = true;
        let api = self.config_maps.clone();
        let name = self.settings.own_config_map();
        let pod = self.settings.pod_name.clone();
        let timeout = fence::read_timeout(self.settings.permit);
        let answers = self.answers.clone();
        let shed = self.shed.clone();
        tasks.spawn(async move {
            let pass = shed.admit_fence_read().await;
            // The permit counts from the send, which is after any hold.
            let sent = Instant::now();
            let result = source::read(&api, &name, &pod, timeout).await;
            match &result {
                Ok(_) | Err(ReadError::Unreadable(_)) => {
                    pass.ended(None);
                }
                Err(ReadError::Api(error)) => {
                    pass.ended(Some(error));
                }
                // No answer: dropped, the pass lets the next request probe.
                Err(ReadError::TimedOut) => drop(pass),
            }
            let _ = answers.send(Answer { sent, result });
        });
    }

    /// Applies a fence read's answer.
    fn answer(&mut self, Answer { sent, result }: Answer) {
        self.reading = false;
        match result {
            Ok(found) => {
                if std::mem::take(&mut self.failing) {
                    info!("fence read succeeded again");
                }
                debug!(version = ?found.entry.version, jobs = ?found.entry.jobs, "fence read");
                self.seen.send_replace(Some(found.resource_version));
                self.fence.read(sent, found.entry);
                self.ready.set(self.fence.ready_until());
                self.advance();
            }
            Err(error) => {
                self.failing = true;
                if error.is_shed() {
                    self.fence.read_shed(Instant::now(), backoff::jitter());
                } else {
                    self.fence.read_failed(Instant::now());
                }
                let retry_in = self.fence.next_read_at() - Instant::now();
                warn!(%error, ?retry_in, until = ?self.fence.until(), "fence read failed");
            }
        }
    }

    /// SIGTERM: not ready, every job stops, nothing starts again.
    fn terminate(&mut self) {
        info!("terminating: stopping every job");
        self.fence.terminate();
        self.ready.set(None);
        self.advance();
    }

    /// The order under way is done: a stop is reported now that the jobs no longer run.
    fn finished(&mut self) {
        if self.busy.take() == Some(Busy::Stopping) {
            self.permit.set(self.fence.until());
            self.write_report();
        }
        self.advance();
    }

    /// Hands out what the fence asks for, up to the first order for the jobs.
    fn advance(&mut self) {
        while self.busy.is_none() {
            let Some(action) = self.fence.next(Instant::now()) else {
                return;
            };
            match action {
                Action::Stop(jobs) => {
                    info!(?jobs, "stopping");
                    self.permit.set(self.fence.until());
                    self.order(Busy::Stopping, Order::Stop(jobs));
                }
                Action::Run { until, start } => {
                    // Every running job is listed by the read that gives this permit.
                    self.permit.set(Some(until));
                    self.write_report();
                    if !start.is_empty() {
                        info!(jobs = ?start, "starting");
                        self.order(Busy::Starting, Order::Start(start));
                    }
                }
                Action::Acknowledge(version) => {
                    debug!(version, "acknowledging");
                    self.ack.send_replace(Some(version));
                }
            }
        }
    }

    fn order(&mut self, busy: Busy, order: Order) {
        self.busy = Some(busy);
        // The executor runs as long as the loop does.
        let _ = self.orders.send(order);
    }

    fn write_report(&self) {
        self.report
            .write(self.fence.version(), self.fence.running());
    }
}
