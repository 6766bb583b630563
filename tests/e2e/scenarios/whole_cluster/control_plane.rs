//! Scenario: the control plane's own faults. kube-apiserver is killed and started again with
//! the same command line (a crash, or an upgrade of the control plane). While a cache cannot
//! follow the cluster, the pool's status, `/readyz` and `/metrics` say so; once the API server
//! serves again, the operator follows within seconds, and the status never claims Balanced
//! for a pool whose config names a worker that is gone.
//!
//! Needs the control plane of `scripts/real-cluster.sh`; skipped on the simulation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

use crate::harness::observe::{
    CONFIG_KEY, assert_condition, assert_invariants, balanced, observe, wait_balanced, wait_for,
};
use crate::harness::poll::eventually_within;
use crate::harness::scenario;
use crate::harness::worker_config::WorkerConfig;
use crate::harness::{Env, repo_path};
use crate::scenarios::scale;

/// The bound: settled this long after the API server is ready again.
const SETTLE_AFTER_READY: Duration = Duration::from_secs(30);
/// How long a config may name a gone worker while the status says Balanced: one reconcile,
/// with room for a loaded machine.
const GONE_HOLDER_GRACE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_is_followed_within_seconds_and_never_hidden_behind_balanced() {
    scenario!("api-server-restart")
        .run(async |env| {
            let Some(cluster) = env.real_cluster_dir() else {
                env.note_skipped("restarting kube-apiserver (needs scripts/real-cluster.sh)");
                return;
            };
            install_with_fast_pods(env, 4).await;
            let sts = env.example.statefulset_name();

            // A cache that cannot list again after the restart (the operator may no longer list
            // pods): the status, /readyz and /metrics name it, and nothing is decided on it.
            revoke_pod_reads(env).await;
            restart(&cluster, "kube-apiserver", 3).await;
            let unknown = wait_for(env, "Ready Unknown naming the pod caches", |o| {
                if o.phase() != "Degraded" {
                    return Err(format!("phase {}", o.phase()));
                }
                let ready = o.condition("Ready").ok_or("no Ready condition")?;
                if ready["status"] != "Unknown" || ready["reason"] != "StaleCache" {
                    return Err(format!("Ready {ready}"));
                }
                // Other caches may fail too while the API server starts; the pod caches stay stale.
                let message = ready["message"].as_str().unwrap_or_default();
                if !(message.contains("statefulset-pods") && message.contains("forbidden")) {
                    return Err(format!(
                        "the message does not name the pod cache and why: {message}"
                    ));
                }
                Ok(())
            })
            .await;
            assert_condition(&unknown, "Degraded", "True");
            let (code, body) = env.operator_readyz().await;
            assert_eq!(code, 503, "/readyz fails while a cache is stale: {body}");
            assert!(body.contains("statefulset-pods"), "{body}");
            let metrics = env.operator_metrics().await;
            assert!(
                metrics.contains("swarm_operator_cache_stale{cache=\"statefulset-pods\"} 1"),
                "the stale gauge shows it:\n{metrics}"
            );
            // Reads allowed again: the watch lists, the pool is Balanced as before, ready again.
            env.kubectl.ok(&["apply", "-k", "deploy/rbac"]).await;
            wait_balanced(env, 4).await;
            let (code, body) = env.operator_readyz().await;
            assert_eq!(code, 200, "{body}");

            // The reported case: the API server down 15 s, then a scale-down as soon as it is back.
            let sampler = StatusSampler::start(env);
            restart(&cluster, "kube-apiserver", 15).await;
            let ready_at = Instant::now();
            // With their default leader election, kube-scheduler and kube-controller-manager exit
            // when they cannot renew their lease for 10 s, and start afresh: so do they here (run
            // without leader election, they keep caches that miss the outage, and the scheduler can
            // lose track of a pod for minutes).
            restart(&cluster, "kube-scheduler", 0).await;
            restart(&cluster, "kube-controller-manager", 0).await;
            // The scheduler and kwok follow the API server again with their own backoffs; until
            // they do, no restarted worker could start, whatever the operator does. Scale at once,
            // as the user did, and count the 30 s from when a new pod can start again.
            scale(env, 3).await;
            let serving_at = wait_pods_start_again(env).await;
            let settled = eventually_within(
                "Balanced at 3 workers, within 30 s of the control plane serving again",
                SETTLE_AFTER_READY.saturating_sub(serving_at.elapsed()),
                || async {
                    let o = observe(env).await?;
                    balanced(&o, 3, &sts)?;
                    Ok(o)
                },
            )
            .await;
            eprintln!(
                "api-server-restart: settled {:.1} s after the API server was ready, {:.1} s \
                    after a new pod could start again",
                ready_at.elapsed().as_secs_f64(),
                serving_at.elapsed().as_secs_f64()
            );
            assert_invariants(env, &settled).await;
            sampler.assert_never_balanced_with_a_gone_holder();
            // Refused on purpose above, and by an API server whose authorizer had not synced yet.
            env.expect_refusals_so_far().await;
            env.assert_exclusive();
        })
        .await;
}

/// Waits until a new pod is scheduled and running again (the scheduler and kwok follow the
/// API server), with a probe pod that mounts nothing, and returns when.
async fn wait_pods_start_again(env: &Env) -> Instant {
    let namespace = env.example.namespace();
    let probe = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "control-plane-probe", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "probe", "image": "probe"}],
        },
    });
    env.apply("control-plane-probe.yaml", &[probe]).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &namespace);
    eventually_within("a probe pod to run", Duration::from_secs(120), || async {
        let pod = pods
            .get("control-plane-probe")
            .await
            .map_err(|e| e.to_string())?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        (phase == "Running").then_some(()).ok_or(phase)
    })
    .await;
    let at = Instant::now();
    env.kubectl
        .ok(&[
            "-n",
            &namespace,
            "delete",
            "pod",
            "control-plane-probe",
            "--wait=false",
        ])
        .await;
    at
}

/// The example with `replicas` workers whose pods stop within a second, so the times measured
/// are the operator's rather than the termination grace period's.
async fn install_with_fast_pods(env: &mut Env, replicas: usize) {
    env.install_crds().await;
    env.start_operator().await;
    let mut documents = env.example.documents.clone();
    for doc in &mut documents {
        if doc["kind"] == "StatefulSet" {
            doc["spec"]["replicas"] = json!(replicas);
            doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(1);
        }
    }
    env.apply("examples-fast.yaml", &documents).await;
    let settled = wait_balanced(env, replicas).await;
    assert_invariants(env, &settled).await;
}

/// Takes `list` and `watch` on pods from the operator's ClusterRole (`kubectl apply -k
/// deploy/rbac` gives them back).
async fn revoke_pod_reads(env: &Env) {
    let role = env
        .kubectl
        .ok(&["get", "clusterrole", "swarm-operator", "-o", "json"])
        .await;
    let role: Value = serde_json::from_str(&role).expect("the ClusterRole as JSON");
    let index = role["rules"]
        .as_array()
        .and_then(|rules| {
            rules.iter().position(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|res| res == &[json!("pods")])
            })
        })
        .expect("deploy/rbac has a rule for pods");
    let patch =
        json!([{"op": "replace", "path": format!("/rules/{index}/verbs"), "value": ["delete"]}]);
    env.kubectl
        .ok(&[
            "patch",
            "clusterrole",
            "swarm-operator",
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .await;
}

/// `scripts/real-cluster.sh restart <cluster> <component> <down_seconds>`: SIGKILL, down that
/// long, started again with the same command line; returns once it serves.
async fn restart(cluster: &Path, component: &str, down_seconds: u32) {
    let script: PathBuf = repo_path("scripts").join("real-cluster.sh");
    let output = tokio::process::Command::new(&script)
        .arg("restart")
        .arg(cluster)
        .arg(component)
        .arg(down_seconds.to_string())
        .output()
        .await
        .expect("run scripts/real-cluster.sh restart");
    assert!(
        output.status.success(),
        "restarting {component} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Samples the pool's phase, its config's workers and the pods four times a second, and
/// records every moment the status said Balanced while the config named a worker that had
/// been gone for longer than [`GONE_HOLDER_GRACE`]. Samples the API cannot answer are skipped.
struct StatusSampler {
    violations: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusSampler {
    fn start(env: &Env) -> StatusSampler {
        let namespace = env.example.namespace();
        let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
        let pools: Api<DynamicObject> =
            Api::namespaced_with(env.client.clone(), &namespace, &resource);
        let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &namespace);
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &namespace);
        let (pool, config_map) = (env.example.pool_name(), env.example.config_map_name());
        let violations = Arc::new(Mutex::new(Vec::new()));
        let found = violations.clone();
        let task = tokio::spawn(async move {
            let mut gone_since: BTreeMap<String, Instant> = BTreeMap::new();
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let (Ok(pool), Ok(cm), Ok(listed)) = (
                    pools.get(&pool).await,
                    config_maps.get(&config_map).await,
                    pods.list(&ListParams::default()).await,
                ) else {
                    continue;
                };
                let phase = pool.data["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let Some(config) = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get(CONFIG_KEY))
                    .and_then(|text| WorkerConfig::parse(text).ok())
                else {
                    continue;
                };
                let present: Vec<String> = listed
                    .items
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                let now = Instant::now();
                let named: Vec<String> = config.pods().into_iter().map(str::to_owned).collect();
                gone_since.retain(|name, _| named.contains(name) && !present.contains(name));
                for name in named.iter().filter(|n| !present.contains(n)) {
                    gone_since.entry(name.clone()).or_insert(now);
                }
                for (name, since) in &gone_since {
                    if phase == "Balanced" && now.duration_since(*since) > GONE_HOLDER_GRACE {
                        found.lock().expect("violations").push(format!(
                            "Balanced while the config names {name}, gone for {:.1} s",
                            now.duration_since(*since).as_secs_f64()
                        ));
                    }
                }
            }
        });
        StatusSampler { violations, task }
    }

    fn assert_never_balanced_with_a_gone_holder(&self) {
        let violations = self.violations.lock().expect("violations");
        assert!(
            violations.is_empty(),
            "the status claimed Balanced with a holder gone: {:?}",
            &violations[..violations.len().min(5)]
        );
    }
}

impl Drop for StatusSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}
