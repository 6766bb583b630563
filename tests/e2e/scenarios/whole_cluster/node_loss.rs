//! A lost node under `rollout.policy: Acknowledge`: kwok stops playing one node (no heartbeats,
//! no node Lease renewals, its pods left Ready as they are, as when a node loses power) and the
//! worker processes of its pods die with it. Their pods stay Running and Ready in the API, and
//! would until taint eviction minutes later; their jobs move to the workers on the other nodes
//! once the node's Lease has been silent for 20 s and the revoke wait has passed, within the
//! documented failover bound. The scenario takes the cluster to itself (it changes a node).
//! Only a real control plane has nodes to lose.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::harness::kubectl::Kubectl;
use crate::harness::observe::wait_for;
use crate::harness::scenario;
use crate::harness::worker_fleet::Workers;
use crate::scenarios::acknowledge::{
    assert_failover_within, assert_no_pod_deleted, failover_bound, install_acknowledging,
    jobs_moved_off, settle,
};
use crate::scenarios::scale;

/// The annotation by which kwok picks the nodes it plays (scripts/real-cluster.sh).
const KWOK_NODE: &str = "kwok.x-k8s.io/node";

/// Where kubelets (and kwok) keep their nodes' Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Gives the node back to kwok when the scenario ends, passed or failed: its annotation, and its
/// Lease deleted, which kwok then creates and renews again.
struct RestoreNode(Kubectl, String);

impl Drop for RestoreNode {
    fn drop(&mut self) {
        let annotation = format!("{KWOK_NODE}=fake");
        let lease = ["-n", NODE_LEASE_NAMESPACE, "delete", "lease", &self.1];
        for args in [
            &["annotate", "node", &self.1, &annotation, "--overwrite"][..],
            &lease[..],
        ] {
            let out = self.0.run_blocking(args);
            if !out.success {
                eprintln!(
                    "note: could not give node {} back to kwok: {}",
                    self.1, out.stderr
                );
            }
        }
    }
}

/// Stops the renewals of `node`'s Lease as a dead kubelet would: kwok keeps renewing the
/// Leases of nodes it no longer plays, but never one another holder took (for an hour here).
async fn silence_node_lease(kubectl: &Kubectl, node: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ");
    let patch = format!(
        r#"{{"spec":{{"holderIdentity":"lost-node","leaseDurationSeconds":3600,"renewTime":"{now}"}}}}"#
    );
    kubectl
        .ok(&[
            "-n",
            NODE_LEASE_NAMESPACE,
            "patch",
            "lease",
            node,
            "--type",
            "merge",
            "-p",
            &patch,
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_of_workers_on_a_lost_node_move_once_its_node_lease_goes_silent() {
    if std::env::var_os("SWARM_E2E_KUBECONFIG").is_none() {
        eprintln!("note: node-loss skipped on kube-sim: it has no nodes to lose");
        return;
    }
    scenario!("node-loss")
        .run(async |env| {
            install_acknowledging(env, Workers::Rust, None).await;
            scale(env, 3).await;
            let before = settle(env, 3).await;

            // The node of worker 1, and every worker pod on it.
            let pods = env.pods().await;
            let node_of = |name: &str| {
                pods.iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
                    .and_then(|p| p.spec.as_ref()?.node_name.clone())
                    .expect("a scheduled worker pod")
            };
            let sts = env.example.statefulset_name();
            let node = node_of(&format!("{sts}-1"));
            let lost: BTreeSet<String> = before
                .pods
                .keys()
                .filter(|pod| node_of(pod) == node)
                .cloned()
                .collect();
            assert!(lost.len() < 3, "some worker runs elsewhere: all on {node}");
            let mark = env.request_mark().await;
            env.restart_longest_unheld();

            let _restore = RestoreNode(env.kubectl.clone(), node.clone());
            let annotation = format!("{KWOK_NODE}=lost");
            env.kubectl
                .ok(&["annotate", "node", &node, &annotation, "--overwrite"])
                .await;
            silence_node_lease(&env.kubectl, &node).await;
            for pod in &lost {
                env.fleet().signal(pod, "KILL");
            }
            let lost_at = Instant::now();

            let lost_pods: Vec<&str> = lost.iter().map(String::as_str).collect();
            let after = wait_for(
                env,
                &format!("the jobs of {lost:?} on the other nodes"),
                |o| jobs_moved_off(o, &lost_pods),
            )
            .await;
            let moved_after = lost_at.elapsed();
            for pod in &lost {
                assert_eq!(
                    after.pods.get(pod).map(|p| &p.uid),
                    Some(&before.pods[pod].uid),
                    "{pod} is still there (no eviction yet)"
                );
            }
            let stats = env.handoff_stats();
            eprintln!(
                "node-loss: {node} lost with {lost:?}; their jobs moved {:.1} s later (bound \
                    {:?}); the longest a job ran nowhere: {:.1} s; {:.2} duplicate job-seconds",
                moved_after.as_secs_f64(),
                failover_bound(),
                stats.longest_unheld_seconds,
                stats.duplicate_job_seconds
            );
            for pod in &lost {
                assert_failover_within(pod, moved_after);
            }
            assert_eq!(stats.duplicate_job_seconds, 0.0, "{stats:?}");
            assert_no_pod_deleted(env, mark).await;
            env.assert_exclusive();
        })
        .await;
}
