//! Real worker processes for the pods of an acknowledging pool (`rollout.policy: Acknowledge`).
//!
//! Neither kube-sim nor kwok runs containers, so the fleet plays the kubelet's part for the pool's
//! workers: it starts one worker process per pod instance once the pod is Running, sends it SIGTERM
//! when the pod starts terminating and SIGKILL when the grace period is over, and holds the pod
//! object with a finalizer until the process is gone, then deletes it, as a kubelet removes a pod
//! only once its containers stopped. Each process serves its readiness on a loopback port of its
//! own (`SWARM_WORKER_HEALTH_ADDR`), which the fleet writes into the pod's
//! [`PROBE_ADDRESS_ANNOTATION`] so that kube-sim's kubelet probes it there: the pod is Ready as the
//! worker says, as a real kubelet decides it from the [`readiness_probe`] of the pod template. Each
//! process speaks the protocol to the API server on its own (the Rust example built on the
//! `swarm-worker` library, the Python worker, or the Go example on `worker-go`) and appends what it
//! runs to its report file (`SWARM_WORKER_REPORT`); the duplicate watch reads those files (see
//! [`Reports`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube_sim::controllers::prober::PROBE_ADDRESS_ANNOTATION;
use serde_json::{Value, json};

use crate::harness::ports;

mod kubelet_prober;
mod process;
mod reports;

pub use reports::Reports;

use process::{go_worker, python_worker, rust_worker, send, spawn};

/// How often the fleet compares the pods with its processes.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// Which program runs a pod's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// `examples/swarm-worker.rs` on the `swarm-worker` library.
    Rust,
    /// The package `examples/python-worker/swarm_worker` on the official client.
    Python,
    /// `worker-go/examples/swarm-worker` on the Go module, on client-go.
    Go,
    /// Rust, Python and Go in turn, in the order the pods start: one pool, three
    /// implementations.
    Mixed,
}

impl Workers {
    fn program(self, started_so_far: usize) -> Program {
        match self {
            Workers::Rust => Program::Rust,
            Workers::Python => Program::Python,
            Workers::Go => Program::Go,
            Workers::Mixed => [Program::Rust, Program::Python, Program::Go][started_so_far % 3],
        }
    }

    fn runs(self, program: Program) -> bool {
        self == Workers::Mixed || self.program(0) == program
    }
}

/// One implementation of the worker protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Rust,
    Python,
    Go,
}

impl Program {
    /// Its name in [`Fleet::started`].
    pub fn name(self) -> &'static str {
        match self {
            Program::Rust => "rust",
            Program::Python => "python",
            Program::Go => "go",
        }
    }
}

/// What the fleet needs to know about the pool.
#[derive(Clone, Debug)]
pub struct FleetSpec {
    pub namespace: String,
    pub pool: String,
    pub config_map: String,
    /// The label selector of the pool's pods (`app=swarm-worker`).
    pub selector: String,
    pub workers: Workers,
    /// The kubeconfig the workers use.
    pub kubeconfig: PathBuf,
    /// Where the reports and the workers' logs go.
    pub dir: PathBuf,
    /// Whether the fleet probes its workers' readiness and writes their pods' Ready condition
    /// itself, as a kubelet does: on a real control plane, whose kwok nodes run no probes
    /// (kube-sim's kubelet probes them on its own).
    pub probes_as_kubelet: bool,
}

/// One worker process, for one pod instance.
struct Process {
    pod: String,
    /// Where it serves its readiness.
    health: String,
    program: Program,
    child: tokio::process::Child,
    terminated: bool,
    exited: bool,
}

#[derive(Default)]
struct State {
    /// By pod uid.
    processes: BTreeMap<String, Process>,
    /// Workers that exited before their pod terminated, with how.
    crashes: Vec<String>,
}

/// The worker processes of one pool; every process is killed when the fleet is dropped.
pub struct Fleet {
    state: Arc<Mutex<State>>,
    reports: Reports,
    task: tokio::task::JoinHandle<()>,
    /// The kubelet's prober, on a real control plane.
    prober: Option<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// Starts following the pool's pods.
    pub fn start(client: kube::Client, spec: FleetSpec) -> Fleet {
        let reports = Reports::new(spec.dir.join("reports"));
        std::fs::create_dir_all(&reports.dir).expect("create the reports directory");
        std::fs::create_dir_all(spec.dir.join("logs")).expect("create the logs directory");
        if spec.workers.runs(Program::Rust) {
            rust_worker();
        }
        if spec.workers.runs(Program::Python) {
            python_worker();
        }
        if spec.workers.runs(Program::Go) {
            go_worker();
        }
        let state = Arc::new(Mutex::new(State::default()));
        let prober = spec.probes_as_kubelet.then(|| {
            tokio::spawn(kubelet_prober::run(
                Api::namespaced(client.clone(), &spec.namespace),
                Api::all(client.clone()),
                state.clone(),
            ))
        });
        let shared = state.clone();
        let files = reports.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &spec.namespace);
            let params = ListParams::default().labels(&spec.selector);
            let mut ticker = tokio::time::interval(FOLLOW_EVERY);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Ok(list) = pods.list(&params).await else {
                    continue;
                };
                let steps = shared
                    .lock()
                    .expect("fleet state")
                    .follow(&list.items, &files);
                for step in steps {
                    match step {
                        Step::Start { pod, uid } => {
                            let health = health_address();
                            if !hold(&pods, &pod, &uid, &health).await {
                                continue;
                            }
                            let mut state = shared.lock().expect("fleet state");
                            let program = spec.workers.program(state.processes.len());
                            let process = spawn(program, &pod, &uid, &health, &spec, &files);
                            state.processes.insert(uid, process);
                        }
                        Step::Release { pod, uid } => release(&pods, &pod, &uid).await,
                    }
                }
            }
        });
        Fleet {
            state,
            reports,
            task,
            prober,
        }
    }

    /// The workers' report files.
    pub fn reports(&self) -> Reports {
        self.reports.clone()
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to the worker of pod `pod`'s live instance.
    ///
    /// A stopped process executes nothing, so its report says it runs nothing while stopped;
    /// once continued it may run again what it last reported, until it reports otherwise (a
    /// worker that fences reports that it stopped everything) or the permit it last reported
    /// lapses (its jobs check it before each unit of work).
    pub fn signal(&self, pod: &str, signal: &str) {
        let state = self.state.lock().expect("fleet state");
        let (uid, process) = state
            .processes
            .iter()
            .find(|(_, p)| p.pod == pod && !p.exited)
            .unwrap_or_else(|| panic!("no live worker process for pod {pod}"));
        let pid = process.child.id().expect("a live process has a pid");
        match signal {
            "STOP" => {
                send(pid, signal);
                self.reports.record_pause(pod, uid);
            }
            "CONT" => {
                self.reports.record_resume(pod, uid);
                send(pid, signal);
            }
            _ => send(pid, signal),
        }
    }

    /// How many worker processes have started, by program (`rust`, `python`, `go`).
    pub fn started(&self) -> BTreeMap<&'static str, usize> {
        let state = self.state.lock().expect("fleet state");
        let mut counts = BTreeMap::new();
        for process in state.processes.values() {
            *counts.entry(process.program.name()).or_default() += 1;
        }
        counts
    }

    /// The pods whose live worker process is `program`'s, by name.
    pub fn pods_running(&self, program: Program) -> BTreeSet<String> {
        let state = self.state.lock().expect("fleet state");
        state
            .processes
            .values()
            .filter(|p| p.program == program && !p.exited && !p.terminated)
            .map(|p| p.pod.clone())
            .collect()
    }

    /// The pods the fleet started a worker for, by name (each may still hold its finalizer).
    pub fn pods(&self) -> BTreeSet<String> {
        let state = self.state.lock().expect("fleet state");
        state.processes.values().map(|p| p.pod.clone()).collect()
    }

    /// Fails if a worker exited while its pod was still running (a crash, or a protocol error
    /// the worker refused to go on with).
    pub fn assert_no_crash(&self) {
        let state = self.state.lock().expect("fleet state");
        assert!(
            state.crashes.is_empty(),
            "worker processes exited while their pods ran: {:?} (logs in {})",
            state.crashes,
            self.reports.dir.with_file_name("logs").display()
        );
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(prober) = &self.prober {
            prober.abort();
        }
        // kill_on_drop sends SIGKILL to each child.
        self.state.lock().expect("fleet state").processes.clear();
    }
}

/// What the fleet does next for one pod instance.
enum Step {
    /// Hold the pod with the fleet's finalizer, then start its worker.
    Start { pod: String, uid: String },
    /// The worker exited and its pod is terminating: let the pod go, as a kubelet deletes a pod
    /// whose containers all stopped.
    Release { pod: String, uid: String },
}

impl State {
    /// Every process's pod, uid and readiness address: one that exited answers no probe.
    fn probed(&self) -> Vec<(String, String, String)> {
        self.processes
            .iter()
            .map(|(uid, p)| (p.pod.clone(), uid.clone(), p.health.clone()))
            .collect()
    }

    /// Signals and reaps processes to match `pods` (the pool's pods as just listed), and says
    /// which pods to start a worker for or to release.
    fn follow(&mut self, pods: &[Pod], reports: &Reports) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut listed = BTreeMap::new();
        for pod in pods {
            let (Some(name), Some(uid)) = (&pod.metadata.name, &pod.metadata.uid) else {
                continue;
            };
            listed.insert(uid.clone(), pod);
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            match self.processes.get_mut(uid) {
                None if running && !terminating => steps.push(Step::Start {
                    pod: name.clone(),
                    uid: uid.clone(),
                }),
                Some(process) if terminating && !process.terminated && !process.exited => {
                    process.terminated = true;
                    if let Some(pid) = process.child.id() {
                        send(pid, "TERM");
                    }
                }
                _ => {}
            }
        }
        for (uid, process) in &mut self.processes {
            let pod = listed.get(uid);
            if !process.exited && pod.is_none_or(|p| grace_over(p)) {
                // The grace period is over (or the pod was removed under the fleet).
                let _ = process.child.start_kill();
            }
            if !process.exited
                && let Ok(Some(status)) = process.child.try_wait()
            {
                process.exited = true;
                reports.record_exit(&process.pod, uid);
                if !process.terminated && pod.is_some() {
                    self.crashes.push(format!(
                        "{} ({uid}, {:?}): {status}",
                        process.pod, process.program
                    ));
                }
            }
            if process.exited && process.terminated && pod.is_some_and(|p| held(p)) {
                steps.push(Step::Release {
                    pod: process.pod.clone(),
                    uid: uid.clone(),
                });
            }
        }
        steps
    }
}

/// The finalizer that keeps a pod object until its worker process is gone, as a kubelet
/// removes a pod only once its containers stopped.
const FINALIZER: &str = "e2e.swarm.io/worker-process";

fn held(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// A terminating pod whose grace period ran out: its kubelet's last DELETE set the grace to 0
/// (kube-sim), or its deletionTimestamp passed (a real API server).
fn grace_over(pod: &Pod) -> bool {
    let Some(deletion) = &pod.metadata.deletion_timestamp else {
        return false;
    };
    pod.metadata.deletion_grace_period_seconds == Some(0) || deletion.0 <= Timestamp::now()
}

/// The readiness probe of an acknowledging worker's container (docs/worker-protocol.md, step
/// 6). On kube-sim the kubelet sends it to the address in the pod's
/// [`PROBE_ADDRESS_ANNOTATION`], where the fleet's process for the pod serves it.
pub fn readiness_probe() -> Value {
    json!({
        "httpGet": { "path": "/readyz", "port": 8081 },
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 1,
    })
}

/// `workload` (a StatefulSet or Deployment manifest) with [`readiness_probe`] on every container
/// of its pod template, as the pods of acknowledging workers carry it; other documents as
/// they are.
pub fn with_readiness_probe(mut workload: Value) -> Value {
    let containers = workload
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut);
    for container in containers.into_iter().flatten() {
        container["readinessProbe"] = readiness_probe();
    }
    workload
}

/// A free loopback address for one worker's readiness endpoint (port 0 would leave the fleet
/// not knowing where it listens).
fn health_address() -> String {
    format!("{}:{}", Ipv4Addr::LOCALHOST, ports::loopback_port())
}

/// Adds the fleet's finalizer to a running pod and the address its worker will serve readiness
/// on; false when the pod changed meanwhile (it went, or began terminating, when no finalizer
/// can be added).
async fn hold(pods: &Api<Pod>, pod: &str, uid: &str, health: &str) -> bool {
    let patch = json!({
        "metadata": {
            "uid": uid,
            "finalizers": [FINALIZER],
            "annotations": { PROBE_ADDRESS_ANNOTATION: health },
        }
    });
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .is_ok_and(|p| p.metadata.uid.as_deref() == Some(uid) && held(&p))
}

/// Removes the fleet's finalizer and deletes the pod at once, uid-preconditioned, as a kubelet
/// does once the pod's containers stopped.
async fn release(pods: &Api<Pod>, pod: &str, uid: &str) {
    let patch = json!({ "metadata": { "uid": uid, "finalizers": null } });
    if pods
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .is_err()
    {
        return;
    }
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let _ = pods.delete(pod, &params).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::kubectl::repo_root;

    #[test]
    fn the_readiness_probe_is_the_one_the_worker_protocol_documents() {
        let doc = std::fs::read_to_string(repo_root().join("docs/worker-protocol.md"))
            .expect("read docs/worker-protocol.md");
        let block: Vec<&str> = doc
            .lines()
            .skip_while(|line| line.trim() != "readinessProbe:")
            .take_while(|line| !line.trim().starts_with("```"))
            .collect();
        let documented: Value = serde_yaml::from_str(&block.join("\n")).expect("the probe's YAML");
        assert_eq!(documented["readinessProbe"], readiness_probe());

        let sts = json!({"kind": "StatefulSet", "spec": {"template": {"spec": {"containers": [
            {"name": "worker"}, {"name": "sidecar"}]}}}});
        let probed = with_readiness_probe(sts);
        for container in probed["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            assert_eq!(container["readinessProbe"], readiness_probe());
        }
        let pool = json!({"kind": "SwarmPool", "spec": {}});
        assert_eq!(with_readiness_probe(pool.clone()), pool);
    }
}
