//! The workers as real containers on the real node: the example StatefulSet with the images
//! `scripts/build-images.sh` builds, its ConfigMap mounted by a real kubelet (refreshed lazily,
//! as the `DeletePods` policy assumes), SIGTERM and the grace period from the runtime, the pod
//! name and uid from the Downward API, and under `Acknowledge` the pod's projected token.
//!
//! The operator runs as a process of the harness, as in most scenarios; the operator image's
//! own scenarios are in `whole_cluster::real_node`. These share the real node with the other
//! scenarios (each pool in its namespace, each fault on its own container); the two that need
//! the cluster alone are in `whole_cluster::real_workers`. Each worker appends its report lines (the protocol's
//! `SWARM_WORKER_REPORT`) to `<pod uid>.jsonl` in a directory of the host that every worker pod
//! mounts (a hostPath volume), and the duplicate watch reads them there: what the containers
//! say they run, not what the harness assumes.
//!
//! They need `scripts/real-cluster.sh`'s real node holding the worker image
//! (`SWARM_E2E_WORKER_IMAGE`, set by `scripts/test.sh` after loading it) and skip with a note
//! otherwise.

mod delete_pods;
pub(crate) mod faults;
mod file_refresh;
pub(crate) mod pod_log;

use pod_log::PodLog;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::manifests::parse_yaml_stream;
use crate::harness::observe::{Observed, assert_invariants, balanced, observe};
use crate::harness::poll::eventually_within;
use crate::harness::worker_fleet::Reports;
use crate::harness::worker_fleet::with_readiness_probe;
use crate::harness::{Env, WORKER_IMAGE_ENV};
use crate::scenarios::whole_cluster::worker_lease_policy::WORKER_ACCOUNT;

/// The real node's label and the key of its taint (scripts/lib/real-node.sh).
const REAL_NODE: &str = "swarm.io/real-node";
/// Where the workers' containers mount the reports directory.
const REPORTS_MOUNT: &str = "/reports";

/// How the pool delivers a change to its workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rollout {
    /// `policy: DeletePods` (Exclusive): a worker whose entry changes is restarted.
    DeletePods,
    /// `policy: None`, `handoff: Overlap`: workers reload the file the kubelet refreshes.
    ReloadOverlap,
}

/// How soon a worker reports its entry once its pod is Ready, when its file is current at start
/// (it reads the file at once, then every second).
const REPORTS_WITHIN: Duration = Duration::from_secs(15);

/// What a scenario whose workers read the mounted file set up: the workers' reports, the log
/// of their pods, and the documents applied.
struct FileWorkers {
    reports: Reports,
    pods: PodLog,
    documents: Vec<Value>,
}

/// Installs the CRDs, the operator, and the example under `rollout` with its workers in
/// containers of the worker image (see [`file_workers`]; the scenario asks for
/// [`WORKER_IMAGE_ENV`]), applied.
async fn install_file_workers(env: &mut Env, rollout: Rollout) -> FileWorkers {
    let reports = reports_dir(env);
    let pods = PodLog::start(env, "app=swarm-worker");
    env.install_crds().await;
    env.start_operator().await;
    env.watch_reports(&env.example.pool_name(), reports.clone());
    let documents = file_workers(env, env.image(WORKER_IMAGE_ENV), rollout, &reports);
    env.apply("real-workers.yaml", &documents).await;
    FileWorkers {
        reports,
        pods,
        documents,
    }
}

/// A fresh directory of the host for the workers' reports, writable by their uid (65532).
pub(crate) fn reports_dir(env: &Env) -> Reports {
    let dir = env.scratch("reports");
    std::fs::create_dir_all(&dir).expect("create the reports directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .expect("open the reports directory to the workers' uid");
    Reports::new(dir)
}

/// The example (`examples/`) with the pool under `rollout` and its StatefulSet's pods in real
/// containers of `image` on the real node, reading the mounted file, reporting into `reports`.
fn file_workers(env: &Env, image: &str, rollout: Rollout, reports: &Reports) -> Vec<Value> {
    let mut documents = env.example.documents.clone();
    for doc in &mut documents {
        match doc["kind"].as_str() {
            Some("SwarmPool") => {
                doc["spec"]["rollout"] = match rollout {
                    Rollout::DeletePods => json!({"policy": "DeletePods", "maxUnavailable": "25%"}),
                    Rollout::ReloadOverlap => json!({"policy": "None", "handoff": "Overlap"}),
                };
            }
            Some("StatefulSet") => {
                let spec = &mut doc["spec"]["template"]["spec"];
                on_real_node(spec, reports);
                let container = &mut spec["containers"][0];
                container["image"] = json!(image);
                let env_vars = container["env"].as_array_mut().expect("the worker's env");
                env_vars.extend([
                    field("POD_UID", "metadata.uid"),
                    json!({"name": "SWARM_WORKER_MODE", "value": "file"}),
                    json!({"name": "POLL_SECONDS", "value": "1"}),
                    report_env(),
                ]);
            }
            _ => {}
        }
    }
    documents
}

/// Places a worker pod spec on the real node and mounts the reports directory.
fn on_real_node(spec: &mut Value, reports: &Reports) {
    spec["nodeSelector"] = json!({REAL_NODE: "true"});
    spec["tolerations"] = json!([{"key": REAL_NODE, "operator": "Exists", "effect": "NoSchedule"}]);
    let dir = reports.path("x");
    let dir = dir.parent().expect("a report lives in the directory");
    spec["volumes"]
        .as_array_mut()
        .expect("the worker's volumes")
        .push(json!({"name": "reports", "hostPath": {"path": dir, "type": "Directory"}}));
    spec["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("the worker's mounts")
        .push(json!({"name": "reports", "mountPath": REPORTS_MOUNT}));
}

/// An environment variable from the Downward API.
fn field(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

/// `SWARM_WORKER_REPORT`: one file per pod instance, named by its uid (declared after
/// `POD_UID`, which it expands).
fn report_env() -> Value {
    json!({"name": "SWARM_WORKER_REPORT", "value": format!("{REPORTS_MOUNT}/$(POD_UID).jsonl")})
}

/// Waits (up to `within`) until the pool is Balanced over `workers` acknowledging workers
/// with nothing in transit, checks its invariants and that the containers run exactly their
/// entries.
pub(crate) async fn settle_acknowledged(
    env: &Env,
    reports: &Reports,
    workers: usize,
    within: Duration,
) -> Observed {
    let sts = env.example.statefulset_name();
    let sts = &sts;
    let settled = eventually_within(
        &format!("Balanced over {workers} acknowledging workers"),
        within,
        || async move {
            let o = observe(env).await?;
            balanced(&o, workers, sts)?;
            if o.status_u64("jobsInTransit") != Some(0) {
                return Err(format!("jobsInTransit {:?}", o.status_u64("jobsInTransit")));
            }
            let config = o.config();
            config
                .check_exactly_once(sts, workers, &o.spec_jobs())
                .map_err(|e| format!("config: {e}"))?;
            config.check_balanced()?;
            Ok(o)
        },
    )
    .await;
    assert_invariants(env, &settled).await;
    assert_workers_run_their_entries(reports, &settled, REPORTS_WITHIN).await;
    settled
}

/// `deploy/worker-rbac`, rendered by kustomize, in `namespace`.
pub(crate) async fn worker_rbac(env: &Env, namespace: &str) -> Vec<Value> {
    let rendered = env.kubectl.ok(&["kustomize", "deploy/worker-rbac"]).await;
    let mut documents = parse_yaml_stream(&rendered, "kubectl kustomize deploy/worker-rbac");
    for doc in &mut documents {
        doc["metadata"]["namespace"] = json!(namespace);
        for subject in doc["subjects"].as_array_mut().into_iter().flatten() {
            subject["namespace"] = json!(namespace);
        }
    }
    documents
}

/// The example's pool under `Acknowledge` and its StatefulSet as acknowledging workers of
/// `image` on the real node: the protocol's environment from the Downward API and the pool,
/// deploy/worker-rbac's ServiceAccount ([`worker_rbac`]), and room for an interpreter.
pub(crate) fn acknowledging_workers(env: &Env, image: &str, reports: &Reports) -> Vec<Value> {
    let mut pool = env.example.pool().clone();
    pool["spec"]["rollout"] = json!({"policy": "Acknowledge"});
    let mut sts = env.example.statefulset().clone();
    let spec = &mut sts["spec"]["template"]["spec"];
    on_real_node(spec, reports);
    spec["serviceAccountName"] = json!(WORKER_ACCOUNT);
    // The workers' default termination deadline is 25 s: within the grace period.
    spec["terminationGracePeriodSeconds"] = json!(30);
    let container = &mut spec["containers"][0];
    container["image"] = json!(image);
    container["resources"]["limits"]["memory"] = json!("256Mi");
    container["env"]
        .as_array_mut()
        .expect("the worker's env")
        .extend([
            field("POD_NAMESPACE", "metadata.namespace"),
            field("POD_UID", "metadata.uid"),
            json!({"name": "SWARM_POOL", "value": env.example.pool_name()}),
            json!({"name": "SWARM_CONFIG_MAP", "value": env.example.config_map_name()}),
            json!({"name": "SWARM_WORKER_MODE", "value": "acknowledge"}),
            report_env(),
        ]);
    vec![pool, with_readiness_probe(sts)]
}

/// Waits (up to `within`) until what the workers report they run is exactly the settled
/// pool's assignment: every job on the one pod instance whose entry lists it.
async fn assert_workers_run_their_entries(reports: &Reports, o: &Observed, within: Duration) {
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (pod, workload) in &o.config().workloads {
        let uid = &o.pods[pod].uid;
        for job in &workload.jobs {
            expected.insert(job.clone(), vec![format!("{pod} ({uid})")]);
        }
    }
    let expected = &expected;
    eventually_within(
        "the workers' reports to match the ConfigMap",
        within,
        || async move {
            let held = reports.held().ok_or("no reports directory")?;
            if held == *expected {
                Ok(())
            } else {
                Err(format!("reported {held:?}"))
            }
        },
    )
    .await;
}

/// The median and the largest of `values` (seconds), for the figures the scenarios print.
pub(crate) fn median_and_worst(values: &[f64]) -> (f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    (median, sorted.last().copied().unwrap_or(f64::NAN))
}
