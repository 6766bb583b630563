//! Faults a real container sees, while the leader in the cluster runs the example pool: its
//! process killed through the runtime (SIGKILL, as the OOM killer or a crash ends it, with no
//! chance to release the lease), and `kubectl rollout restart` (SIGTERM, the grace period, new
//! pods one at a time). A change to the pool follows each at once, so the next leader has work.
//! Each time the lease is held again, the pool settles within the lease duration plus 10 s, no
//! job runs on two live pods and no pod is deleted twice; the handover times are printed.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::overlay;
use super::replicas::{self, LeaderWatch, container_id, name, pod_of, uid};
use super::{assert_no_pod_deleted_twice, with_fast_pods};
use crate::harness::observe::{Observed, assert_invariants, balanced, observe, wait_balanced};
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::ctr;
use crate::harness::{Env, OPERATOR_IMAGE_ENV, scenario};
use crate::scenarios::{kubectl_ns, scale};

/// The job the rollout's change adds.
const ADDED_JOB: &str = "stream:real-node-rollout:new";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_and_a_rollout_restart_hand_the_pool_over_without_a_duplicate() {
    scenario!("real-node-faults")
        .image(OPERATOR_IMAGE_ENV)
        .run(async |env| {
            let cluster = env
                .real_cluster_dir()
                .expect("the real node's cluster is one of scripts/real-cluster.sh");
            let install = overlay::install(env, "deploy", env.image(OPERATOR_IMAGE_ENV)).await;
            let namespace = install.namespace.clone();
            let pods = replicas::wait_ready(
                env,
                &namespace,
                "both replicas Ready on the real node",
                |_| Ok(()),
            )
            .await;
            let leader = replicas::wait_one_leader(env, &namespace, &pods).await;
            let bound = replicas::lease_duration(env, &namespace).await + Duration::from_secs(10);
            env.apply(
                "examples-fast.yaml",
                &with_fast_pods(env.example.documents.clone()),
            )
            .await;
            let settled = wait_balanced(env, env.example.replicas()).await;
            assert_invariants(env, &settled).await;
            let watch = LeaderWatch::start(env, &namespace);

            let leader = kill_the_leader(env, &cluster, &pods, &leader, &watch, bound).await;
            rollout_restart(env, &namespace, &leader, &watch, bound).await;

            let stats = env.handoff_stats();
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            env.assert_exclusive();
            install.remove().await;
        })
        .await;
}

/// SIGKILL to the leader's process through containerd, and a scale-up at once: the kubelet
/// starts the container again in the same pod, a replica takes the lease once it expires, and
/// the pool settles within `bound`. Returns the new holder.
async fn kill_the_leader(
    env: &Env,
    cluster: &Path,
    pods: &[Pod],
    leader: &str,
    watch: &LeaderWatch,
    bound: Duration,
) -> String {
    let victim = pods
        .iter()
        .find(|p| name(p) == pod_of(leader))
        .expect("the leader's pod");
    let (victim_name, victim_uid) = (name(victim), uid(victim));
    let restarts = replicas::restarts(victim);
    let namespace = victim.metadata.namespace.clone().unwrap_or_default();
    let mark = env.request_mark().await;
    ctr(
        cluster,
        &["tasks", "kill", "-s", "SIGKILL", &container_id(victim)],
    )
    .await;
    let killed = Instant::now();
    scale(env, 3).await;
    let settled = settle_within(env, killed, bound, "Balanced over 3 workers", |o| {
        balanced(o, 3, &env.example.statefulset_name())
    })
    .await;
    let settle = killed.elapsed();
    assert_invariants(env, &settled).await;
    assert_no_pod_deleted_twice(env, mark).await;
    let holder = replicas::wait_holder(
        env,
        &namespace,
        "the lease held again",
        Duration::from_secs(60),
        |h| h != leader,
    )
    .await;
    let back = replicas::wait_ready(
        env,
        &namespace,
        "the killed container running again in the same pod",
        |pods| {
            let pod = pods
                .iter()
                .find(|p| name(p) == victim_name)
                .ok_or_else(|| format!("{victim_name} is gone"))?;
            if uid(pod) != victim_uid {
                return Err(format!("{victim_name} is a new pod instance"));
            }
            match replicas::restarts(pod) {
                now if now > restarts => Ok(()),
                now => Err(format!("{victim_name} restartCount {now}")),
            }
        },
    )
    .await;
    let restarted_after = killed.elapsed();
    replicas::assert_containers_run(cluster, &back).await;
    let (_, first, took) = watch
        .handovers(killed)
        .into_iter()
        .next()
        .expect("a new holder after the kill");
    eprintln!(
        "real-node-faults: SIGKILL of the leader {victim_name}: lease taken by {first} {:.1} s after the kill; Balanced over 3 workers {:.1} s after it (bound {:.0} s); its container running and Ready again in the same pod {:.1} s after it",
        took.as_secs_f64(),
        settle.as_secs_f64(),
        bound.as_secs_f64(),
        restarted_after.as_secs_f64()
    );
    holder
}

/// `kubectl rollout restart`: a new pod at a time, each old one sent SIGTERM and its grace
/// period, the leader releasing the lease as it stops (a standby takes it when it next reads
/// the Lease: kube-lease-manager sleeps until the expiry it last read, so up to the lease
/// duration); a job added as soon as another replica holds it. Then the new pods are Ready, the
/// old ones gone, one of the new ones leads, and it follows a scale.
async fn rollout_restart(
    env: &Env,
    namespace: &str,
    leader: &str,
    watch: &LeaderWatch,
    bound: Duration,
) {
    let old: Vec<String> = replicas::operator_pods(env, namespace)
        .await
        .iter()
        .map(uid)
        .collect();
    let restarted = Instant::now();
    env.kubectl
        .ok(&[
            "-n",
            namespace,
            "rollout",
            "restart",
            "deployment/swarm-operator",
        ])
        .await;
    let settle = add_a_job_once_handed_over(env, namespace, leader, bound).await;
    let new_names = wait_the_new_replicas(env, namespace, &old).await;
    let rolled = restarted.elapsed();
    let holder = replicas::wait_holder(
        env,
        namespace,
        "a new replica leading",
        Duration::from_secs(60),
        |h| new_names.iter().any(|n| n == pod_of(h)),
    )
    .await;
    for (from, to, took) in watch.handovers(restarted) {
        eprintln!(
            "real-node-faults: rollout restart: lease from {from} to {to} {:.1} s after {}'s pod \
             began to terminate",
            took.as_secs_f64(),
            pod_of(&from)
        );
        assert!(took <= bound, "a handover took {took:?}, over {bound:?}");
    }
    eprintln!(
        "real-node-faults: rollout restart: the job added after the first handover placed and \
         Balanced {:.1} s later (bound {:.0} s); both new replicas Ready and the old ones gone \
         {:.1} s after the restart; {holder} leads",
        settle.as_secs_f64(),
        bound.as_secs_f64(),
        rolled.as_secs_f64()
    );

    // The last leader follows a change too.
    let mark = env.request_mark().await;
    scale(env, 2).await;
    let settled = wait_balanced(env, 2).await;
    assert_invariants(env, &settled).await;
    assert_no_pod_deleted_twice(env, mark).await;
}

/// Once a replica other than `leader` holds the lease in the rollout, adds a job to the pool:
/// it is placed and the pool Balanced within `bound`, no pod deleted twice. Returns how long
/// that took.
async fn add_a_job_once_handed_over(
    env: &Env,
    namespace: &str,
    leader: &str,
    bound: Duration,
) -> Duration {
    replicas::wait_holder(
        env,
        namespace,
        "the leader's lease taken over in the rollout",
        Duration::from_secs(180),
        |h| h != leader,
    )
    .await;
    let mark = env.request_mark().await;
    let edited = Instant::now();
    let add = json!([{"op": "add", "path": "/spec/jobs/-", "value": ADDED_JOB}]).to_string();
    let pool = env.example.pool_name();
    kubectl_ns(
        env,
        &["patch", "swarmpool", &pool, "--type=json", "-p", &add],
    )
    .await;
    let sts = env.example.statefulset_name();
    let settled = settle_within(env, edited, bound, "the added job placed", |o| {
        balanced(o, 3, &sts)?;
        let placed = o
            .config()
            .job_sets()
            .values()
            .any(|j| j.contains(ADDED_JOB));
        placed
            .then_some(())
            .ok_or_else(|| "no worker has the added job".to_owned())
    })
    .await;
    let settle = edited.elapsed();
    assert_invariants(env, &settled).await;
    assert_no_pod_deleted_twice(env, mark).await;
    settle
}

/// Waits for the rollout to finish: the new replicas Ready, the pods of `old` (uids) gone.
/// Returns the new pods' names.
async fn wait_the_new_replicas(env: &Env, namespace: &str, old: &[String]) -> Vec<String> {
    env.kubectl
        .ok(&[
            "-n",
            namespace,
            "rollout",
            "status",
            "deployment/swarm-operator",
            "--timeout=180s",
        ])
        .await;
    let new = replicas::wait_ready(
        env,
        namespace,
        "the new replicas Ready, the old ones gone",
        |pods| match pods.iter().find(|p| old.contains(&uid(p))) {
            Some(pod) => Err(format!(
                "{} of before the rollout is still there",
                name(pod)
            )),
            None => Ok(()),
        },
    )
    .await;
    new.iter().map(name).collect()
}

/// Waits until `check` accepts the pool, at most `bound` after `since`.
async fn settle_within<F>(
    env: &Env,
    since: Instant,
    bound: Duration,
    what: &str,
    check: F,
) -> Observed
where
    F: Fn(&Observed) -> Result<(), String>,
{
    let check = &check;
    eventually_within(
        &format!("{what} within {bound:?}"),
        bound.saturating_sub(since.elapsed()),
        || async move {
            let o = observe(env).await?;
            check(&o)?;
            Ok(o)
        },
    )
    .await
}
