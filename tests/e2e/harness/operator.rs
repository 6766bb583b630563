//! The operator under test: the built binary, run as its own process.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::poll::eventually_within;

/// How long the operator may take to start and sync its caches.
const STARTUP: Duration = Duration::from_secs(60);

/// What the operator logs, with the address it bound, once its probes' server listens.
const LISTENING: &str = "serving /healthz and /readyz";
/// What it logs, with the address it bound, once its `/metrics` server listens.
const METRICS_LISTENING: &str = "serving /metrics";

/// How the operator under test serves `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsServing {
    /// Plain HTTP to anyone (`--metrics-insecure`), as for any local run.
    Insecure,
    /// HTTPS to the tokens the API server allows, as in a pod.
    Authorized,
}

/// A running `swarm-operator`, killed when dropped.
pub struct Operator {
    child: tokio::process::Child,
    /// Known once the process has logged it (see [`LISTENING`]).
    http_addr: Option<SocketAddr>,
    /// Known once the process has logged it (see [`METRICS_LISTENING`]).
    metrics_addr: Option<SocketAddr>,
    log: PathBuf,
    /// Where this process's part of `log` starts: a replica restarted under the same name
    /// appends to its predecessor's log.
    log_start: u64,
}

impl Operator {
    /// Starts `swarm-operator run [extra_args]` with `KUBECONFIG=kubeconfig` and
    /// `POD_NAME=pod_name` (its identity, as in a cluster), its health endpoints and its
    /// `/metrics` on loopback ports it picks itself (a port chosen here and bound there could be
    /// taken in between by any of the scenarios running beside it), `/metrics` in plain HTTP
    /// as for any local run (only a process in a pod is scraped with a token), and everything
    /// it prints appended to `log`.
    pub fn spawn(kubeconfig: &Path, extra_args: &[&str], pod_name: &str, log: &Path) -> Operator {
        Self::spawn_serving(
            kubeconfig,
            extra_args,
            pod_name,
            log,
            MetricsServing::Insecure,
        )
    }

    /// Like [`Operator::spawn`], serving `/metrics` as `metrics` says.
    pub fn spawn_serving(
        kubeconfig: &Path,
        extra_args: &[&str],
        pod_name: &str,
        log: &Path,
        metrics: MetricsServing,
    ) -> Operator {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let log_start = out.metadata().expect("stat the operator log").len();
        let err = out.try_clone().expect("duplicate the log file handle");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
            .args(["run", "--http-addr", "127.0.0.1:0"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args((metrics == MetricsServing::Insecure).then_some("--metrics-insecure"))
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", pod_name)
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("SWARM_E2E_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the swarm-operator binary");
        Operator {
            child,
            http_addr: None,
            metrics_addr: None,
            log: log.to_path_buf(),
            log_start,
        }
    }

    /// Waits until `/readyz` answers 200 (the operator's caches have synced); fails the test
    /// at once if the process exits first.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) {
        let (log, log_start) = (self.log.clone(), self.log_start);
        let child = &mut self.child;
        let (http_addr, metrics_addr) = (&mut self.http_addr, &mut self.metrics_addr);
        eventually_within("the operator to report ready on /readyz", STARTUP, || {
            let exited = child.try_wait().expect("poll the operator process");
            if http_addr.is_none() {
                *http_addr = bound_addr(&read_log(&log), log_start, LISTENING);
            }
            if metrics_addr.is_none() {
                *metrics_addr = bound_addr(&read_log(&log), log_start, METRICS_LISTENING);
            }
            let request = http_addr.map(|addr| http.get(format!("http://{addr}/readyz")).send());
            let log = log.clone();
            async move {
                if let Some(status) = exited {
                    panic!(
                        "the operator exited during start-up ({status}); its log:\n{}",
                        read_log(&log)
                    );
                }
                let Some(request) = request else {
                    return Err(format!("no \"{LISTENING}\" in its log yet"));
                };
                match request.await {
                    Ok(response) if response.status().is_success() => Ok(()),
                    Ok(response) => Err(format!("/readyz answered {}", response.status())),
                    Err(e) => Err(format!("/readyz unreachable: {e}")),
                }
            }
        })
        .await;
    }

    /// What `/metrics` serves to a client that does not ask for OpenMetrics (the classic
    /// Prometheus text format, as `curl` and `promtool` read it).
    pub async fn metrics(&self, http: &reqwest::Client) -> String {
        let url = format!("http://{}/metrics", self.metrics_addr());
        let response = http.get(&url).send().await.expect("GET /metrics");
        assert!(
            response.status().is_success(),
            "/metrics answered {}",
            response.status()
        );
        response.text().await.expect("read /metrics")
    }

    /// The address its `/metrics` server listens on.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
            .expect("the operator has started (wait_ready) before its endpoints are used")
    }

    /// `/readyz`: its status code and body.
    pub async fn readyz(&self, http: &reqwest::Client) -> (u16, String) {
        let url = format!("http://{}/readyz", self.addr());
        let response = http.get(&url).send().await.expect("GET /readyz");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// The address its HTTP server listens on.
    fn addr(&self) -> SocketAddr {
        self.http_addr
            .expect("the operator has started (wait_ready) before its endpoints are used")
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the operator process runs");
        let status = std::process::Command::new("kill")
            .args(["-s", signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} {pid} failed");
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    /// Kills the process with SIGKILL, as a crash or an evicted pod would end it, and reaps it.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill the operator");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("poll the operator process")
            .is_none()
    }
}

/// The operator's log as far as it was written (empty if there is none).
pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The address in the first `what` line with one that `log` holds after byte `start`.
fn bound_addr(log: &str, start: u64, what: &str) -> Option<SocketAddr> {
    let own = log.get(usize::try_from(start).ok()?..)?;
    own.lines()
        .filter(|line| line.contains(what))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("addr="))
        })?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_addresses_are_read_from_this_process_s_part_of_the_log() {
        let earlier = "2026-11-29T15:55:30Z  INFO swarm_operator: serving /healthz and /readyz addr=127.0.0.1:1111\n";
        let own = "2026-11-29T15:56:00Z  INFO swarm_operator: starting swarm-operator version=\"0.1.0\"\n\
                   2026-11-29T15:56:00Z  INFO swarm_operator: serving /healthz and /readyz addr=127.0.0.1:2222\n\
                   2026-11-29T15:56:00Z  INFO swarm_operator: serving /metrics addr=127.0.0.1:3333\n";
        let log = format!("{earlier}{own}");
        let start = earlier.len() as u64;
        assert_eq!(
            bound_addr(&log, start, LISTENING),
            Some("127.0.0.1:2222".parse().unwrap())
        );
        assert_eq!(
            bound_addr(&log, start, METRICS_LISTENING),
            Some("127.0.0.1:3333".parse().unwrap())
        );
        assert_eq!(bound_addr(earlier, start, LISTENING), None);
        assert_eq!(bound_addr("", 0, LISTENING), None);
    }
}
