//! The application-facing side: a [`Jobs`] implementation starts and stops jobs, [`Worker::run`]
//! drives it through the protocol (read, apply, acknowledge, renew, terminate).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::Error;
use crate::handoff::Handoff;
use crate::lease::{self, Holder};
use crate::report::Report;
use crate::settings::{PartialSettings, Settings};
use crate::source::{self, Observed};

/// What the application does with its jobs. The worker calls these one at a time, never for a
/// job in a state it is not in: `stop` only for a job it started.
pub trait Jobs: Send {
    /// Starts `job`; returns once it is launched (it then runs until stopped).
    fn start(&mut self, job: &str) -> impl Future<Output = ()> + Send;
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
    /// Reads `POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `SWARM_POOL`, `SWARM_CONFIG_MAP`,
    /// `SWARM_CONFIG_FILE` and `SWARM_WORKER_REPORT`.
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

    /// Sets the mounted config file (`SWARM_CONFIG_FILE`).
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.config_file = Some(path.into());
        self
    }

    /// Sets the report file (`SWARM_WORKER_REPORT`).
    pub fn report(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.report = Some(path.into());
        self
    }

    /// Sets the Lease duration (default 10 s).
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.settings.lease_duration = Some(duration);
        self
    }

    /// Sets how long a terminating worker waits to acknowledge a version without jobs
    /// (default 25 s); keep it below the pod's grace period.
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
    /// this pod's entry (stops first, then starts) and acknowledges it on the Lease. On the
    /// shutdown signal it stops every job, starts none again, and returns once it has
    /// acknowledged a version whose entry has no jobs, or at the termination deadline.
    pub async fn run<J: Jobs>(self, mut jobs: J) -> Exit {
        let settings = self.settings.clone();
        let report = Report::new(
            settings.report.clone(),
            &settings.pod_name,
            &settings.pod_uid,
        );
        report.write(None, &[]);
        let (_tasks, channels) = self.spawn_tasks();
        let Channels {
            ack,
            mut written,
            mut config,
            mut terminate,
        } = channels;
        let mut core = Handoff::new();
        let mut deadline: Option<Instant> = None;
        loop {
            tokio::select! {
                Ok(()) = config.changed() => {
                    let observed = config.borrow_and_update().clone();
                    if let Some(observed) = observed {
                        apply(&mut core, &observed, &mut jobs, &report, &terminate).await;
                        if let Some(version) = core.take_ack() {
                            ack.send_replace(Some(version));
                        }
                    }
                }
                Ok(()) = terminate.changed(), if !core.terminating() => {
                    info!("terminating: stopping every job");
                    let stop = core.terminate();
                    for job in &stop {
                        jobs.stop(job).await;
                        core.stopped(job);
                    }
                    if !stop.is_empty() {
                        report.write(core.applied(), core.running());
                    }
                    deadline = Some(Instant::now() + settings.termination_deadline);
                }
                Ok(()) = written.changed() => {
                    if let Some(version) = *written.borrow_and_update()
                        && core.acknowledged() != Some(version)
                    {
                        core.acked(version);
                        info!(version, "acknowledged");
                    }
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)),
                    if deadline.is_some() =>
                {
                    warn!("termination deadline reached without an acknowledgement");
                    return Exit::DeadlineReached;
                }
            }
            if core.done()
                && let Some(version) = core.acknowledged()
            {
                info!(version, "terminated: acknowledged a version without jobs");
                return Exit::Acknowledged { version };
            }
        }
    }
}

impl Worker {
    /// Starts the Lease keeper, the ConfigMap follower and the shutdown watch, and returns
    /// them with the channels the event loop of [`Worker::run`] reads and writes.
    fn spawn_tasks(self) -> (Tasks, Channels) {
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
                ack_rx,
                written_tx,
            )),
            tokio::spawn(source::follow(
                Api::namespaced(client, &settings.namespace),
                settings.config_map.clone(),
                settings.pod_name.clone(),
                settings.config_file.clone(),
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

/// The event loop's side of the background tasks.
struct Channels {
    /// To the Lease keeper: the version to acknowledge.
    ack: watch::Sender<Option<u64>>,
    /// From the Lease keeper: the version the Lease now acknowledges.
    written: watch::Receiver<Option<u64>>,
    /// From the ConfigMap follower: the version observed last.
    config: watch::Receiver<Option<Observed>>,
    /// From the shutdown watch: SIGTERM came.
    terminate: watch::Receiver<bool>,
}

/// Applies one observed version: stops, a report line, then (unless terminating) a report line
/// and starts.
async fn apply<J: Jobs>(
    core: &mut Handoff,
    observed: &Observed,
    jobs: &mut J,
    report: &Report,
    terminate: &watch::Receiver<bool>,
) {
    let Some(change) = core.offer(observed.version, &observed.entry, observed.from_api) else {
        debug!(version = observed.version, "version ignored");
        return;
    };
    let version = change.version;
    if !change.is_empty() {
        info!(version, stop = ?change.stop, start = ?change.start, "applying");
    }
    if !change.stop.is_empty() {
        for job in &change.stop {
            jobs.stop(job).await;
            core.stopped(job);
        }
        report.write(Some(version), core.running());
    }
    // A SIGTERM during the stops: the main loop stops the rest and nothing starts.
    if *terminate.borrow() {
        return;
    }
    let start = core.starting();
    if !start.is_empty() {
        report.write(Some(version), core.running());
        for job in &start {
            jobs.start(job).await;
            core.started(job);
        }
    }
}
