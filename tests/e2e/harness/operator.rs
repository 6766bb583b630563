//! The operator under test: the built binary, run as its own process.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::poll::eventually_within;

/// How long the operator may take to start and sync its caches.
const STARTUP: Duration = Duration::from_secs(60);

/// A running `swarm-operator`, killed when dropped.
pub struct Operator {
    child: tokio::process::Child,
    http_addr: SocketAddr,
    log: PathBuf,
}

impl Operator {
    /// Starts `swarm-operator run [extra_args]` with `KUBECONFIG=kubeconfig` and
    /// `POD_NAME=pod_name` (its identity, as in a cluster), its health endpoints on a free
    /// loopback port, and everything it prints appended to `log`.
    pub fn spawn(kubeconfig: &Path, extra_args: &[&str], pod_name: &str, log: &Path) -> Operator {
        let http_addr = free_loopback_addr();
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let err = out.try_clone().expect("duplicate the log file handle");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
            .args(["run", "--http-addr", &http_addr.to_string()])
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
            http_addr,
            log: log.to_path_buf(),
        }
    }

    /// Waits until `/readyz` answers 200 (the operator's caches have synced); fails the test
    /// at once if the process exits first.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) {
        let url = format!("http://{}/readyz", self.http_addr);
        let log = self.log.clone();
        let child = &mut self.child;
        eventually_within("the operator to report ready on /readyz", STARTUP, || {
            let exited = child.try_wait().expect("poll the operator process");
            let request = http.get(&url).send();
            let log = log.clone();
            async move {
                if let Some(status) = exited {
                    panic!(
                        "the operator exited during start-up ({status}); its log:\n{}",
                        read_log(&log)
                    );
                }
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
        let url = format!("http://{}/metrics", self.http_addr);
        let response = http.get(&url).send().await.expect("GET /metrics");
        assert!(
            response.status().is_success(),
            "/metrics answered {}",
            response.status()
        );
        response.text().await.expect("read /metrics")
    }

    /// `/readyz`: its status code and body.
    pub async fn readyz(&self, http: &reqwest::Client) -> (u16, String) {
        let url = format!("http://{}/readyz", self.http_addr);
        let response = http.get(&url).send().await.expect("GET /readyz");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
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

/// A loopback address with a port that was free a moment ago.
fn free_loopback_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address")
}
