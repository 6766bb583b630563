//! Jobs from ConfigMaps (`spec.jobsFrom`): a pool with inline jobs and two job ConfigMaps
//! assigns every job exactly once; editing a source moves the assignment; deleting a source
//! fails the pool with `JobsSourceNotFound` and keeps its config; re-creating it without the
//! label gives `JobsSourceNotLabelled`, and labelling it recovers. The operator never writes the
//! sources.

use serde_json::{Value, json};

use super::{kubectl_ns, swarm_json};
use crate::harness::Env;
use crate::harness::manifests::str_at;
use crate::harness::observe::{
    Observed, assert_mounted_current_jobs, assert_no_config_map_write_or_pod_delete, balanced,
    status_current, wait_event, wait_for,
};
use crate::harness::scenario;
use crate::harness::worker_config::moved_jobs;

const FIRST: &str = "pool-jobs-first";
const SECOND: &str = "pool-jobs-second";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_from_two_config_maps_are_assigned_once_follow_edits_and_survive_a_deleted_source() {
    scenario!("jobs-from")
        .run(async |env| {
            let start = env.install_example().await;
            let jobs = env.example.jobs();
            let (inline, rest) = jobs.split_at(9);
            let (first_jobs, second_jobs) = rest.split_at(9);
            let mut sources = Sources {
                inline: inline.to_vec(),
                first: first_jobs.to_vec(),
                second: second_jobs.to_vec(),
            };
            sources.second.extend([
                "stream:e2e-from:1".to_owned(),
                "stream:e2e-from:2".to_owned(),
            ]);
            let converted = move_jobs_into_sources(env, &start, &sources).await;
            the_plugin_reads_the_sources(env).await;
            let edited = edit_a_source(env, &converted, &mut sources).await;
            delete_a_source(env, &edited).await;
            recreate_it_unlabelled(env, &edited, &sources).await;

            // Labelled: Balanced again on the same config, nothing written.
            kubectl_ns(
                env,
                &["label", "configmap", SECOND, "swarm.io/jobs-source=true"],
            )
            .await;
            let recovered = wait_settled(env, &sources.all(), edited.config().version - 1).await;
            assert_eq!(
                recovered.config_map_resource_version(),
                edited.config_map_resource_version()
            );
            assert_sources_never_written(env).await;
            env.assert_operator_running();
        })
        .await;
}

/// The pool's jobs: inline in the spec, and in the two sources.
struct Sources {
    inline: Vec<String>,
    first: Vec<String>,
    second: Vec<String>,
}

impl Sources {
    fn all(&self) -> Vec<String> {
        [&self.inline[..], &self.first, &self.second].concat()
    }
}

/// The example's jobs split over spec.jobs and two sources, plus two new ones: the jobs that
/// only changed place stay on their workers, and `kubectl get` counts every source.
async fn move_jobs_into_sources(env: &Env, start: &Observed, sources: &Sources) -> Observed {
    let mut pool = env.example.pool().clone();
    pool["spec"]["jobs"] = Value::from(sources.inline.clone());
    pool["spec"]["jobsFrom"] = json!([
        {"configMapRef": {"name": FIRST}},
        {"configMapRef": {"name": SECOND}, "key": "list"},
    ]);
    env.apply(
        "pool-jobs-from.yaml",
        &[
            source(env, FIRST, "jobs", &sources.first),
            source(env, SECOND, "list", &sources.second),
            pool,
        ],
    )
    .await;
    let converted = wait_settled(env, &sources.all(), start.config().version).await;
    assert!(
        moved_jobs(start.config(), converted.config()).is_empty(),
        "jobs that moved into a source stay on their worker"
    );
    let listed = kubectl_ns(env, &["get", "swarmpool", &env.example.pool_name()]).await;
    let columns: Vec<&str> = listed
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        columns.get(3),
        Some(&"29"),
        "the JOBS column counts every source:\n{listed}"
    );
    converted
}

/// `kubectl swarm` reads the sources as the operator does.
async fn the_plugin_reads_the_sources(env: &Env) {
    let namespace = env.example.namespace();
    let pool_name = env.example.pool_name();
    let status = swarm_json(env, &["status", &pool_name, "-n", &namespace]).await;
    assert_eq!(status["jobs"], 29, "{status}");
    let found = swarm_json(env, &["where", "stream:e2e-from:1", "-n", &namespace]).await;
    assert_eq!(
        found[0]["state"], "Assigned",
        "a job of a source is found: {found}"
    );
}

/// Editing a source: a job leaves, another arrives, in one new version.
async fn edit_a_source(env: &Env, converted: &Observed, sources: &mut Sources) -> Observed {
    let gone = sources.first.remove(0);
    sources.first.push("stream:e2e-from:3".to_owned());
    env.apply(
        "first-edited.yaml",
        &[source(env, FIRST, "jobs", &sources.first)],
    )
    .await;
    let edited = wait_settled(env, &sources.all(), converted.config().version).await;
    assert_eq!(edited.config().version, converted.config().version + 1);
    let holds = |o: &Observed, job: &str| o.config().job_sets().values().any(|s| s.contains(job));
    assert!(!holds(&edited, &gone) && holds(&edited, "stream:e2e-from:3"));
    edited
}

/// Deleting a source: Failed with the reason and a Warning naming it; the config is kept, no
/// worker restarted, and `kubectl swarm status` names the missing source.
async fn delete_a_source(env: &Env, edited: &Observed) {
    let mark = env.request_mark().await;
    kubectl_ns(env, &["delete", "configmap", SECOND]).await;
    let failed = wait_for(env, "phase Failed for the deleted source", |o| {
        status_current(o)?;
        match o.condition("Ready") {
            Some(ready) if o.phase() == "Failed" && ready["reason"] == "JobsSourceNotFound" => {
                Ok(())
            }
            other => Err(format!("phase {}, Ready {other:?}", o.phase())),
        }
    })
    .await;
    let message = str_at(failed.condition("Ready").unwrap(), "/message");
    assert!(
        message.contains(&format!(
            "ConfigMap {SECOND} (spec.jobsFrom[1]) does not exist"
        )) && message.contains("kubectl create configmap"),
        "the condition names the source and the fix: {message}"
    );
    let pool_name = env.example.pool_name();
    let warnings = wait_event(env, &pool_name, "Warning", "JobsSourceNotFound").await;
    assert!(warnings[0].note.contains(SECOND), "{warnings:?}");
    assert_eq!(failed.config(), edited.config(), "the config is kept");
    assert_eq!(
        failed.config_map_resource_version(),
        edited.config_map_resource_version()
    );
    assert_eq!(failed.status_u64("jobs"), Some(29), "the last known count");
    assert_eq!(failed.uids(), edited.uids(), "no worker was restarted");
    assert_no_config_map_write_or_pod_delete(env, mark).await;
    let namespace = env.example.namespace();
    let out = env
        .kubectl
        .run(&["swarm", "status", &pool_name, "-n", &namespace])
        .await;
    assert!(
        !out.success
            && out
                .stderr
                .contains(&format!("ConfigMap {SECOND} (spec.jobsFrom[1])")),
        "kubectl swarm status names the missing source: {}",
        out.stderr
    );
}

/// Re-created without the label (as `kubectl create configmap` does): not watched, which the
/// pool says once it looks again (here on an edit of the pool), with the fix.
async fn recreate_it_unlabelled(env: &Env, edited: &Observed, sources: &Sources) {
    let namespace = env.example.namespace();
    let pool_name = env.example.pool_name();
    let mut unlabelled = source(env, SECOND, "list", &sources.second);
    unlabelled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    env.apply("second-unlabelled.yaml", &[unlabelled]).await;
    kubectl_ns(
        env,
        &["annotate", "swarmpool", &pool_name, "e2e/looked-again=1"],
    )
    .await;
    let unwatched = wait_for(env, "JobsSourceNotLabelled", |o| {
        match o.condition("Ready") {
            Some(ready) if ready["reason"] == "JobsSourceNotLabelled" => Ok(()),
            other => Err(format!("phase {}, Ready {other:?}", o.phase())),
        }
    })
    .await;
    let message = str_at(unwatched.condition("Ready").unwrap(), "/message");
    assert!(
        message.contains(&format!(
            "kubectl label configmap {SECOND} -n {namespace} swarm.io/jobs-source=true"
        )),
        "{message}"
    );
    wait_event(env, &pool_name, "Warning", "JobsSourceNotLabelled").await;
    assert_eq!(unwatched.config(), edited.config(), "the config is kept");
}

/// The operator never writes or owns the sources.
async fn assert_sources_never_written(env: &Env) {
    for name in [FIRST, SECOND] {
        let cm = env.config_map(name).await.expect("the source");
        let managers: Vec<String> = cm
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| f.manager)
            .collect();
        assert!(
            !managers.iter().any(|m| m == "swarm-operator")
                && cm.metadata.owner_references.is_none(),
            "the operator never writes or owns {name}: managers {managers:?}"
        );
    }
}

/// A job ConfigMap: `jobs` one per line under `key`, with a comment, labelled to be watched.
fn source(env: &Env, name: &str, key: &str, jobs: &[String]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": env.example.namespace(),
            "labels": {"swarm.io/jobs-source": "true"},
        },
        "data": {key: format!("# jobs of {name}\n\n{}\n", jobs.join("\n"))},
    })
}

/// Waits for the pool to be Balanced at a version after `after` with exactly `jobs`, each on
/// one worker, and every worker running its current jobs.
async fn wait_settled(env: &Env, jobs: &[String], after: u64) -> Observed {
    let sts = env.example.statefulset_name();
    let replicas = env.example.replicas();
    let settled = wait_for(env, &format!("{} jobs Balanced", jobs.len()), |o| {
        balanced(o, replicas, &sts)?;
        if o.status_u64("jobs") != Some(jobs.len() as u64) {
            return Err(format!("status.jobs {:?}", o.status_u64("jobs")));
        }
        if o.config().version <= after {
            return Err(format!("still version {}", o.config().version));
        }
        o.config().check_exactly_once(&sts, replicas, jobs)
    })
    .await;
    if settled.config().check_balanced().is_err() {
        panic!("unbalanced: {:?}", settled.config().loads());
    }
    assert_mounted_current_jobs(env, &settled).await;
    settled
}
