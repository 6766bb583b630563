//! Planted breaks: a scenario that breaks one of the checks every scenario gets still fails,
//! in [`Env::finish`](super::Env::finish), naming the scenario; and the harness runs alone
//! exactly the scenarios `scripts/test.sh` runs alone.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;
use serde_json::json;

use super::Env;
use super::builder::{WHOLE_CLUSTER, takes_cluster_alone};
use crate::harness::kubectl::repo_root;
use crate::harness::poll::eventually;
use crate::harness::scenario;

const PLANTED: &str = "planted-duplicate";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_whose_job_runs_on_two_pods_fails_in_finish_with_its_name() {
    let outcome = AssertUnwindSafe(
        scenario!(PLANTED)
            .sim_only("it plants a duplicate job on a disposable simulation")
            .run(async |env| plant_a_job_on_two_pods(env).await),
    )
    .catch_unwind()
    .await;
    let message = match outcome {
        Ok(None) => return,
        Ok(Some(())) => panic!("the scenario passed though a job ran on two pods"),
        Err(panic) => panic_message(panic.as_ref()),
    };
    remove_kept_scratch_directories();
    assert!(
        message.starts_with(&format!("{PLANTED}: a job ran on two live pods at once"))
            && message.contains("stream:xxrtve1"),
        "the failure names the scenario and the job: {message}"
    );
}

/// Gives job `stream:xxrtve1` to both of the example's workers, with no operator to undo it:
/// the ConfigMap is written before the pods start, so both mount it. The body itself passes.
async fn plant_a_job_on_two_pods(env: &mut Env) {
    env.install_crds().await;
    let entry = json!({"version": 1, "jobs": ["stream:xxrtve1"]});
    let sts = env.example.statefulset_name();
    let config = json!({
        "version": 1,
        "workloads": {format!("{sts}-0"): entry, format!("{sts}-1"): entry},
    });
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": env.example.config_map_name(),
            "namespace": env.example.namespace(),
        },
        "data": {"config.yml": serde_yaml::to_string(&config).expect("YAML")},
    });
    let namespace = env.example.namespace_manifest().clone();
    env.apply("planted-config.yaml", &[namespace, config_map])
        .await;
    env.apply_examples().await;
    eventually(
        "the duplicate watch to see the planted job on both pods",
        || async {
            match env.handoff_stats().first_duplicate {
                Some(_) => Ok(()),
                None => Err(format!("{:?}", env.handoff_stats())),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "misplaced: test harness::env::tests::")]
async fn a_scenario_built_in_another_module_than_its_tests_fails_before_it_starts() {
    Env::builder("misplaced", "e2e::scenarios::whole_cluster::misplaced")
        .run(async |_| ())
        .await;
}

#[test]
fn the_harness_runs_alone_exactly_what_scripts_test_sh_runs_alone() {
    assert!(takes_cluster_alone(
        "scenarios::whole_cluster::deploy::deploy_base"
    ));
    assert!(takes_cluster_alone(
        "e2e::scenarios::whole_cluster::real_node"
    ));
    assert!(takes_cluster_alone("e2e::scenarios::whole_cluster"));
    assert!(!takes_cluster_alone("e2e::scenarios::acknowledge"));
    assert!(!takes_cluster_alone(
        "scenarios::namespaced_install::kubectl_apply"
    ));
    let script =
        std::fs::read_to_string(repo_root().join("scripts/test.sh")).expect("read scripts/test.sh");
    // Two threads: the harness's lock lets one whole-cluster scenario hold the cluster at a
    // time, and the other thread prepares (the release scenario's compile) or waits.
    for filter in [
        format!("{WHOLE_CLUSTER} --test-threads=2"),
        format!("--skip {WHOLE_CLUSTER} "),
    ] {
        assert!(
            script.contains(&filter),
            "scripts/test.sh runs the whole-cluster scenarios by `{filter}`"
        );
    }
}

/// The message of a panic's payload.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// The failed scenario kept its scratch directory for a look: this one was failed on purpose.
fn remove_kept_scratch_directories() {
    let prefix = format!("swarm-e2e-{PLANTED}-");
    let entries = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten();
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
