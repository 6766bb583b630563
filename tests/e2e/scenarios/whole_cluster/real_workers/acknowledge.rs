//! `rollout.policy: Acknowledge` with a pool of Rust, Python and Go workers in real pods, as a user
//! runs it: `deploy/worker-rbac` for their ServiceAccount, `deploy/worker-lease-policy` bound,
//! and each worker calling the API with its pod's projected token (in-cluster config; the
//! policy refuses every Lease write that presents no pod-bound token, so each acknowledgement
//! that lands proves it). The StatefulSet starts with the Rust image and `OnDelete` updates;
//! its template then names the Python image, so the pods a scale-up adds run Python beside the
//! Rust ones, as in a migration from one implementation to the other, and then the Go image.
//!
//! Through a scale 2 -> 4 (Python) -> 5 (Go), a job edit and a scale to 3 (the Go and one
//! Python worker terminate): no pod is deleted by the operator, no container restarts, no job
//! runs on two containers at once, and the longest a moved job runs nowhere is at most
//! [`MAX_UNHELD_SECONDS`](crate::scenarios::acknowledge::MAX_UNHELD_SECONDS) in each step.
//! Then the projected token of one worker, read from the kubelet's volume on the host, tries
//! to write another pod's Lease: the policy refuses it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::{Value, json};

use crate::harness::kubectl::Kubectl;
use crate::harness::poll::CONVERGE;
use crate::harness::worker_fleet::Reports;
use crate::harness::{
    Env, GO_WORKER_IMAGE_ENV, PYTHON_WORKER_IMAGE_ENV, WORKER_IMAGE_ENV, scenario,
};
use crate::scenarios::acknowledge::{assert_no_long_gap, assert_no_pod_deleted};
use crate::scenarios::real_workers::pod_log::PodLog;
use crate::scenarios::real_workers::{
    acknowledging_workers, reports_dir, settle_acknowledged, worker_rbac,
};
use crate::scenarios::whole_cluster::worker_lease_policy::{
    POLICY_DIR, RemovePolicy, assert_refused, assert_type_checked, write,
};
use crate::scenarios::{kubectl_ns, scale};

/// How soon a deleted worker's pod must be gone (seconds): it exits on acknowledging an empty
/// entry, well before its 25 s termination deadline.
const EXIT_WITHIN_SECONDS: f64 = 15.0;
/// The job the edit adds.
const ADDED_JOB: &str = "stream:real-ack:new";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_python_and_go_workers_in_real_pods_hand_jobs_over_without_a_restart() {
    scenario!("real-workers-acknowledge")
        .image(WORKER_IMAGE_ENV)
        .image(PYTHON_WORKER_IMAGE_ENV)
        .image(GO_WORKER_IMAGE_ENV)
        .run(async |env| {
            let cluster = env
                .real_cluster_dir()
                .expect("the real node's cluster is one of scripts/real-cluster.sh");
            let reports = reports_dir(env);
            let pods = PodLog::start(env, "app=swarm-worker");
            env.install_crds().await;
            env.start_operator().await;
            env.watch_reports(&env.example.pool_name(), reports.clone());

            // The policy first (held by the body: removed before the cluster is shared).
            let _remove = RemovePolicy(env.kubectl.clone());
            env.kubectl.ok(&["apply", "-k", POLICY_DIR]).await;
            assert_type_checked(env).await;
            install_rust_workers(env, &reports).await;
            let mark = env.request_mark().await;
            let ready = migrate_and_scale(env, &reports, &pods).await;
            assert_no_pod_deleted(env, mark).await;
            a_stolen_token_writes_no_other_lease(env, &cluster).await;

            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            pods.assert_no_restart();
            let stops = pods.assert_stopped_within_grace(&reports);
            let gone = pods.seconds_to_gone();
            eprintln!(
                "real-workers-acknowledge: deleted workers: jobs stopped {stops:.1?} s, pod gone \
                 {gone:.1?} s after the deletion"
            );
            // A terminating worker exits once it has acknowledged a version without jobs, long
            // before its termination deadline (25 s): the operator wrote one at once.
            assert!(
                gone.iter().all(|seconds| *seconds < EXIT_WITHIN_SECONDS),
                "a deleted worker took {gone:.1?} s to exit"
            );
            let image = |var| &ready[env.image(var)];
            eprintln!(
                "real-workers-acknowledge: pod seen to Ready: Rust {}, Python {}, Go {}",
                image(WORKER_IMAGE_ENV),
                image(PYTHON_WORKER_IMAGE_ENV),
                image(GO_WORKER_IMAGE_ENV)
            );
        })
        .await;
}

/// deploy/worker-rbac and the example's StatefulSet as acknowledging workers of the Rust
/// image, with `OnDelete` updates (the template changes later must not replace the running
/// pods), settled.
async fn install_rust_workers(env: &Env, reports: &Reports) {
    let namespace = env.example.namespace();
    let mut documents = vec![env.example.namespace_manifest().clone()];
    documents.extend(worker_rbac(env, &namespace).await);
    let mut workers = acknowledging_workers(env, env.image(WORKER_IMAGE_ENV), reports);
    workers[1]["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    documents.extend(workers);
    env.apply("real-ack-workers.yaml", &documents).await;
    settle_acknowledged(env, reports, env.example.replicas(), CONVERGE).await;
}

/// The template names the Python image, and a scale to 4 adds two Python workers; then the Go
/// image and a scale to 5; a job edit; a scale to 3 (the Go and one Python worker terminate).
/// Each step settles without a long gap. Returns how long each image's pods took to be Ready.
async fn migrate_and_scale(
    env: &Env,
    reports: &Reports,
    pods: &PodLog,
) -> BTreeMap<String, String> {
    let namespace = env.example.namespace();
    let (rust_image, python_image, go_image) = (
        env.image(WORKER_IMAGE_ENV),
        env.image(PYTHON_WORKER_IMAGE_ENV),
        env.image(GO_WORKER_IMAGE_ENV),
    );
    // OnDelete keeps the running pods as they are.
    set_image(env, python_image).await;
    step(env, reports, "scale to 4", || scale(env, 4), 4).await;
    // Then the Go image, for the pod the next scale-up adds.
    set_image(env, go_image).await;
    step(env, reports, "scale to 5", || scale(env, 5), 5).await;
    assert_images(
        env,
        &namespace,
        &[rust_image, rust_image, python_image, python_image, go_image],
    )
    .await;
    let mut pool = env.example.pool().clone();
    pool["spec"]["rollout"] = json!({"policy": "Acknowledge"});
    let mut jobs = env.example.jobs();
    jobs.remove(0);
    jobs.push(ADDED_JOB.to_owned());
    pool["spec"]["jobs"] = json!(jobs);
    let pool = [pool];
    step(
        env,
        reports,
        "job edit",
        || env.apply("real-ack-edit.yaml", &pool),
        5,
    )
    .await;
    // Read now: the scale-down removes the Go worker's pod.
    let ready = ready_times(env, &namespace, pods).await;
    step(env, reports, "scale to 3", || scale(env, 3), 3).await;
    ready
}

/// One worker's projected token, read from the kubelet's volume on the host, against another
/// pod's Lease: the policy refuses it.
async fn a_stolen_token_writes_no_other_lease(env: &Env, cluster: &Path) {
    let namespace = env.example.namespace();
    let sts = env.example.statefulset_name();
    let (a, b) = (format!("{sts}-0"), format!("{sts}-1"));
    let uid_a = pod_uid(env, &namespace, &a).await;
    let token = std::fs::read_to_string(projected_token(cluster, &uid_a))
        .expect("read the projected token");
    let stolen = env
        .token_kubeconfig(token.trim(), &format!("{a}'s token"), "stolen.kubeconfig")
        .expect("a real cluster");
    let stolen = Kubectl::new(&stolen, &env.scratch("stolen-kube-cache"));
    let mut lease_b: Value =
        serde_json::from_str(&kubectl_ns(env, &["get", "lease", &b, "-o", "json"]).await)
            .expect("the Lease as JSON");
    // Without its resourceVersion: an unconditional update, so that B's own renewals in the
    // meantime cannot answer 409 before the admission policy answers.
    let metadata = lease_b["metadata"].as_object_mut().expect("metadata");
    metadata.remove("resourceVersion");
    metadata.remove("managedFields");
    let forged = write(env, &stolen, "replace", &lease_b).await;
    assert_refused(
        &forged,
        &[
            &format!("only the pod named {b} may write it"),
            &format!("this token is bound to pod {a}"),
        ],
    );
}

/// Applies `change`, waits for the pool to settle over `workers`, and fails if a moved job ran
/// nowhere for longer than
/// [`MAX_UNHELD_SECONDS`](crate::scenarios::acknowledge::MAX_UNHELD_SECONDS) meanwhile.
async fn step<F, Fut>(env: &Env, reports: &Reports, what: &str, change: F, workers: usize)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    env.restart_longest_unheld();
    let started = Instant::now();
    change().await;
    settle_acknowledged(env, reports, workers, CONVERGE).await;
    assert_no_long_gap(env, what, started);
}

/// The uid of pod `name`.
async fn pod_uid(env: &Env, namespace: &str, name: &str) -> String {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    let pod = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("GET pod {name}: {e}"));
    pod.metadata.uid.expect("a pod has a uid")
}

/// The file of pod `uid`'s projected service account token, in the real node's kubelet
/// directory (scripts/lib/real-node.sh: `--root-dir=<cluster>/node/kubelet`).
fn projected_token(cluster: &std::path::Path, uid: &str) -> PathBuf {
    let volumes = cluster
        .join("node/kubelet/pods")
        .join(uid)
        .join("volumes/kubernetes.io~projected");
    let entries = std::fs::read_dir(&volumes).unwrap_or_else(|e| {
        panic!(
            "the projected volumes of pod {uid} at {}: {e}",
            volumes.display()
        )
    });
    entries
        .flatten()
        .map(|entry| entry.path().join("token"))
        .find(|token| token.is_file())
        .unwrap_or_else(|| panic!("no projected token under {}", volumes.display()))
}

/// Asserts that the pods `<sts>-0..` run `images`, in ordinal order.
async fn assert_images(env: &Env, namespace: &str, images: &[&str]) {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    let sts = env.example.statefulset_name();
    for (ordinal, image) in images.iter().enumerate() {
        let name = format!("{sts}-{ordinal}");
        let pod = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("GET pod {name}: {e}"));
        let runs = pod
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        assert_eq!(runs, *image, "the image of {name}");
    }
}

/// Names `image` in the StatefulSet's pod template (the pods a scale-up adds run it).
async fn set_image(env: &Env, image: &str) {
    let sts = env.example.statefulset_name();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "worker", "image": image}
    ]}}}})
    .to_string();
    kubectl_ns(
        env,
        &[
            "patch",
            "statefulset",
            &sts,
            "--type=strategic",
            "-p",
            &patch,
        ],
    )
    .await;
}

/// Pod seen to Ready, median and worst, by image, of the pods there now.
async fn ready_times(env: &Env, namespace: &str, pods: &PodLog) -> BTreeMap<String, String> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    let mut by_image: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for instance in pods.instances() {
        let Some(ready) = instance.ready else {
            continue;
        };
        let seconds = ready.duration_since(instance.seen).as_secs_f64();
        // Gone pods' images are not known any more.
        let image = match api.get_opt(&instance.name).await.ok().flatten() {
            Some(pod) if pod.metadata.uid.as_deref() == Some(instance.uid.as_str()) => pod
                .spec
                .and_then(|s| s.containers.into_iter().next())
                .and_then(|c| c.image)
                .unwrap_or_default(),
            _ => continue,
        };
        by_image.entry(image).or_default().push(seconds);
    }
    by_image
        .into_iter()
        .map(|(image, values)| {
            let (median, worst) = crate::scenarios::real_workers::median_and_worst(&values);
            let shown = format!(
                "{median:.1} s (median), {worst:.1} s (worst) of {}",
                values.len()
            );
            (image, shown)
        })
        .collect()
}
