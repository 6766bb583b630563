//! The operator replicas, supervised as a Deployment's pods would be: each runs the built
//! binary out of cluster with leader election, through its own toxiproxy proxy and as its
//! own ServiceAccount, and is started again whenever it exits. Every exit is recorded, with
//! whether the soak itself killed it, so a crash loop can be told from the faults' effects.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;

/// How long a replica's leader lease lasts (short, so a soak sees many handovers).
pub const LEASE: Duration = Duration::from_secs(6);
/// Namespace and name of the leader-election Lease.
pub const LEASE_NAMESPACE: &str = "swarm-system";
pub const LEASE_NAME: &str = "swarm-operator";
/// Wait before starting a replica that exited again (a kubelet backs off longer; the soak
/// wants the replica back while faults are still coming).
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// One exit of a replica.
#[derive(Clone, Debug)]
pub struct Exit {
    pub replica: String,
    /// Seconds since the soak started.
    pub at: f64,
    pub status: String,
    /// The soak killed it (a leader-kill fault or the final shutdown).
    pub killed_by_soak: bool,
}

#[derive(Default)]
struct State {
    pid: Option<u32>,
    /// Set just before the soak signals the process with SIGKILL.
    killing: bool,
    stopping: bool,
    starts: u32,
    exits: Vec<Exit>,
    rss_peak_kb: u64,
    rss_last_kb: u64,
}

/// One supervised replica.
#[derive(Clone)]
pub struct Replica {
    /// Its identity (POD_NAME), also its ServiceAccount's name.
    pub name: String,
    /// Its toxiproxy proxy's name.
    pub proxy: String,
    pub log: PathBuf,
    pub http_addr: String,
    state: Arc<Mutex<State>>,
}

impl Replica {
    /// Starts replica `name` with `kubeconfig`, its `/readyz` on `http_addr`, logging to
    /// `log`, and keeps it running until [`Replica::shutdown`].
    pub fn supervise(
        name: &str,
        proxy: &str,
        kubeconfig: &Path,
        http_addr: String,
        log: PathBuf,
        clock: Clock,
    ) -> Replica {
        let replica = Replica {
            name: name.to_owned(),
            proxy: proxy.to_owned(),
            log,
            http_addr,
            state: Arc::default(),
        };
        let this = replica.clone();
        let kubeconfig = kubeconfig.to_path_buf();
        tokio::spawn(async move {
            loop {
                if this.state().stopping {
                    break;
                }
                let mut child = match this.spawn(&kubeconfig) {
                    Ok(child) => child,
                    Err(e) => {
                        eprintln!("soak: cannot start replica {}: {e}", this.name);
                        tokio::time::sleep(RESTART_DELAY).await;
                        continue;
                    }
                };
                {
                    let mut state = this.state();
                    state.pid = child.id();
                    state.starts += 1;
                }
                let status = child.wait().await;
                let stopping = this.record_exit(status, clock.now());
                if stopping {
                    break;
                }
                tokio::time::sleep(RESTART_DELAY).await;
            }
        });
        let sampler = replica.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let pid = sampler.state().pid;
                if let Some(kb) = pid.and_then(rss_kb) {
                    let mut state = sampler.state();
                    state.rss_peak_kb = state.rss_peak_kb.max(kb);
                    state.rss_last_kb = kb;
                }
            }
        });
        replica
    }

    /// Records an exit; returns whether the soak is stopping the replica.
    fn record_exit(&self, status: std::io::Result<std::process::ExitStatus>, at: f64) -> bool {
        let mut state = self.state();
        state.pid = None;
        let exit = Exit {
            replica: self.name.clone(),
            at,
            status: status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            killed_by_soak: std::mem::take(&mut state.killing) || state.stopping,
        };
        if !exit.killed_by_soak {
            eprintln!(
                "soak: t={:.1}s replica {} exited ({}); starting it again",
                exit.at, exit.replica, exit.status
            );
        }
        state.exits.push(exit);
        state.stopping
    }

    fn spawn(&self, kubeconfig: &Path) -> std::io::Result<tokio::process::Child> {
        let out = File::options().create(true).append(true).open(&self.log)?;
        let err = out.try_clone()?;
        let lease = LEASE.as_secs().to_string();
        tokio::process::Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
            .args(["run", "--http-addr", &self.http_addr, "--leader-elect"])
            // Two replicas on one host: /metrics on a port each picks (and unused here).
            .args(["--metrics-addr", "127.0.0.1:0", "--metrics-insecure"])
            .args(["--leader-elect-namespace", LEASE_NAMESPACE])
            .args(["--leader-elect-lease-duration", &lease])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", &self.name)
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("SWARM_SOAK_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The running process, if any.
    pub fn pid(&self) -> Option<u32> {
        self.state().pid
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to the running process; a SIGKILL is recorded
    /// as the soak's own. Returns whether a process was there to signal.
    pub fn signal(&self, signal: &str) -> bool {
        let mut state = self.state();
        let Some(pid) = state.pid else {
            return false;
        };
        if signal == "KILL" {
            state.killing = true;
        }
        drop(state);
        std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Whether `/readyz` answers 200.
    pub async fn ready(&self, http: &reqwest::Client) -> bool {
        http.get(format!("http://{}/readyz", self.http_addr))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// Stops supervising and kills the process (after SIGCONT, in case it is frozen).
    pub async fn shutdown(&self) {
        self.state().stopping = true;
        self.signal("CONT");
        self.signal("KILL");
        for _ in 0..50 {
            if self.pid().is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every exit so far.
    pub fn exits(&self) -> Vec<Exit> {
        self.state().exits.clone()
    }

    /// How many times the process was started.
    pub fn starts(&self) -> u32 {
        self.state().starts
    }

    /// Peak and last sampled resident set size, in kB.
    pub fn rss_kb(&self) -> (u64, u64) {
        let state = self.state();
        (state.rss_peak_kb, state.rss_last_kb)
    }
}

/// VmRSS of process `pid` from /proc, in kB.
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
