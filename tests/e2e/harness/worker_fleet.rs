//! Real worker processes for the pods of an acknowledging pool (`rollout.policy: Acknowledge`).
//!
//! Neither kube-sim nor kwok runs containers, so the fleet plays the kubelet's part for the
//! pool's workers: it starts one worker process per pod instance once the pod is Running, sends
//! it SIGTERM when the pod starts terminating and SIGKILL when the grace period is over, and
//! holds the pod object with a finalizer until the process is gone, then deletes it, as a
//! kubelet removes a pod only once its containers stopped. Each process serves its readiness on
//! a loopback port of its own (`SWARM_WORKER_HEALTH_ADDR`), which the fleet writes into the pod's
//! [`PROBE_ADDRESS_ANNOTATION`] so that kube-sim's kubelet probes it there: the pod is Ready as
//! the worker says, as a real kubelet decides it from the [`readiness_probe`] of the pod
//! template. Each
//! process speaks the protocol to the API server on its own (the Rust example built on the
//! `swarm-worker` library, the Python worker, or the Go example on `worker-go`) and appends what it runs to its report file
//! (`SWARM_WORKER_REPORT`); the duplicate watch reads those files (see [`Reports`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube_sim::controllers::prober::PROBE_ADDRESS_ANNOTATION;
use serde::Deserialize;
use serde_json::{Value, json};

use super::cargo_env;
use super::kubectl::repo_root;

/// How often the fleet compares the pods with its processes.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// How far behind the clock the watch reads the reports: a worker writes its line before it
/// starts a job and after it stopped one, and a line older than this is surely on disk.
const REPORT_LAG: Duration = Duration::from_millis(300);
/// Which program runs a pod's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// `examples/swarm-worker.rs` on the `swarm-worker` library.
    Rust,
    /// `examples/python-worker/swarm_worker.py` on the official client.
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

/// A free loopback address for one worker's readiness endpoint. The port is free when picked;
/// the worker binds it moments later (port 0 would leave the fleet not knowing where).
fn health_address() -> String {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free loopback port");
    let port = listener.local_addr().expect("a bound port").port();
    format!("{}:{port}", Ipv4Addr::LOCALHOST)
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

/// Starts `program` as the worker of pod instance `uid`, serving its readiness on `health`.
fn spawn(
    program: Program,
    pod: &str,
    uid: &str,
    health: &str,
    spec: &FleetSpec,
    reports: &Reports,
) -> Process {
    let log_path = spec.dir.join("logs").join(format!("{pod}-{uid}.log"));
    let log = File::create(&log_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
    let mut command = match program {
        Program::Rust => tokio::process::Command::new(rust_worker()),
        Program::Python => {
            let mut command = tokio::process::Command::new(python_worker());
            command.arg(repo_root().join("examples/python-worker/swarm_worker.py"));
            command
        }
        Program::Go => tokio::process::Command::new(go_worker()),
    };
    command
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", &spec.namespace)
        .env("POD_UID", uid)
        .env("SWARM_POOL", &spec.pool)
        .env("SWARM_CONFIG_MAP", &spec.config_map)
        .env("SWARM_WORKER_HEALTH_ADDR", health)
        // No mounted file: these workers must read their entry through the API.
        .env("SWARM_WORKER_REPORT", reports.path(uid))
        .env("KUBECONFIG", &spec.kubeconfig)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("duplicate the log handle"))
        .stderr(log)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {program:?} worker of {pod}: {e}"));
    Process {
        pod: pod.to_owned(),
        health: health.to_owned(),
        program,
        child,
        terminated: false,
        exited: false,
    }
}

fn send(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -s {signal} {pid} failed");
}

/// The example worker binary, built once per test run (`cargo build --example swarm-worker`)
/// so it is never older than the library it shows.
fn rust_worker() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = std::process::Command::new(cargo);
            build
                .current_dir(repo_root())
                // --workspace: the features the test binaries were built with, so nothing
                // but the example is compiled again.
                .args([
                    "build",
                    "--quiet",
                    "--workspace",
                    "--example",
                    "swarm-worker",
                ]);
            cargo_env::without_test_env(&mut build);
            let status = build
                .status()
                .expect("run cargo build --example swarm-worker");
            assert!(
                status.success(),
                "cargo build --example swarm-worker failed"
            );
            // The test binary is target/<profile>/deps/e2e-<hash>; the example is beside deps.
            let exe = std::env::current_exe().expect("the test binary's path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("the test binary lives in <target>/<profile>/deps");
            let worker = profile_dir.join("examples/swarm-worker");
            assert!(worker.is_file(), "{} was not built", worker.display());
            worker
        })
        .clone()
}

/// The Go example worker: `SWARM_GO_WORKER`, or built once per test run with
/// `scripts/go-worker.sh build` (Go's caches make that a link when nothing changed).
fn go_worker() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("SWARM_GO_WORKER").filter(|p| !p.is_empty()) {
                return PathBuf::from(path);
            }
            let exe = std::env::current_exe().expect("the test binary's path");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("the test binary lives in <target>/<profile>/deps");
            let out = target.join("go/e2e/swarm-go-worker");
            let mut build = std::process::Command::new(repo_root().join("scripts/go-worker.sh"));
            build.args(["build"]).arg(&out).stdout(Stdio::null());
            cargo_env::without_test_env(&mut build);
            let status = build.status().expect("run scripts/go-worker.sh build");
            assert!(
                status.success(),
                "scripts/go-worker.sh build failed (it needs Go; or set SWARM_GO_WORKER to the \
                 built worker-go/examples/swarm-worker)"
            );
            out
        })
        .clone()
}

/// The Python interpreter with the worker's pinned client: `SWARM_PYTHON_WORKER`, or the
/// virtual environment `scripts/install-python-worker.sh` makes.
fn python_worker() -> PathBuf {
    if let Some(path) = std::env::var_os("SWARM_PYTHON_WORKER").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let venv = repo_root().join(".tools/python-worker/bin/python");
    assert!(
        venv.is_file(),
        "no Python worker environment at {}: run scripts/install-python-worker.sh (scripts/test.sh does), \
         or set SWARM_PYTHON_WORKER to a python with kubernetes and PyYAML",
        venv.display()
    );
    venv
}

/// The report files of a fleet's workers, one per pod instance: what each instance ran, and
/// since when.
#[derive(Clone, Debug)]
pub struct Reports {
    dir: PathBuf,
}

/// One line of a report (see the worker protocol in docs/worker-protocol.md).
#[derive(Debug, Deserialize)]
struct Line {
    pod: String,
    uid: String,
    #[serde(default)]
    version: Option<u64>,
    running: Vec<String>,
    at: String,
    /// Until when the jobs' permit holds: they do no work after it (they check it before each
    /// unit of work), though they may still run.
    #[serde(default)]
    until: Option<String>,
    /// Set on the lines the fleet writes, not the worker.
    #[serde(default)]
    by: Option<String>,
}

impl Line {
    /// The jobs this line says work at `at`: none once its permit has lapsed.
    fn working_at(self, at: Timestamp) -> Vec<String> {
        let lapsed = self
            .until
            .as_deref()
            .and_then(|until| Timestamp::from_str(until).ok())
            .is_some_and(|until| until < at);
        if lapsed { Vec::new() } else { self.running }
    }
}

impl Reports {
    /// The reports in `dir`, one `<pod uid>.jsonl` per pod instance.
    pub fn new(dir: PathBuf) -> Reports {
        Reports { dir }
    }

    /// The report file of pod instance `uid`.
    pub fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.jsonl"))
    }

    /// Appends an empty line for an instance whose process is gone: it runs nothing from now on.
    fn record_exit(&self, pod: &str, uid: &str) {
        self.append(pod, uid, &[], "exited");
    }

    /// Appends an empty line for a process just stopped (SIGSTOP).
    fn record_pause(&self, pod: &str, uid: &str) {
        self.append(pod, uid, &[], "paused");
    }

    /// Appends, for a process about to continue (SIGCONT), the jobs it last reported itself,
    /// with the permit it last reported: they may work again until it lapses.
    fn record_resume(&self, pod: &str, uid: &str) {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .find(|line| line.by.is_none());
        let until = last.as_ref().and_then(|line| line.until.clone());
        let running = last.map(|line| line.running).unwrap_or_default();
        self.append_until(pod, uid, &running, until, "resumed");
    }

    /// Appends a line the fleet writes on the process's behalf (`by` says why).
    fn append(&self, pod: &str, uid: &str, running: &[String], by: &str) {
        self.append_until(pod, uid, running, None, by);
    }

    fn append_until(
        &self,
        pod: &str,
        uid: &str,
        running: &[String],
        until: Option<String>,
        by: &str,
    ) {
        let mut line = json!({
            "pod": pod,
            "uid": uid,
            "version": null,
            "running": running,
            "at": format!("{:.9}", Timestamp::now()),
            "by": format!("e2e fleet: {by}"),
        });
        if let Some(until) = until {
            line["until"] = until.into();
        }
        let appended = File::options()
            .create(true)
            .append(true)
            .open(self.path(uid))
            .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
        if let Err(error) = appended {
            panic!("cannot append to the report of {pod} ({uid}): {error}");
        }
    }

    /// Job -> the pod instances (`pod (uid)`) that ran it a little while ago ([`REPORT_LAG`]),
    /// when every line up to then is surely written.
    pub fn held(&self) -> Option<BTreeMap<String, Vec<String>>> {
        let at = Timestamp::try_from(SystemTime::now() - REPORT_LAG).ok()?;
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir).ok()?.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            if let Some(line) = latest_before(&text, at) {
                let (pod, uid) = (line.pod.clone(), line.uid.clone());
                for job in line.working_at(at) {
                    held.entry(job).or_default().push(format!("{pod} ({uid})"));
                }
            }
        }
        Some(held)
    }
}

/// A line a worker wrote itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerLine {
    /// When it was written.
    pub at: Timestamp,
    /// The config version its jobs belong to.
    pub version: Option<u64>,
    /// The jobs that run from then on.
    pub running: Vec<String>,
}

impl Reports {
    /// The lines instance `uid`'s worker wrote itself, in order.
    pub fn worker_lines(&self, uid: &str) -> Vec<WorkerLine> {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .filter(|line| line.by.is_none())
            .filter_map(|line| {
                Some(WorkerLine {
                    at: Timestamp::from_str(&line.at).ok()?,
                    version: line.version,
                    running: line.running,
                })
            })
            .collect()
    }

    /// The job sets instance `uid`'s worker itself reported at or after `since`.
    pub fn written_by_worker_since(&self, uid: &str, since: Timestamp) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .filter(|line| line.by.is_none())
            .filter(|line| Timestamp::from_str(&line.at).is_ok_and(|at| at >= since))
            .map(|line| line.running)
            .collect()
    }
}

/// The last complete line of one report written at or before `at`.
fn latest_before(text: &str, at: Timestamp) -> Option<Line> {
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Line>(line).ok())
        .find(|line| Timestamp::from_str(&line.at).is_ok_and(|written| written <= at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_as_of_a_moment_and_python_timestamps_parse() {
        let text = concat!(
            r#"{"pod":"w-0","uid":"u","version":null,"running":[],"at":"2026-01-01T00:00:00.000000000Z"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","version":3,"running":["a","b"],"at":"2026-01-01T00:00:01.500000Z"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","version":4,"running":["b"],"at":"2026-01-01T00:00:03+00:00"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","vers"#,
        );
        let at = |s: &str| Timestamp::from_str(s).unwrap();
        assert!(latest_before(text, at("2025-12-31T23:59:59Z")).is_none());
        let running = |s: &str| latest_before(text, at(s)).unwrap().running;
        assert!(running("2026-01-01T00:00:01Z").is_empty());
        assert_eq!(running("2026-01-01T00:00:02Z"), ["a", "b"]);
        assert_eq!(running("2026-01-01T00:00:09Z"), ["b"]);
    }

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

    #[test]
    fn jobs_whose_permit_lapsed_do_no_work() {
        let text = r#"{"pod":"w-0","uid":"u","version":3,"running":["a"],"at":"2026-01-01T00:00:01Z","until":"2026-01-01T00:00:09Z"}"#;
        let at = |s: &str| Timestamp::from_str(s).unwrap();
        let working = |s: &str| latest_before(text, at(s)).unwrap().working_at(at(s));
        assert_eq!(working("2026-01-01T00:00:08Z"), ["a"]);
        assert!(working("2026-01-01T00:00:10Z").is_empty());
    }
}

/// The kubelet's readiness prober for pods on kwok's nodes, which run no probes: every
/// [`readiness_probe`] period it GETs each worker's `/readyz` and, when the answer differs from
/// the pod's Ready condition, writes the condition (and ContainersReady) as a kubelet does, only
/// on change. A node kwok no longer plays (lost) has no kubelet: its pods are left as they are.
mod kubelet_prober {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use std::collections::BTreeSet;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::jiff::Timestamp;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    use serde_json::json;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::State;

    /// The probe's period, timeout and failure threshold (1): [`super::readiness_probe`].
    const PERIOD: Duration = Duration::from_secs(5);
    const TIMEOUT: Duration = Duration::from_secs(2);

    /// The annotation by which kwok plays a node, and its value for the nodes it plays.
    const KWOK_NODE: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

    pub(super) async fn run(pods: Api<Pod>, nodes: Api<Node>, state: Arc<Mutex<State>>) {
        let mut ticker = tokio::time::interval(PERIOD);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Ok(played) = played_nodes(&nodes).await else {
                continue;
            };
            let probed = state.lock().expect("fleet state").probed();
            for (pod, uid, health) in probed {
                let ready = probe(&health).await;
                let Ok(current) = pods.get(&pod).await else {
                    continue;
                };
                let node = current.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if current.metadata.uid.as_deref() != Some(uid.as_str())
                    || !node.is_some_and(|node| played.contains(node))
                {
                    continue;
                }
                if is_ready(&current) != ready {
                    let _ = write_ready(&pods, &pod, ready).await;
                }
            }
        }
    }

    /// The nodes kwok plays: their kubelet is this prober.
    async fn played_nodes(nodes: &Api<Node>) -> kube::Result<BTreeSet<String>> {
        let (key, value) = KWOK_NODE;
        Ok(nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|node| {
                node.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .is_some_and(|v| v == value)
            })
            .filter_map(|node| node.metadata.name)
            .collect())
    }

    /// Whether `GET /readyz` at `address` answers 2xx or 3xx within the timeout.
    async fn probe(address: &str) -> bool {
        let answer = tokio::time::timeout(TIMEOUT, async {
            let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
            let request = format!("GET /readyz HTTP/1.0\r\nHost: {address}\r\n\r\n");
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).await.ok()?;
            std::str::from_utf8(&head[9..12]).ok()?.parse::<u16>().ok()
        })
        .await;
        matches!(answer, Ok(Some(200..=399)))
    }

    fn is_ready(pod: &Pod) -> bool {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True")
    }

    async fn write_ready(pods: &Api<Pod>, pod: &str, ready: bool) -> kube::Result<Pod> {
        let status = if ready { "True" } else { "False" };
        let now = Timestamp::now().to_string();
        let condition =
            |type_: &str| json!({"type": type_, "status": status, "lastTransitionTime": now});
        let patch =
            json!({"status": {"conditions": [condition("Ready"), condition("ContainersReady")]}});
        pods.patch_status(pod, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
    }
}
