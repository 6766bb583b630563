//! The application-facing side: a [`Jobs`] implementation starts and stops jobs, [`Worker::run`]
//! drives it through the protocol (read, apply, acknowledge, renew, terminate).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use swarm_protocol::lease::Holder;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::Error;
use crate::fence::Fence;
use crate::handoff::Handoff;
use crate::lease::{self, Written};
use crate::permit::Permit;
use crate::report::Report;
use crate::settings::{PartialSettings, Settings};
use crate::source::{self, Observed};

/// What the application does with its jobs. The worker calls these one at a time, never for a
/// job in a state it is not in: `stop` only for a job it started.
pub trait Jobs: Send {
    /// Starts `job`; returns once it is launched (it then runs until stopped). The job checks
    /// `permit` before each unit of work and does none while it does not hold: that keeps a
    /// resumed process from working on a job the operator gave to another worker before this
    /// worker's fence stops it.
    fn start(&mut self, job: &str, permit: Permit) -> impl Future<Output = ()> + Send;
    /// Stops `job`; returns only once it no longer runs anywhere in this pod, since the
    /// acknowledgement that follows lets the operator grant it to another pod.
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
}

impl WorkerBuilder {
    /// Reads `POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `SWARM_POOL`, `SWARM_CONFIG_MAP` and
    /// `SWARM_WORKER_REPORT`.
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

    /// Sets the Lease duration (`SWARM_LEASE_DURATION_SECONDS`, default 40 s): it bounds how
    /// long a stopped worker's jobs wait, and the Lease is renewed every quarter of it.
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.settings.lease_duration = Some(duration);
        self
    }

    /// Sets how long before its Lease could look expired the worker stops every job
    /// (`SWARM_FENCE_MARGIN_SECONDS`, default `max(2 s, duration / 5)`, at most half the
    /// duration).
    pub fn fence_margin(mut self, margin: Duration) -> Self {
        self.settings.fence_margin = Some(margin);
        self
    }

    /// Sets how long a terminating worker waits to acknowledge a version without jobs
    /// (`SWARM_TERMINATION_SECONDS`, default 25 s); keep it below the pod's grace period.
    pub fn termination_deadline(mut self, deadline: Duration) -> Self {
        self.settings.termination_deadline = Some(deadline);
        self
    }

    /// Uses `client` instead of one inferred from the environment (in-cluster or kubeconfig).
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Terminates when `signal` completes instead of on SIGTERM or SIGINT.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// The worker, or the first missing setting, or why no client could be configured.
    pub async fn build(self) -> Result<Worker, Error> {
        let settings = self.settings.complete()?;
        let client = match self.client {
            Some(client) => client,
            None => Client::try_default().await.map_err(Error::Client)?,
        };
        let shutdown = match self.shutdown {
            Some(shutdown) => shutdown,
            None => Box::pin(terminate_signal()?),
        };
        Ok(Worker {
            settings,
            client,
            shutdown,
        })
    }
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

/// A worker ready to run; see [`Worker::run`].
pub struct Worker {
    settings: Settings,
    client: Client,
    shutdown: Shutdown,
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

    /// Runs `jobs` as the pool's config says until terminated: applies each new version of
    /// this pod's entry (stops first, then starts) and acknowledges it on the Lease. When the
    /// Lease has not been renewed for the fence limit it stops every job, and runs them again
    /// only once the Lease is renewed and the ConfigMap read afresh. On the shutdown signal it
    /// stops every job, starts none again, and returns once it has acknowledged a version
    /// whose entry has no jobs, or at the termination deadline.
    pub async fn run<J: Jobs>(self, jobs: J) -> Exit {
        let settings = self.settings.clone();
        let (_tasks, mut shell, inputs) = self.start(jobs);
        let Inputs {
            mut written,
            mut config,
            mut terminate,
            mut reads,
        } = inputs;
        let mut deadline: Option<Instant> = None;
        loop {
            let fence_at = shell.fence.deadline();
            tokio::select! {
                // The fence first: when it is due, nothing else may start a job before it.
                biased;
                _ = tokio::time::sleep_until(fence_at.unwrap_or_else(Instant::now)),
                    if fence_at.is_some() =>
                {
                    shell.check_fence().await;
                }
                Ok(()) = written.changed() => {
                    written.borrow_and_update();
                    shell.sync_fence().await;
                }
                Some((read, result)) = reads.recv() => {
                    shell.read_afresh(read, result).await;
                    // What the watch delivered while fenced was ignored; now live, the newest of
                    // it applies (an older version than the one read is ignored as a replay).
                    let latest = config.borrow_and_update().clone();
                    if let Some(observed) = latest.filter(|_| shell.fence.is_live()) {
                        shell.handle(&observed).await;
                    }
                }
                Ok(()) = config.changed() => {
                    let observed = config.borrow_and_update().clone();
                    // Fenced, only a read issued after a renewal counts.
                    if let Some(observed) = observed
                        && shell.fence.is_live()
                    {
                        shell.handle(&observed).await;
                    }
                }
                Ok(()) = terminate.changed(), if !shell.core.terminating() => {
                    shell.terminate().await;
                    deadline = Some(Instant::now() + settings.termination_deadline);
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() =>
                {
                    warn!("termination deadline reached without an acknowledgement");
                    return Exit::DeadlineReached;
                }
            }
            if shell.core.done()
                && let Some(version) = shell.core.acknowledged()
            {
                info!(version, "terminated: acknowledged a version without jobs");
                return Exit::Acknowledged { version };
            }
        }
    }
}

impl Worker {
    /// Writes the report's first line, starts the tasks ([`Worker::spawn_tasks`]), and returns
    /// them with the event loop's state and the channels it reads.
    fn start<J: Jobs>(self, jobs: J) -> (Tasks, Shell<J>, Inputs) {
        let settings = self.settings.clone();
        let permit = Permit::default();
        let report = Report::new(
            settings.report.clone(),
            &settings.pod_name,
            &settings.pod_uid,
            permit.clone(),
        );
        report.write(None, &[]);
        let config_maps = Api::namespaced(self.client.clone(), &settings.namespace);
        let start = Instant::now();
        let (tasks, channels) = self.spawn_tasks(start);
        let Channels {
            ack,
            written,
            config,
            terminate,
        } = channels;
        let (read_tx, reads) = mpsc::unbounded_channel();
        let shell = Shell {
            core: Handoff::new(),
            fence: Fence::new(settings.fence_after(), start),
            permit,
            jobs,
            report,
            ack,
            written: written.clone(),
            terminate: terminate.clone(),
            config_maps,
            settings,
            read_tx,
            fresh_reads: Tasks(Vec::new()),
        };
        let inputs = Inputs {
            written,
            config,
            terminate,
            reads,
        };
        (tasks, shell, inputs)
    }

    /// Starts the Lease keeper, the ConfigMap follower and the shutdown watch, and returns
    /// them with the channels the event loop of [`Worker::run`] reads and writes.
    fn spawn_tasks(self, start: Instant) -> (Tasks, Channels) {
        let Worker {
            settings,
            client,
            shutdown,
        } = self;
        let (ack, ack_rx) = watch::channel(None);
        let (written_tx, written) = watch::channel(None);
        let (config_tx, config) = watch::channel(None);
        let (terminate_tx, terminate) = watch::channel(false);
        let holder = Holder {
            pod: settings.pod_name.clone(),
            namespace: settings.namespace.clone(),
            uid: settings.pod_uid.clone(),
            pool: settings.pool.clone(),
        };
        let tasks = Tasks(vec![
            tokio::spawn(lease::keep(
                Api::namespaced(client.clone(), &settings.namespace),
                holder,
                settings.lease_duration,
                settings.fence_after(),
                start,
                ack_rx,
                written_tx,
            )),
            tokio::spawn(source::follow(
                Api::namespaced(client, &settings.namespace),
                settings.own_config_map(),
                settings.pod_name.clone(),
                config_tx,
            )),
            tokio::spawn(async move {
                shutdown.await;
                terminate_tx.send_replace(true);
            }),
        ]);
        let channels = Channels {
            ack,
            written,
            config,
            terminate,
        };
        (tasks, channels)
    }
}

/// What the event loop of [`Worker::run`] reads.
struct Inputs {
    /// From the Lease keeper: each successful write.
    written: watch::Receiver<Option<Written>>,
    /// From the ConfigMap follower: the version observed last.
    config: watch::Receiver<Option<Observed>>,
    /// From the shutdown watch: SIGTERM came.
    terminate: watch::Receiver<bool>,
    /// The answers of the fresh reads issued after a renewal while fenced.
    reads: mpsc::UnboundedReceiver<(u64, Result<Option<Observed>, ReadError>)>,
}

/// The event loop's side of the background tasks.
struct Channels {
    /// To the Lease keeper: the version to acknowledge.
    ack: watch::Sender<Option<u64>>,
    /// From the Lease keeper: each successful write.
    written: watch::Receiver<Option<Written>>,
    /// From the ConfigMap follower: the version observed last.
    config: watch::Receiver<Option<Observed>>,
    /// From the shutdown watch: SIGTERM came.
    terminate: watch::Receiver<bool>,
}

/// The event loop's state and what it drives.
struct Shell<J> {
    core: Handoff,
    fence: Fence,
    jobs: J,
    report: Report,
    /// What the jobs check before each unit of work: held until the fence's deadline.
    permit: Permit,
    /// To the Lease keeper: the version to acknowledge.
    ack: watch::Sender<Option<u64>>,
    /// From the Lease keeper: its last success, read before each fence decision.
    written: watch::Receiver<Option<Written>>,
    terminate: watch::Receiver<bool>,
    config_maps: Api<ConfigMap>,
    settings: Settings,
    /// To the event loop: the answers of the reads after a fence.
    read_tx: mpsc::UnboundedSender<(u64, Result<Option<Observed>, ReadError>)>,
    fresh_reads: Tasks,
}

impl<J: Jobs> Shell<J> {
    /// Fences the worker if its last renewal is too old; true if it is fenced now.
    async fn check_fence(&mut self) -> bool {
        self.sync_fence().await;
        if self.fence.check(Instant::now()) {
            self.permit.set(None);
            self.fence_jobs().await;
        }
        !self.fence.is_live()
    }

    /// Moves the jobs' permit to the fence's deadline; a report line says when a renewal
    /// extended it for running jobs.
    fn follow_fence(&mut self) {
        let until = self.fence.deadline();
        if self.permit.until() == until {
            return;
        }
        self.permit.set(until);
        if until.is_some() && !self.core.running().is_empty() {
            self.report.write(self.core.applied(), self.core.running());
        }
    }

    /// Brings the fence and the acknowledgement up to date with the Lease keeper's last
    /// success (the loop may have been busy with a stop meanwhile); a fenced worker renewed
    /// in time reads the ConfigMap again.
    async fn sync_fence(&mut self) {
        let Some(written) = *self.written.borrow() else {
            return;
        };
        if let Some(version) = written.acked
            && self.core.acknowledged() != Some(version)
        {
            self.core.acked(version);
            info!(version, "acknowledged");
        }
        let renewal = self
            .fence
            .renewed(written.sent, written.streak, Instant::now());
        self.follow_fence();
        if renewal.newly_fenced {
            self.fence_jobs().await;
        }
        if let Some(read) = renewal.read {
            self.fresh_reads.spawn(read_afresh(
                self.config_maps.clone(),
                self.settings.clone(),
                read,
                self.read_tx.clone(),
            ));
        }
    }

    /// The answer to a read after a fence: the fence lifts if it is the awaited one, in time.
    async fn read_afresh(&mut self, read: u64, result: Result<Option<Observed>, ReadError>) {
        match result {
            Ok(found) if self.fence.read(read, Instant::now()) => {
                self.follow_fence();
                match found {
                    Some(observed) => {
                        info!(
                            version = observed.version,
                            "Lease renewed and config read again: running"
                        );
                        self.handle(&observed).await;
                    }
                    None => {
                        info!("Lease renewed; no ConfigMap yet: running nothing until it comes")
                    }
                }
            }
            Ok(_) => {}
            Err(error) => {
                warn!(%error, "cannot read the ConfigMap again; still fenced");
                self.fence.read_failed(read);
                self.follow_fence();
            }
        }
    }

    /// Applies one observed version and hands its acknowledgement to the Lease keeper.
    async fn handle(&mut self, observed: &Observed) {
        self.apply(observed).await;
        if let Some(version) = self.core.take_ack() {
            self.ack.send_replace(Some(version));
        }
    }

    /// Applies one observed version: stops, a report line, then (unless terminating or fenced)
    /// a report line and starts.
    async fn apply(&mut self, observed: &Observed) {
        let Some(change) = self.core.offer(observed.version, &observed.entry) else {
            debug!(version = observed.version, "version ignored");
            return;
        };
        let version = change.version;
        if !change.is_empty() {
            info!(version, stop = ?change.stop, start = ?change.start, "applying");
        }
        if !change.stop.is_empty() {
            for job in &change.stop {
                self.jobs.stop(job).await;
                self.core.stopped(job);
            }
            self.report.write(Some(version), self.core.running());
        }
        // A SIGTERM during the stops: the main loop stops the rest and nothing starts.
        if *self.terminate.borrow() {
            return;
        }
        // The stops may have taken long, or the process been paused: no start on an old
        // renewal.
        if self.check_fence().await {
            return;
        }
        let start = self.core.starting();
        if !start.is_empty() {
            self.report.write(Some(version), self.core.running());
            for job in &start {
                self.jobs.start(job, self.permit.clone()).await;
                self.core.started(job);
            }
        }
    }

    /// Stops every job: the Lease may look expired to the operator, which then hands them on.
    async fn fence_jobs(&mut self) {
        let stop = self.core.fence();
        for job in &stop {
            self.jobs.stop(job).await;
            self.core.stopped(job);
        }
        if !stop.is_empty() {
            self.report.write(self.core.applied(), self.core.running());
        }
        warn!(stopped = ?stop, "fenced: the Lease was not renewed in time; no job runs until it is renewed and the config read again");
    }

    /// SIGTERM: stops every job; nothing starts again.
    async fn terminate(&mut self) {
        info!("terminating: stopping every job");
        let stop = self.core.terminate();
        for job in &stop {
            self.jobs.stop(job).await;
            self.core.stopped(job);
        }
        if !stop.is_empty() {
            self.report.write(self.core.applied(), self.core.running());
        }
    }
}

/// GETs the ConfigMap for the fence's read `read` and sends the answer to the event loop: its
/// entry, or `None` when there is no ConfigMap yet (whatever the watch delivers later was
/// written after this read); a config without a usable entry, or no answer in time, is a failed
/// read.
async fn read_afresh(
    api: Api<ConfigMap>,
    settings: Settings,
    read: u64,
    out: mpsc::UnboundedSender<(u64, Result<Option<Observed>, ReadError>)>,
) {
    let name = settings.own_config_map();
    let get = api.get_opt(&name);
    let result = match tokio::time::timeout(settings.fence_after(), get).await {
        Ok(Ok(None)) => Ok(None),
        Ok(Ok(Some(config_map))) => source::observe(&config_map, &settings.pod_name)
            .map(Some)
            .ok_or(ReadError::NoConfig),
        Ok(Err(error)) => Err(ReadError::Api(error)),
        Err(_) => Err(ReadError::TimedOut),
    };
    let _ = out.send((read, result));
}

/// Why the ConfigMap could not be read again after a fence.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Api(kube::Error),
    #[error("no usable worker config in the ConfigMap")]
    NoConfig,
    #[error("no answer in time")]
    TimedOut,
}
