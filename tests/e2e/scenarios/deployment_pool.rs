//! A pool over a Deployment (`examples/deployment/`): pods with random names hold slots, and
//! the pool stays exclusive and balanced while the Deployment is scaled 2 -> 5 -> 3,
//! rollout-restarted, a pod is evicted, and its jobs are edited; `kubectl swarm` shows its pods
//! and predicts the scale-up.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{kubectl_ns, swarm_json};
use crate::harness::Env;
use crate::harness::manifests::documents_at;
use crate::harness::observe::pool_events;
use crate::harness::poll::eventually;
use crate::harness::scenario;
use crate::harness::worker_config::WorkerConfig;

const POOL: &str = "stream-pool";
const DEPLOYMENT: &str = "stream-worker";
const CONFIG_MAP: &str = "stream-worker-config";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_pool_stays_exclusive_and_balanced_through_scaling_restarts_and_edits() {
    scenario!("deployment_pool")
        .run(async |env| {
            env.install_crds().await;
            env.start_operator().await;
            env.watch_waiting_workers(POOL);
            env.apply_repo_manifests(&["examples/namespace.yaml", "examples/deployment/"])
                .await;
            let first = settle_the_new_pool(env).await;
            let up = scale_up_to_five(env, &first).await;
            let down = scale_down_to_three(env, &up).await;
            let restarted = rollout_restart(env, &down).await;
            let recovered = evict_a_pod(env, &restarted).await;
            edit_the_jobs(env, &recovered).await;

            let stats = env.waiting_workers_stats();
            assert!(
                stats.iter().all(|s| s.samples > 10),
                "the duplicate watch sampled throughout: {stats:?}"
            );
            env.assert_exclusive();
            env.assert_operator_running();
        })
        .await;
}

/// The pool settles over the Deployment's two pods, reports the Deployment as its workload
/// (in its status, `kubectl get` and `kubectl swarm status`).
async fn settle_the_new_pool(env: &Env) -> Settled {
    let first = settle(env, 2, 0).await;
    assert_eq!(first.pool["status"]["workload"], DEPLOYMENT);
    assert!(
        first.pool["status"].get("statefulSet").is_none(),
        "statefulSet is only reported for StatefulSet pools"
    );
    let columns = kubectl_ns(env, &["get", "swarmpools", POOL]).await;
    assert!(
        columns
            .lines()
            .nth(1)
            .is_some_and(|row| row.contains(DEPLOYMENT)),
        "kubectl get swarmpools shows the Deployment:\n{columns}"
    );
    assert_plugin_status(env, &first).await;
    first
}

/// Scale up: the two slots keep a balanced share of their own jobs, the three new slots get
/// the rest, as the plan predicted. (Pods whose job set changed are replaced: in a Deployment
/// that is a new name, so slots are compared by what they hold.)
async fn scale_up_to_five(env: &Env, first: &Settled) -> Settled {
    let namespace = env.example.namespace();
    let plan = swarm_json(env, &["plan", POOL, "-n", &namespace, "--replicas", "5"]).await;
    let refreshed = refreshed_pods(env).await;
    scale(env, 5).await;
    let up = settle(env, 5, first.config.version).await;
    assert_eq!(
        plan["jobsMoved"].as_u64(),
        Some(moved(first, &up) as u64),
        "{plan}"
    );
    assert_plan_was_done(env, &plan, first, &up, &refreshed).await;
    for (pod, jobs) in first.config.job_sets() {
        assert!(
            up.config
                .job_sets()
                .values()
                .any(|now| now.len() >= 27 / 5 && now.is_subset(&jobs)),
            "{pod}'s slot kept a share of its jobs: {jobs:?} -> {:?}",
            up.config.job_sets()
        );
    }
    up
}

/// Scale down: three slots keep every job they held, only the jobs of the two pods the
/// ReplicaSet deleted move.
async fn scale_down_to_three(env: &Env, up: &Settled) -> Settled {
    let namespace = env.example.namespace();
    let plan = swarm_json(env, &["plan", POOL, "-n", &namespace, "--replicas", "3"]).await;
    let refreshed = refreshed_pods(env).await;
    scale(env, 3).await;
    let down = settle(env, 3, up.config.version).await;
    let intact = up
        .config
        .job_sets()
        .into_values()
        .filter(|before| {
            down.config
                .job_sets()
                .values()
                .any(|now| now.is_superset(before))
        })
        .count();
    assert_eq!(
        intact,
        3,
        "three slots kept their jobs: {:?} -> {:?}",
        up.config.job_sets(),
        down.config.job_sets()
    );
    assert_plan_was_done(env, &plan, up, &down, &refreshed).await;
    // Which two pods go is the ReplicaSet's choice (by readiness, node and age); the plan
    // assumes the newest. Either way the jobs that move are those of two of the five slots.
    let mut shares: Vec<usize> = up.config.job_sets().values().map(BTreeSet::len).collect();
    shares.sort_unstable();
    let fewest = (shares[0] + shares[1]) as u64;
    let most = (shares[3] + shares[4]) as u64;
    let predicted = plan["jobsMoved"].as_u64().expect("jobsMoved");
    assert!(
        (fewest..=most).contains(&predicted),
        "the plan moves the jobs of two slots ({fewest} to {most}): {plan}"
    );
    let moved_down = moved(up, &down) as u64;
    assert!(
        (fewest..=most).contains(&moved_down),
        "the scale moved the jobs of two slots ({fewest} to {most}): {moved_down}"
    );
    down
}

/// Rollout restart: every pod is replaced, each job moves only to the replacement of the pod
/// that ran it, and after the rollout the slots hold what they held before.
async fn rollout_restart(env: &Env, down: &Settled) -> Settled {
    kubectl_ns(
        env,
        &["rollout", "restart", &format!("deployment/{DEPLOYMENT}")],
    )
    .await;
    let restarted = settle_replaced(env, 3, down).await;
    assert_plugin_status(env, &restarted).await;
    let before: BTreeSet<BTreeSet<String>> = down.config.job_sets().into_values().collect();
    let after: BTreeSet<BTreeSet<String>> = restarted.config.job_sets().into_values().collect();
    assert_eq!(
        after, before,
        "each job set moved whole to a replacement pod"
    );
    restarted
}

/// Eviction: the kubelet marks a pod Failed and leaves it in the API. The ReplicaSet replaces
/// it, and the replacement inherits exactly the evicted pod's jobs, with nobody deleting the
/// evicted pod; no other job moves.
async fn evict_a_pod(env: &Env, restarted: &Settled) -> Settled {
    let (victim, victim_jobs) = restarted
        .config
        .job_sets()
        .into_iter()
        .next()
        .expect("a worker");
    kubectl_ns(
        env,
        &[
            "patch",
            "pod",
            &victim,
            "--subresource=status",
            "--type=strategic",
            "-p",
            r#"{"status":{"phase":"Failed","reason":"Evicted","message":"The node was low on resource: memory.","conditions":[{"type":"Ready","status":"False"}]}}"#,
        ],
    )
    .await;
    let recovered = settle(env, 3, restarted.config.version).await;
    let after_eviction = recovered.config.job_sets();
    assert!(
        !after_eviction.contains_key(&victim),
        "the evicted pod is no worker: {after_eviction:?}"
    );
    assert!(
        after_eviction.values().any(|jobs| *jobs == victim_jobs),
        "its replacement inherited its jobs whole: {victim_jobs:?} -> {after_eviction:?}"
    );
    for (pod, jobs) in restarted.config.job_sets() {
        if pod != victim {
            assert_eq!(after_eviction.get(&pod), Some(&jobs), "{pod} kept its jobs");
        }
    }
    let evicted = kubectl_ns(
        env,
        &["get", "pod", &victim, "-o", "jsonpath={.status.phase}"],
    )
    .await;
    assert_eq!(
        evicted, "Failed",
        "granted while the evicted pod is still in the API"
    );
    recovered
}

/// Job edits: two jobs go, one comes.
async fn edit_the_jobs(env: &Env, recovered: &Settled) {
    let mut manifest = env
        .example
        .localize(documents_at(&["examples/deployment/swarmpool.yaml"]))
        .remove(0);
    let mut jobs: Vec<Value> = manifest["spec"]["jobs"].as_array().unwrap().clone();
    jobs.retain(|j| !["stream:xxrtve1", "stream:foo:new"].contains(&j.as_str().unwrap()));
    jobs.push(json!("stream:news:live"));
    manifest["spec"]["jobs"] = Value::Array(jobs);
    env.apply("stream-pool.yaml", &[manifest]).await;
    let edited = settle(env, 3, recovered.config.version).await;
    assert!(
        edited
            .config
            .job_sets()
            .values()
            .flatten()
            .any(|j| j == "stream:news:live")
    );
}

/// `kubectl swarm status` lists the settled pool's pods, each with the jobs of its entry, and
/// `kubectl swarm where` finds a job on the pod whose entry lists it.
async fn assert_plugin_status(env: &Env, settled: &Settled) {
    let namespace = env.example.namespace();
    let report = swarm_json(env, &["status", POOL, "-n", &namespace]).await;
    assert_eq!(report["workloadKind"], "Deployment", "{report}");
    assert_eq!(report["version"].as_u64(), Some(settled.config.version));
    let rows: BTreeMap<String, BTreeSet<String>> = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let jobs = w["jobs"].as_array().unwrap();
            let jobs = jobs.iter().map(|j| j.as_str().unwrap().to_owned());
            (w["pod"].as_str().unwrap().to_owned(), jobs.collect())
        })
        .collect();
    assert_eq!(rows, settled.config.job_sets(), "{report}");
    let (pod, jobs) = rows.iter().next().unwrap();
    let job = jobs.iter().next().unwrap();
    let found = swarm_json(env, &["where", job, "-n", &namespace]).await;
    assert_eq!(found[0]["worker"], pod.as_str(), "{found}");
}

/// Jobs of `before` that do not stay on the slot that held them. Pods are renamed when
/// replaced, so slots are matched by content: each slot of `after` is the successor of at most
/// one slot of `before`, the pairs that share the most jobs first.
fn moved(before: &Settled, after: &Settled) -> usize {
    let (before, after) = (before.config.job_sets(), after.config.job_sets());
    let mut pairs: Vec<(usize, &String, &String)> = before
        .iter()
        .flat_map(|(old, held)| {
            after
                .iter()
                .map(move |(new, now)| (now.intersection(held).count(), old, new))
        })
        .collect();
    pairs.sort_unstable_by(|a, b| b.cmp(a));
    let (mut matched, mut successors, mut kept) = (BTreeSet::new(), BTreeSet::new(), 0);
    for (shared, old, new) in pairs {
        if !matched.contains(old) && !successors.contains(new) {
            matched.insert(old);
            successors.insert(new);
            kept += shared;
        }
    }
    before.values().map(BTreeSet::len).sum::<usize>() - kept
}

/// `kubectl swarm plan`'s prediction for the scale from `before` against what the operator did
/// to reach `after`: the same shares; a revoke and a grant at least (a Deployment's pods come
/// and go at the ReplicaSet's pace, so grants may split or coincide); as many restarts, each a
/// RefreshingWorker event, and on a scale-up (where no pod is removed) the same pods.
async fn assert_plan_was_done(
    env: &Env,
    plan: &Value,
    before: &Settled,
    after: &Settled,
    refreshed_before: &BTreeMap<String, i32>,
) {
    let mut predicted: Vec<u64> = plan["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["jobsAfter"].as_u64())
        .collect();
    let mut actual: Vec<u64> = after
        .config
        .job_sets()
        .values()
        .map(|j| j.len() as u64)
        .collect();
    predicted.sort_unstable();
    actual.sort_unstable();
    assert_eq!(predicted, actual, "{plan}");

    // The plan counts the versions of a change whose pods come and go together; a ReplicaSet
    // replaces them at its own pace, which may split or join grants. Both revoke, then grant.
    let writes = plan["configWrites"].as_u64().expect("configWrites");
    let versions = after.config.version - before.config.version;
    assert!(
        writes >= 2 && versions >= 2,
        "{versions} config versions written, the plan said {writes}: {plan}"
    );

    let named: BTreeSet<String> = plan["workersRestarted"]
        .as_array()
        .expect("workersRestarted")
        .iter()
        .map(|pod| pod.as_str().expect("a pod name").to_owned())
        .collect();
    let scale_up = plan["toReplicas"].as_u64() >= plan["fromReplicas"].as_u64();
    let restarted = eventually("the RefreshingWorker events of the scale", || async {
        let now = refreshed_pods(env).await;
        let restarted: BTreeSet<String> = before
            .pods
            .keys()
            .filter(|pod| now.get(*pod) > refreshed_before.get(*pod))
            .cloned()
            .collect();
        let matches = if scale_up {
            restarted == named
        } else {
            restarted.len() == named.len()
        };
        if matches {
            Ok(restarted)
        } else {
            Err(format!("restarted {restarted:?}, the plan named {named:?}"))
        }
    })
    .await;
    assert!(
        restarted.iter().all(|pod| !after.pods.contains_key(pod)),
        "every restarted pod was replaced: {restarted:?}"
    );
}

/// RefreshingWorker events of the pool by the pod they name.
async fn refreshed_pods(env: &Env) -> BTreeMap<String, i32> {
    let mut counts = BTreeMap::new();
    for event in pool_events(env, POOL).await {
        if event.type_ == "Normal" && event.reason == "RefreshingWorker" {
            let pod = event.related.clone().unwrap_or_default();
            *counts.entry(pod).or_default() += event.count;
        }
    }
    counts
}

/// The pool, its config and the Deployment's live pods as one read saw them.
struct Settled {
    pool: Value,
    config: WorkerConfig,
    /// Pod name -> uid.
    pods: BTreeMap<String, String>,
}

async fn scale(env: &Env, replicas: usize) {
    let replicas = format!("--replicas={replicas}");
    kubectl_ns(env, &["scale", "deployment", DEPLOYMENT, &replicas]).await;
}

/// Waits until the pool has settled over `replicas` pods at a version above `after`, and checks
/// what a settled Deployment pool promises.
async fn settle(env: &Env, replicas: usize, after: u64) -> Settled {
    eventually(&format!("{POOL} settled over {replicas} pods"), || async {
        let settled = read(env).await?;
        settled_over(&settled, replicas, after)?;
        Ok(settled)
    })
    .await
}

/// Like [`settle`], after a rollout: none of `before`'s pods is left.
async fn settle_replaced(env: &Env, replicas: usize, before: &Settled) -> Settled {
    eventually(&format!("{POOL} settled on new pods"), || async {
        let settled = read(env).await?;
        if let Some(old) = settled.pods.keys().find(|p| before.pods.contains_key(*p)) {
            return Err(format!("{old} is still there"));
        }
        settled_over(&settled, replicas, before.config.version)?;
        Ok(settled)
    })
    .await
}

async fn read(env: &Env) -> Result<Settled, String> {
    let pool = env.pool_named(POOL).await.ok_or("no pool yet")?;
    let cm = env.config_map(CONFIG_MAP).await.ok_or("no ConfigMap yet")?;
    let config = env
        .pool_config(POOL, CONFIG_MAP, Some(&cm))
        .await?
        .ok_or("no config yet")?;
    let pods = deployment_pods(&env.pods().await);
    Ok(Settled { pool, config, pods })
}

/// The live pods of the Deployment's ReplicaSets (named `<deployment>-<hash>-<suffix>`; an
/// evicted pod is not live), by name to uid, the uid `""` while a pod is not Ready or is
/// terminating.
fn deployment_pods(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .filter(|pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Failed" | "Succeeded"))
        })
        .filter(|pod| {
            pod.metadata.owner_references.iter().flatten().any(|o| {
                o.controller == Some(true)
                    && o.kind == "ReplicaSet"
                    && o.name.starts_with(&format!("{DEPLOYMENT}-"))
            })
        })
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let ready = pod.metadata.deletion_timestamp.is_none()
                && pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            (name, if ready { uid } else { String::new() })
        })
        .collect()
}

fn settled_over(s: &Settled, replicas: usize, after: u64) -> Result<(), String> {
    let status = &s.pool["status"];
    let generation = s.pool["metadata"]["generation"].as_u64();
    if status["observedGeneration"].as_u64() != generation {
        return Err("status not current".into());
    }
    if status["phase"] != "Balanced" {
        return Err(format!("phase {}", status["phase"]));
    }
    if status["workers"].as_u64() != Some(replicas as u64) {
        return Err(format!("status.workers {}", status["workers"]));
    }
    if s.config.version <= after {
        return Err(format!("still version {}", s.config.version));
    }
    if s.pods.len() != replicas || s.pods.values().any(String::is_empty) {
        return Err(format!("pods {:?}", s.pods));
    }
    let listed: BTreeSet<&str> = s.config.pods().into_iter().collect();
    let live: BTreeSet<&str> = s.pods.keys().map(String::as_str).collect();
    if listed != live {
        return Err(format!(
            "config.yml lists {listed:?}, the pods are {live:?}"
        ));
    }
    if !s.config.transit.is_empty() {
        return Err("jobs in transit".into());
    }
    let spec: Vec<String> = s.pool["spec"]["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j.as_str().map(str::to_owned))
        .collect();
    let mut held: Vec<&String> = s
        .config
        .workloads
        .iter()
        .flat_map(|(_, w)| &w.jobs)
        .collect();
    held.sort();
    let mut want: Vec<&String> = spec.iter().collect();
    want.sort();
    if held != want {
        return Err(format!(
            "jobs held {} times for {} jobs in the spec",
            held.len(),
            want.len()
        ));
    }
    s.config.check_balanced()
}
