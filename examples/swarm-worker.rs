//! Example worker, in one of two modes (`--mode`, `SWARM_WORKER_MODE`).
//!
//! `acknowledge` (the default when `POD_UID`, the downward API's `metadata.uid`, is set): a
//! complete worker of the acknowledged handoff (`rollout.policy: Acknowledge`), built on the
//! `swarm-worker` library: it reads its own ConfigMap with fence reads (quorum GETs, every half
//! permit and at once on a watch event), runs each job as a task that logs while a read that
//! listed it was sent less than the permit ago, stops and starts them as each read asks,
//! acknowledges each new version on its Lease (written at start and on each acknowledgement
//! only), and serves `/readyz` and `/healthz`. Its settings are the library's (`POD_NAME`,
//! `POD_NAMESPACE`, `POD_UID`, `SWARM_POOL`, `SWARM_CONFIG_MAP`, `SWARM_WORKER_REPORT`,
//! `SWARM_PERMIT_SECONDS`, `SWARM_WORKER_HEALTH_ADDR`, `SWARM_TERMINATION_SECONDS`).
//!
//! `file` (the default without `POD_UID`), for the rollout policies that deliver changes
//! through the mounted file: it reads its own entry of the mounted `config.yml`, logs its jobs
//! and the config version, reloads when the kubelet refreshes the file, and stops on SIGTERM.
//! The config path defaults to where `examples/worker-statefulset.yaml` mounts the ConfigMap.
//! It answers `200` on `/readyz` and `/healthz` at `SWARM_WORKER_HEALTH_ADDR` (default
//! `0.0.0.0:8081`) while it runs, so a pod template's probe works under any policy. With
//! `SWARM_WORKER_REPORT` set it appends the protocol's report line (pod, `POD_UID`, config
//! version, jobs) at start, at each change and on SIGTERM, as the library does.
//!
//! Exit codes: 0 once stopped; 2 when a setting is refused or the health address cannot be
//! bound.
//!
//! ```text
//! POD_NAME=swarm-worker-0 cargo run --example swarm-worker -- --config ./config.yml
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use k8s_openapi::jiff::Timestamp;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::report::{self, ReportLine};
use swarm_worker::report::append;
use swarm_worker::{Jobs, Permit, Worker, health, settings};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

/// Runs the jobs the operator assigned to this pod.
///
/// Under `acknowledge` the protocol's settings come from the environment: SWARM_POOL,
/// SWARM_CONFIG_MAP, POD_NAMESPACE, SWARM_PERMIT_SECONDS (default 30: a fence read lets its jobs
/// run for this long after its send; reads every half of it), SWARM_WORKER_HEALTH_ADDR
/// (default 0.0.0.0:8081, also under `file`) and SWARM_TERMINATION_SECONDS (default 25).
#[derive(Parser, Debug)]
#[command(name = "swarm-worker")]
struct Args {
    /// How the worker learns its jobs: through the API with acknowledgements (`acknowledge`),
    /// or from the mounted file (`file`); by default `acknowledge` when `POD_UID` is set.
    #[arg(long, env = "SWARM_WORKER_MODE", value_enum)]
    mode: Option<Mode>,
    /// The mounted config file (without `POD_UID` only).
    #[arg(long, env = "CONFIG_PATH", default_value = "/app/config/config.yml")]
    config: PathBuf,
    /// This worker's pod name, `<statefulset>-<ordinal>`.
    #[arg(long, env = "POD_NAME")]
    pod_name: String,
    /// How often to check the file for changes (without `POD_UID` only).
    #[arg(long, env = "POLL_SECONDS", default_value_t = 2)]
    poll_seconds: u64,
    /// This pod's uid, for the report's lines (without `POD_UID` the mode is `file`).
    #[arg(long, env = "POD_UID")]
    pod_uid: Option<String>,
    /// Where to append the report lines (`file` mode; the library reads it in `acknowledge`).
    #[arg(long, env = "SWARM_WORKER_REPORT")]
    report: Option<PathBuf>,
}

/// How the worker learns its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// `rollout.policy: Acknowledge`: read through the API, acknowledge on a Lease.
    Acknowledge,
    /// `rollout.policy: DeletePods` or `None`: read the mounted `config.yml`.
    File,
}

/// What the worker found in the config, compared between polls so only changes are logged.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Assignment {
    /// No file (the ConfigMap is optional in the pod spec and may not exist yet).
    NoFile,
    /// The file cannot be read as a worker config.
    Unreadable(String),
    /// The config has no entry for this pod (it was written for fewer replicas).
    NoEntry {
        /// Config version.
        version: u64,
    },
    /// This pod's jobs.
    Jobs {
        /// Config version.
        version: u64,
        /// Version at which this worker's job set last changed.
        since: u64,
        /// The jobs, in spec order.
        jobs: Vec<String>,
    },
}

fn read_assignment(text: Option<&str>, pod: &str) -> Assignment {
    let Some(text) = text else {
        return Assignment::NoFile;
    };
    match WorkerConfig::parse(text) {
        Err(e) => Assignment::Unreadable(e.to_string()),
        Ok(config) => match config.workload(pod) {
            None => Assignment::NoEntry {
                version: config.version,
            },
            Some(workload) => Assignment::Jobs {
                version: config.version,
                since: workload.version,
                jobs: workload.jobs.clone(),
            },
        },
    }
}

fn log(assignment: &Assignment, pod: &str) {
    match assignment {
        Assignment::NoFile => info!(pod, "no assignment yet: no config file; waiting"),
        Assignment::Unreadable(error) => {
            warn!(pod, %error, "no assignment yet: config unreadable; waiting")
        }
        Assignment::NoEntry { version } => {
            info!(
                pod,
                version, "no assignment yet: no entry for this pod; waiting"
            )
        }
        Assignment::Jobs {
            version,
            since,
            jobs,
        } => {
            info!(pod, version, since, count = jobs.len(), jobs = ?jobs, "running jobs")
        }
    }
}

/// Each job is a task that logs now and then until it is told to stop.
#[derive(Default)]
struct LoggingJobs {
    running: HashMap<String, (oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Jobs for LoggingJobs {
    async fn start(&mut self, job: &str, permit: Permit) {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let name = job.to_string();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tokio::select! {
                    // Each unit of work first checks the permit: after a pause, this task may
                    // run before the worker's timer stops it.
                    _ = tick.tick() => {
                        if permit.holds() {
                            info!(job = %name, "working");
                        } else {
                            warn!(job = %name, "not working: the permit lapsed");
                        }
                    }
                    _ = &mut stopped => break,
                }
            }
        });
        info!(job, "started");
        self.running.insert(job.to_string(), (stop, task));
    }

    async fn stop(&mut self, job: &str) {
        if let Some((stop, task)) = self.running.remove(job) {
            let _ = stop.send(());
            // Waiting for the task is what makes the acknowledgement that follows true.
            let _ = task.await;
            info!(job, "stopped");
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let args = Args::parse();
    let mode = args.mode.unwrap_or(if args.pod_uid.is_some() {
        Mode::Acknowledge
    } else {
        Mode::File
    });
    match mode {
        Mode::Acknowledge => acknowledging(&args).await,
        Mode::File => follow_file(&args).await,
    }
}

/// The acknowledged handoff: the library drives the jobs, the Lease and readiness.
async fn acknowledging(args: &Args) {
    let worker = match Worker::builder().pod_name(&args.pod_name).build().await {
        Ok(worker) => worker,
        Err(e) => {
            error!(error = %e, "cannot start the worker");
            std::process::exit(2);
        }
    };
    let exit = worker.run(LoggingJobs::default()).await;
    info!(pod = %args.pod_name, ?exit, "stopping");
}

/// The mounted-file policies: poll the file and log this pod's entry when it changes, answering
/// ready all along.
async fn follow_file(args: &Args) {
    let addr = std::env::var("SWARM_WORKER_HEALTH_ADDR").ok();
    let _health = serve_health(addr.as_deref()).await.unwrap_or_else(|e| {
        error!(error = %e, "cannot start the worker");
        std::process::exit(2);
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    let mut interval = tokio::time::interval(Duration::from_secs(args.poll_seconds.max(1)));
    let mut last: Option<Assignment> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        // A ConfigMap volume swaps the file atomically: a plain read sees old or new content.
        // The file is small, so a blocking read on this single-threaded runtime is fine.
        let text = std::fs::read_to_string(&args.config).ok();
        let now = read_assignment(text.as_deref(), &args.pod_name);
        if last.as_ref() != Some(&now) {
            if last.is_some() {
                info!(pod = %args.pod_name, "config changed; reloading");
            }
            log(&now, &args.pod_name);
            write_report(args, &now);
            last = Some(now);
        }
    }
    // The jobs end with the process: say so before exiting, within the grace period.
    write_report(args, &Assignment::NoFile);
    info!(pod = %args.pod_name, "stopping");
}

/// Serves `/readyz` and `/healthz`, both always `200`, at `addr` (the value of
/// `SWARM_WORKER_HEALTH_ADDR`) until the returned task is dropped.
async fn serve_health(
    addr: Option<&str>,
) -> Result<(std::net::SocketAddr, AbortOnDrop), swarm_worker::Error> {
    let addr = settings::health_addr(addr)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| swarm_worker::Error::Health { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| swarm_worker::Error::Health { addr, source })?;
    info!("serving readiness on {bound}");
    let task = tokio::spawn(health::serve(listener, || true));
    Ok((bound, AbortOnDrop(task)))
}

/// Stops a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Appends the report line of `assignment` (what runs from now on), when there is a report.
fn write_report(args: &Args, assignment: &Assignment) {
    let Some(path) = &args.report else {
        return;
    };
    let (version, running) = match assignment {
        Assignment::Jobs { version, jobs, .. } => (Some(*version), jobs.as_slice()),
        Assignment::NoEntry { version } => (Some(*version), &[][..]),
        Assignment::NoFile | Assignment::Unreadable(_) => (None, &[][..]),
    };
    let line = ReportLine {
        pod: &args.pod_name,
        uid: args.pod_uid.as_deref().unwrap_or_default(),
        version,
        running,
        at: report::timestamp(Timestamp::now()),
        until: None,
    };
    if let Err(error) = append(path, &line) {
        warn!(path = %path.display(), %error, "cannot write the worker report");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "version: 3\nworkloads:\n  swarm-worker-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  swarm-worker-1:\n    version: 1\n    jobs: []\n";

    #[test]
    fn a_worker_finds_its_own_jobs_and_version() {
        assert_eq!(
            read_assignment(Some(CONFIG), "swarm-worker-0"),
            Assignment::Jobs {
                version: 3,
                since: 3,
                jobs: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(
            read_assignment(Some(CONFIG), "swarm-worker-1"),
            Assignment::Jobs {
                version: 3,
                since: 1,
                jobs: vec![]
            }
        );
    }

    #[test]
    fn a_worker_without_file_or_entry_waits() {
        assert_eq!(read_assignment(None, "swarm-worker-0"), Assignment::NoFile);
        assert_eq!(
            read_assignment(Some(CONFIG), "swarm-worker-7"),
            Assignment::NoEntry { version: 3 }
        );
        assert!(matches!(
            read_assignment(Some("{{{ not yaml"), "swarm-worker-0"),
            Assignment::Unreadable(_)
        ));
    }

    #[tokio::test]
    async fn a_stopped_job_has_ended_when_stop_returns() {
        let mut jobs = LoggingJobs::default();
        jobs.start("a", Permit::default()).await;
        let (_, task) = jobs.running.get("a").expect("a runs");
        assert!(!task.is_finished());
        jobs.stop("a").await;
        assert!(jobs.running.is_empty());
        jobs.stop("never-started").await;
    }

    #[tokio::test]
    async fn the_file_mode_answers_ready_while_it_runs_on_a_free_port() {
        let (addr, health) = serve_health(Some("127.0.0.1:0")).await.unwrap();
        assert_ne!(addr.port(), 0);
        for path in ["readyz", "healthz"] {
            let status = reqwest::get(format!("http://{addr}/{path}"))
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200, "{path}");
        }
        drop(health);
        assert!(serve_health(Some("localhost:8081")).await.is_err());
    }
}
