//! `spec.qos`: dedicated jobs run alone on their pods, weighted jobs balance the shared
//! workers' total weight, too few workers are reported, and no job runs on two live pods while
//! the StatefulSet is scaled up and down.

use std::collections::BTreeMap;

use serde_json::json;

use super::scale;
use crate::harness::Env;
use crate::harness::manifests::documents_at;
use crate::harness::observe::{
    Observed, assert_mounted_current_jobs, pods_settled, status_current, wait_event, wait_for,
};
use crate::harness::scenario;

const DEDICATED: [&str; 2] = ["stream:xxrtve1", "stream:cars:new"];
const WEIGHTS: [(&str, u64); 3] = [
    ("stream:history:new", 5),
    ("stream:cctv0:updated", 3),
    ("stream:foo:new", 4),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_jobs_run_alone_weights_balance_and_scaling_never_runs_a_job_twice() {
    scenario!("qos")
        .run(async |env| {
            let start = env.install_example().await;
            let pool = env.example.pool_name();

            // The QoS example, applied over the example pool. Two workers: one dedicated worker,
            // one shared; the second dedicated job has to share.
            let manifest = env
                .example
                .localize(documents_at(&["examples/qos/swarmpool.yaml"]))
                .remove(0);
            let weights: BTreeMap<String, u64> =
                WEIGHTS.iter().map(|(j, w)| (j.to_string(), *w)).collect();
            assert_eq!(
                manifest["spec"]["qos"],
                json!({"dedicated": DEDICATED, "weights": weights}),
                "the scenario's qos is the example's"
            );
            assert_eq!(manifest["spec"]["jobs"], env.example.pool()["spec"]["jobs"]);
            env.apply("pool-qos.yaml", &[manifest]).await;
            let short = settle(env, 2, start.config().version, 1).await;
            assert_eq!(short.phase(), "Degraded");
            let degraded = short.condition("Degraded").expect("a Degraded condition");
            assert_eq!(degraded["status"], "True");
            assert_eq!(degraded["reason"], "NotEnoughWorkers");
            let warnings = wait_event(env, &pool, "Warning", "NotEnoughWorkers").await;
            assert!(
                warnings[0].note.contains(DEDICATED[1])
                    && warnings[0].note.contains("3 would give"),
                "the warning names the job left shared and the replicas needed: {}",
                warnings[0].note
            );

            // Four workers: both dedicated jobs alone, two shared workers.
            scale(env, 4).await;
            let roomy = settle(env, 4, short.config().version, 0).await;
            assert_eq!(roomy.phase(), "Balanced");
            let dedicated_pods = alone(&roomy);
            assert_eq!(dedicated_pods.len(), 2);

            // Three workers: the second dedicated job shares again, the first keeps its pod.
            scale(env, 3).await;
            let back = settle(env, 3, roomy.config().version, 0).await;
            assert_eq!(back.phase(), "Balanced", "3 workers: 2 dedicated, 1 shared");
            scale(env, 2).await;
            let down = settle(env, 2, back.config().version, 1).await;
            assert_eq!(down.phase(), "Degraded");
            assert_eq!(
                alone(&down).get(DEDICATED[0]),
                dedicated_pods.get(DEDICATED[0]),
                "the first dedicated job keeps its pod through the scale-down"
            );

            env.assert_exclusive();
            env.assert_operator_running();
        })
        .await;
}

/// Waits until the pool has settled over `replicas` workers at a version above `after`, with
/// `unmet` dedicated jobs left shared; checks every QoS promise on that state.
async fn settle(env: &Env, replicas: usize, after: u64, unmet: u64) -> Observed {
    let sts = env.example.statefulset_name();
    let settled = wait_for(
        env,
        &format!("settled over {replicas} workers with {unmet} dedicated jobs unmet"),
        |o| {
            status_current(o)?;
            if !["Balanced", "Degraded"].contains(&o.phase()) || !o.stale_workers().is_empty() {
                return Err("rolling out".into());
            }
            if o.status_u64("dedicatedUnmet") != Some(unmet) {
                return Err(format!(
                    "status.dedicatedUnmet {:?}",
                    o.status_u64("dedicatedUnmet")
                ));
            }
            let config = o.config.as_ref().ok_or("no ConfigMap yet")?;
            if config.version <= after {
                return Err(format!("still version {}", config.version));
            }
            let ordinals: Vec<String> = (0..replicas).map(|i| format!("{sts}-{i}")).collect();
            pods_settled(o, &ordinals)
        },
    )
    .await;
    let config = settled.config();
    let jobs = settled.spec_jobs();
    if let Err(e) = config.check_exactly_once(&sts, replicas, &jobs) {
        panic!("assignment broken: {e}\n{config:#?}");
    }
    let served = DEDICATED.len() - unmet as usize;
    let alone = alone(&settled);
    for job in &DEDICATED[..served] {
        assert!(alone.contains_key(*job), "{job} runs alone: {config:#?}");
    }
    let weight = |job: &String| {
        WEIGHTS
            .iter()
            .find(|(name, _)| name == job)
            .map_or(1, |(_, w)| *w)
    };
    let shared: Vec<u64> = config
        .workloads
        .iter()
        .filter(|(_, w)| !(w.jobs.len() == 1 && DEDICATED[..served].contains(&w.jobs[0].as_str())))
        .map(|(_, w)| w.jobs.iter().map(weight).sum())
        .collect();
    let (min, max) = (shared.iter().min().unwrap(), shared.iter().max().unwrap());
    assert!(
        max - min <= 5,
        "shared workers' weights {shared:?} differ by more than the heaviest job"
    );
    assert_eq!(settled.status_u64("unassignedJobs"), Some(0));
    assert_mounted_current_jobs(env, &settled).await;
    settled
}

/// The dedicated jobs that run alone, and their pods.
fn alone(o: &Observed) -> BTreeMap<String, String> {
    o.config()
        .workloads
        .iter()
        .filter(|(_, w)| w.jobs.len() == 1 && DEDICATED.contains(&w.jobs[0].as_str()))
        .map(|(pod, w)| (w.jobs[0].clone(), pod.clone()))
        .collect()
}
