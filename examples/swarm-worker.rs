//! Example worker: reads its own entry of the `config.yml` the operator writes, logs its jobs and
//! the config version, and reloads when the file changes.
//!
//! The pod name comes from `POD_NAME` (the downward API); the config path defaults to where
//! `examples/worker-statefulset.yaml` mounts the ConfigMap. A real worker would start and stop
//! its jobs where this one logs them.
//!
//! ```text
//! POD_NAME=swarm-worker-0 cargo run --example swarm-worker -- --config ./config.yml
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use swarm_assign::worker_config::WorkerConfig;
use tracing::{info, warn};

/// Runs the jobs the operator assigned to this pod.
#[derive(Parser, Debug)]
#[command(name = "swarm-worker")]
struct Args {
    /// The mounted config file.
    #[arg(long, env = "CONFIG_PATH", default_value = "/app/config/config.yml")]
    config: PathBuf,
    /// This worker's pod name, `<statefulset>-<ordinal>`.
    #[arg(long, env = "POD_NAME")]
    pod_name: String,
    /// How often to check the file for changes.
    #[arg(long, env = "POLL_SECONDS", default_value_t = 2)]
    poll_seconds: u64,
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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let args = Args::parse();
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
            last = Some(now);
        }
    }
    info!(pod = %args.pod_name, "stopping");
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
}
