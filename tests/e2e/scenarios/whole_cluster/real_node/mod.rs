//! The operator as a user runs it: the image `scripts/build-images.sh` builds, in real
//! containers on the cluster's one real node (kubelet, containerd, runc), installed with
//! `kubectl apply -k` of an overlay of `deploy/` (or of its namespaced overlay) that names the
//! image and places the pods, as a user with a tainted node pool writes one.
//!
//! Everywhere else the operator is a process of the harness. Only a container shows whether the
//! image starts under the restricted Pod Security profile with a read-only root file system,
//! reaches the API server through the `kubernetes` Service with its projected token, turns the
//! kubelet's readiness probe on `/readyz`, logs JSON lines, elects one leader of two pods, and
//! survives the faults a runtime delivers (SIGKILL of its process, the SIGTERM and grace period
//! of a rollout). No operator of the harness runs here: the one in the cluster does the work.
//!
//! They need `scripts/real-cluster.sh`'s real node holding the image (`SWARM_E2E_OPERATOR_IMAGE`,
//! set by `scripts/test.sh` after loading it) and skip with a note otherwise; but `helm`, whose
//! operator and workers the kubelet pulls from a registry the scenario releases them into, as
//! they reach users. Each removes what it installed before it ends, so no operator in the
//! cluster acts on a later scenario's pool.

mod faults;
mod helm;
mod install;
mod namespaced;
mod overlay;
mod registry;
mod release;
mod replicas;

use serde_json::{Value, json};

use crate::harness::Env;
use crate::harness::observe::operator_pod_deletes;

/// The example's documents (`examples/`) without its Namespace: for a namespace an install
/// made, whose Pod Security label applying `examples/namespace.yaml` over it would remove.
fn examples_without_namespace(env: &Env) -> Vec<Value> {
    env.example
        .documents
        .iter()
        .filter(|doc| doc["kind"] != "Namespace")
        .cloned()
        .collect()
}

/// `documents` with workers whose pods stop within a second, so the times measured are the
/// operator's rather than the example's 10 s termination grace.
fn with_fast_pods(mut documents: Vec<Value>) -> Vec<Value> {
    for doc in &mut documents {
        if doc["kind"] == "StatefulSet" {
            doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(1);
        }
    }
    documents
}

/// Asserts that the operator (whichever replica led) deleted no pod twice since `mark`, the
/// start of one change of the pool: a change restarts each worker at most once.
async fn assert_no_pod_deleted_twice(env: &Env, mark: usize) {
    match operator_pod_deletes(env, mark).await {
        Some(deletes) => {
            for (pod, count) in &deletes {
                assert_eq!(*count, 1, "{pod} deleted once in the change: {deletes:?}");
            }
        }
        None => env.note_skipped("pod deletions in the request log"),
    }
}
