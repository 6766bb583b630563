//! What a user reads from `kubectl swarm status`, `where` and `plan`: the tables exactly, and
//! the fields of `-o json|yaml`, for pools mid-handoff, weighted, unconfigured and Deployment
//! pools. The end-to-end scenario runs the same commands through kubectl.

use serde_json::{Value, json};
use swarm_operator::plugin::output::{self, Format};
use swarm_operator::plugin::{PluginError, PoolView, locate, scale_plan, status};
use swarm_operator::state::pod_summary::PodSummary;

/// A StatefulSet pool `p` in namespace `ns` over `w`, with `status` and `spec` merged in.
fn pool(spec: Value, status: Value) -> swarm_operator::api::crd::SwarmPool {
    let mut base = json!({
        "apiVersion": "swarm.io/v1alpha1",
        "kind": "SwarmPool",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "jobs": []},
        "status": status,
    });
    for (key, value) in spec.as_object().expect("spec fields") {
        base["spec"][key] = value.clone();
    }
    serde_json::from_value(base).expect("a valid SwarmPool")
}

fn config_map(config: &str, annotations: Value) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "p-config", "namespace": "ns", "annotations": annotations},
        "data": {"config.yml": config},
    }))
    .expect("a valid ConfigMap")
}

fn pod(name: &str, uid: &str, ready: bool) -> PodSummary {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .expect("a valid pod")
}

const STATUS_ROLLING: &str = r#"{
    "phase": "RollingOut", "workload": "w", "statefulSet": "w", "workers": 3, "readyWorkers": 2,
    "conditions": [{"type": "Ready", "status": "False", "reason": "RollingOut",
                    "message": "1 stale worker of 3", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
}"#;

/// Mid-handoff: w-0 gave `d` and `e` away and waits to restart, w-2 has no pod yet, `f` is held
/// by nobody.
fn rolling_view() -> PoolView {
    PoolView {
        pool: pool(
            json!({"jobs": ["a", "b", "c", "d", "e", "f"]}),
            serde_json::from_str(STATUS_ROLLING).unwrap(),
        ),
        config_map: Some(config_map(
            "version: 7\nworkloads:\n  w-0:\n    version: 7\n    jobs: [a, b]\n  w-1:\n    version: 3\n    jobs: [c]\n  w-2:\n    version: 7\n    jobs: []\ntransit:\n  w-0: [d, e]\n",
            json!({"swarm.io/pending-refresh": "{\"w-0\":\"uid-0\"}"}),
        )),
        worker_config_maps: Vec::new(),
        pods: vec![pod("w-0", "uid-0", true), pod("w-1", "uid-1", false)],
        leases: Vec::new(),
    }
}

#[test]
fn status_shows_the_phase_then_one_row_per_worker_with_restarts_and_jobs_in_transit() {
    let report = status::report(&rolling_view()).expect("a config");
    assert_eq!(
        status::render(&report),
        "\
Pool:       ns/p
Phase:      RollingOut
Message:    1 stale worker of 3
Workload:   StatefulSet w
Config:     version 7 in ConfigMap p-config
Jobs:       6 (3 held, 2 in transit, 1 unassigned)

WORKER   READY    JOBS   SINCE   RESTART   IN TRANSIT
w-0      yes      2      v7      yes       2
w-1      no       1      v3      no        0
w-2      no pod   0      v7      no        0

Unassigned: f
"
    );
}

#[test]
fn status_as_json_and_yaml_has_every_field_a_script_reads() {
    let report = status::report(&rolling_view()).expect("a config");
    let json: Value =
        serde_json::from_str(&output::print(Format::Json, &report, status::render)).unwrap();
    assert_eq!(json["phase"], "RollingOut");
    assert_eq!(json["reason"], "RollingOut");
    assert_eq!(json["version"], 7);
    assert_eq!(json["jobsInTransit"], 2);
    assert_eq!(json["unassignedJobs"], json!(["f"]));
    assert_eq!(
        json["workers"][0],
        json!({"pod": "w-0", "exists": true, "ready": true, "jobs": ["a", "b"], "sinceVersion": 7,
               "restartPending": true, "inTransit": ["d", "e"]})
    );
    assert_eq!(json["workers"][2]["exists"], false);
    let yaml: Value =
        serde_yaml::from_str(&output::print(Format::Yaml, &report, status::render)).unwrap();
    assert_eq!(yaml, json, "YAML says the same as JSON");
}

#[test]
fn a_worker_replaced_since_its_record_no_longer_has_to_restart() {
    let mut view = rolling_view();
    view.pods[0] = pod("w-0", "uid-0-new", true);
    let report = status::report(&view).expect("a config");
    assert!(!report.workers[0].restart_pending);
}

#[test]
fn weighted_pools_get_a_weight_column() {
    let view = PoolView {
        pool: pool(
            json!({"jobs": ["a", "b", "c"], "qos": {"weights": {"a": 5}}}),
            json!({"phase": "Balanced", "workload": "w"}),
        ),
        config_map: Some(config_map(
            "version: 1\nworkloads:\n  w-0:\n    version: 1\n    jobs: [a]\n  w-1:\n    version: 1\n    jobs: [b, c]\n",
            json!({}),
        )),
        worker_config_maps: Vec::new(),
        pods: vec![pod("w-0", "u0", true), pod("w-1", "u1", true)],
        leases: Vec::new(),
    };
    let text = status::render(&status::report(&view).unwrap());
    assert!(
        text.ends_with(
            "WORKER   READY   JOBS   WEIGHT   SINCE   RESTART   IN TRANSIT\n\
             w-0      yes     1      5        v1      no        0\n\
             w-1      yes     2      2        v1      no        0\n"
        ),
        "{text}"
    );
}

#[test]
fn a_pool_without_a_config_yet_is_a_one_line_error_with_exit_code_1() {
    let view = PoolView {
        pool: pool(json!({"jobs": ["a"]}), json!({})),
        config_map: None,
        worker_config_maps: Vec::new(),
        pods: Vec::new(),
        leases: Vec::new(),
    };
    let error = status::report(&view).expect_err("no ConfigMap");
    assert_eq!(error.exit_code(), 1);
    let message = error.to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(
        message.starts_with("SwarmPool ns/p has no config yet (ConfigMap p-config)"),
        "{message}"
    );
    assert_eq!(PluginError::Cluster("refused".into()).exit_code(), 3);
}

#[test]
fn where_finds_a_job_held_in_transit_or_unassigned_in_each_pool_that_lists_it() {
    let view = rolling_view();
    let table = locate::render(&locate::locate(std::slice::from_ref(&view), "b"));
    assert_eq!(
        table,
        "NAMESPACE   POOL   JOB   STATE      WORKER   SINCE\n\
         ns          p      b     Assigned   w-0      v7\n"
    );
    let moving = locate::locate(std::slice::from_ref(&view), "d");
    assert_eq!(moving[0].state, locate::JobState::InTransit);
    assert_eq!(moving[0].worker.as_deref(), Some("w-0"));
    let lost = locate::locate(std::slice::from_ref(&view), "f");
    assert_eq!(lost[0].state, locate::JobState::Unassigned);
    assert_eq!(lost[0].worker, None);

    let error = locate::require_found(locate::locate(&[view], "zz"), "zz", "in namespace ns")
        .expect_err("no pool lists it");
    assert_eq!(
        error.to_string(),
        "job zz is in no SwarmPool in namespace ns"
    );
    assert_eq!(error.exit_code(), 1);
}

fn balanced_view(replicas: usize) -> PoolView {
    let jobs: Vec<String> = (0..27).map(|i| format!("job-{i:02}")).collect();
    let per = jobs.len().div_ceil(replicas);
    let mut config = String::from("version: 1\nworkloads:\n");
    for (i, chunk) in jobs.chunks(per).enumerate() {
        config.push_str(&format!(
            "  w-{i}:\n    version: 1\n    jobs: [{}]\n",
            chunk.join(", ")
        ));
    }
    PoolView {
        pool: pool(
            json!({"jobs": jobs}),
            json!({"phase": "Balanced", "workload": "w", "workers": replicas}),
        ),
        config_map: Some(config_map(&config, json!({}))),
        worker_config_maps: Vec::new(),
        pods: (0..replicas)
            .map(|i| pod(&format!("w-{i}"), &format!("u{i}"), true))
            .collect(),
        leases: Vec::new(),
    }
}

#[test]
fn plan_of_a_scale_up_moves_the_lower_bound_and_restarts_the_givers_then_the_new_worker() {
    let plan = scale_plan::predict(&balanced_view(2), 3).expect("a plan");
    assert_eq!(
        scale_plan::render(&plan),
        "\
Scaling StatefulSet w of SwarmPool ns/p from 2 to 3 workers:
  jobs moved:        9 of 27
  workers restarted: 3 (w-0, w-1, w-2)
  config writes:     2

WORKER   JOBS NOW   JOBS AFTER   RESTART
w-0      14         9            yes
w-1      13         9            yes
w-2      new        9            yes
"
    );
}

#[test]
fn plan_of_a_scale_down_moves_only_the_removed_workers_jobs_and_of_zero_leaves_all_unassigned() {
    let plan = scale_plan::predict(&balanced_view(3), 2).expect("a plan");
    assert_eq!(plan.jobs_moved, 9);
    assert_eq!(plan.workers_restarted, ["w-0", "w-1"]);
    assert_eq!(plan.workers[2].jobs_after, None, "w-2 is removed");
    let text = scale_plan::render(&plan);
    assert!(
        text.contains("w-2      9          removed      no\n"),
        "{text}"
    );
    assert_eq!(
        plan.config_writes, 2,
        "a revoke, then one grant to w-0 and w-1 once w-2 is gone"
    );
    assert!(text.contains("  config writes:     2\n"), "{text}");

    let none = scale_plan::predict(&balanced_view(3), 0).expect("a plan");
    assert_eq!(none.unassigned_jobs, 27);
    assert_eq!(none.jobs_moved, 27, "every held job leaves its worker");
    assert!(
        none.workers_restarted.is_empty(),
        "no worker is left to restart"
    );

    let same = scale_plan::predict(&balanced_view(3), 3).expect("a plan");
    assert_eq!((same.jobs_moved, same.config_writes), (0, 0));
    assert!(same.workers_restarted.is_empty());
}

#[test]
fn plan_under_acknowledge_restarts_nobody_and_revokes_once_the_new_worker_is_ready() {
    let mut view = balanced_view(2);
    view.pool.spec.rollout.policy = swarm_operator::api::crd::RolloutPolicy::Acknowledge;
    let plan = scale_plan::predict(&view, 3).expect("a plan");
    assert_eq!(plan.jobs_moved, 9);
    assert!(plan.workers_restarted.is_empty(), "{plan:?}");
    assert_eq!(
        plan.config_writes, 3,
        "the new worker's entry, then a revoke once its pod is Ready (the moving jobs run on \
         their old workers until then), then one grant: {plan:?}"
    );
    let after: Vec<Option<usize>> = plan.workers.iter().map(|w| w.jobs_after).collect();
    assert_eq!(after, [Some(9), Some(9), Some(9)]);

    let down = scale_plan::predict(&balanced_view(3), 2).expect("a plan");
    let mut view = balanced_view(3);
    view.pool.spec.rollout.policy = swarm_operator::api::crd::RolloutPolicy::Acknowledge;
    let acknowledged = scale_plan::predict(&view, 2).expect("a plan");
    assert_eq!(acknowledged.jobs_moved, down.jobs_moved);
    assert!(
        acknowledged.workers_restarted.is_empty(),
        "{acknowledged:?}"
    );
}

#[test]
fn plan_of_a_deployment_pool_keeps_each_slots_jobs_on_its_pod_and_adds_new_pods() {
    let view = PoolView {
        pool: pool(
            json!({"workloadKind": "Deployment", "jobs": ["a", "b", "c", "d"]}),
            json!({"phase": "Balanced", "workload": "d", "workers": 2}),
        ),
        config_map: Some(config_map(
            "version: 2\nworkloads:\n  d-5f7-abcde:\n    version: 1\n    jobs: [a, b]\n  d-5f7-xyz12:\n    version: 2\n    jobs: [c, d]\n",
            json!({"swarm.io/slots": "[[\"d-5f7-abcde\"],[\"d-5f7-xyz12\"]]"}),
        )),
        worker_config_maps: Vec::new(),
        pods: vec![
            pod("d-5f7-abcde", "u1", true),
            pod("d-5f7-xyz12", "u2", true),
        ],
        leases: Vec::new(),
    };
    let plan = scale_plan::predict(&view, 4).expect("a plan");
    assert_eq!(plan.jobs_moved, 2);
    assert_eq!(plan.workers_restarted, ["d-5f7-abcde", "d-5f7-xyz12"]);
    assert_eq!(
        plan.config_writes, 6,
        "a revoke; then, as each giver is replaced one at a time, the slot passes to its new pod \
         and the new pods get their grants"
    );
    assert!(
        scale_plan::render(&plan).contains("  config writes:     up to 6\n"),
        "{plan:?}"
    );
    let text = scale_plan::render(&plan);
    assert!(
        text.ends_with(
            "WORKER        JOBS NOW   JOBS AFTER   RESTART\n\
             d-5f7-abcde   2          1            yes\n\
             d-5f7-xyz12   2          1            yes\n\
             (new pod)     new        1            no\n\
             (new pod)     new        1            no\n"
        ),
        "{text}"
    );
}

#[test]
fn plan_of_a_deployment_scale_down_waits_for_the_replica_set_to_remove_pods() {
    let pods = [
        "d-5f7-aaaaa",
        "d-5f7-bbbbb",
        "d-5f7-ccccc",
        "d-5f7-ddddd",
        "d-5f7-eeeee",
    ];
    let jobs: Vec<String> = (0..10).map(|j| format!("j{j}")).collect();
    let mut text = "version: 2\nworkloads:\n".to_owned();
    for (i, pod) in pods.iter().enumerate() {
        let held = format!("[{}, {}]", jobs[2 * i], jobs[2 * i + 1]);
        text.push_str(&format!("  {pod}:\n    version: 2\n    jobs: {held}\n"));
    }
    let slots: Vec<Vec<&str>> = pods.iter().map(|pod| vec![*pod]).collect();
    // The ConfigMap as the operator left it, so that before the ReplicaSet removes two pods
    // the operator has nothing to write.
    let text = swarm_protocol::config::WorkerConfig::parse(&text)
        .expect("a valid config")
        .render();
    let mut config_map = config_map(
        &text,
        json!({
            "swarm.io/version": "2",
            "swarm.io/slots": serde_json::to_string(&slots).unwrap(),
            "swarm.io/pending-refresh": "{}",
            "swarm.io/handoff": "{}",
        }),
    );
    config_map.metadata.labels = Some(
        [
            ("app.kubernetes.io/managed-by", "swarm-operator"),
            ("swarm.io/pool", "p"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    let view = PoolView {
        pool: pool(
            json!({"workloadKind": "Deployment", "jobs": jobs}),
            json!({"phase": "Balanced", "workload": "d", "workers": 5}),
        ),
        config_map: Some(config_map),
        worker_config_maps: Vec::new(),
        pods: pods
            .iter()
            .enumerate()
            .map(|(i, name)| pod(name, &format!("u{i}"), true))
            .collect(),
        leases: Vec::new(),
    };
    let plan = scale_plan::predict(&view, 3).expect("a plan");
    assert_eq!(
        plan.jobs_moved, 4,
        "the jobs of the two pods the ReplicaSet removes move: {plan:?}"
    );
    let mut after: Vec<usize> = plan.workers.iter().filter_map(|w| w.jobs_after).collect();
    after.sort_unstable();
    assert_eq!(after, [3, 3, 4]);
    assert_eq!(
        plan.workers_restarted.len(),
        3,
        "the pods left are given jobs"
    );
    assert!(plan.config_writes >= 2, "a revoke, then a grant: {plan:?}");
}

#[test]
fn plan_without_a_workload_says_why() {
    let view = PoolView {
        pool: pool(json!({"jobs": ["a"]}), json!({"phase": "Failed"})),
        config_map: Some(config_map("version: 1\nworkloads: {}\n", json!({}))),
        worker_config_maps: Vec::new(),
        pods: Vec::new(),
        leases: Vec::new(),
    };
    let error = scale_plan::predict(&view, 2).expect_err("no workload");
    assert_eq!(
        error.to_string(),
        "SwarmPool ns/p has no workload yet (phase Failed); `kubectl describe swarmpool p -n ns` says why"
    );
}

/// The same mid-handoff pool as [`rolling_view`], in the per-worker layout of `Acknowledge`:
/// the pool's ConfigMap holds the index, each worker's own ConfigMap its entry.
fn rolling_view_per_worker() -> PoolView {
    let worker = |pod: &str, config: &str| -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({
            "metadata": {
                "name": format!("p-config.{pod}"),
                "namespace": "ns",
                "labels": {"swarm.io/pool": "p", "swarm.io/worker": pod},
            },
            "data": {"config.yml": config},
        }))
        .expect("a valid ConfigMap")
    };
    let mut view = rolling_view();
    view.pool.spec.rollout.policy = swarm_operator::api::crd::RolloutPolicy::Acknowledge;
    view.config_map = Some(
        serde_json::from_value(json!({
            "metadata": {
                "name": "p-config",
                "namespace": "ns",
                "annotations": {"swarm.io/pending-refresh": "{\"w-0\":\"uid-0\"}"},
            },
            "data": {"index.yml": "version: 7\nworkers:\n  w-0: 7\n  w-1: 3\n  w-2: 7\n"},
        }))
        .expect("a valid ConfigMap"),
    );
    view.worker_config_maps = vec![
        worker(
            "w-0",
            "version: 7\nworkloads:\n  w-0:\n    version: 7\n    jobs: [a, b]\ntransit:\n  w-0: [d, e]\n",
        ),
        worker(
            "w-1",
            "version: 3\nworkloads:\n  w-1:\n    version: 3\n    jobs: [c]\n",
        ),
        worker(
            "w-2",
            "version: 7\nworkloads:\n  w-2:\n    version: 7\n    jobs: []\n",
        ),
        // Another pool's worker ConfigMap is not this pool's.
        serde_json::from_value(json!({
            "metadata": {"name": "q-config.w-0", "labels": {"swarm.io/pool": "q", "swarm.io/worker": "w-0"}},
            "data": {"config.yml": "version: 1\nworkloads:\n  w-0:\n    version: 1\n    jobs: [zz]\n"},
        }))
        .expect("a valid ConfigMap"),
    ];
    view
}

#[test]
fn status_and_where_read_the_per_worker_layout_as_they_read_one_config() {
    let split = rolling_view_per_worker();
    // The same pool under the same policy, its config in one ConfigMap.
    let mut whole = rolling_view();
    whole.pool.spec.rollout.policy = split.pool.spec.rollout.policy;
    assert_eq!(split.config().unwrap(), whole.config().unwrap());
    assert_eq!(
        status::render(&status::report(&split).unwrap()),
        status::render(&status::report(&whole).unwrap())
    );
    for job in ["b", "d", "f"] {
        assert_eq!(
            locate::render(&locate::locate(std::slice::from_ref(&split), job)),
            locate::render(&locate::locate(std::slice::from_ref(&whole), job)),
            "{job}"
        );
    }
    assert!(locate::locate(std::slice::from_ref(&split), "zz").is_empty());
}

#[test]
fn status_of_an_acknowledging_pool_shows_what_each_worker_acknowledged_and_who_is_out() {
    let mut view = rolling_view_per_worker();
    view.leases = vec![
        serde_json::from_value(json!({
            "metadata": {"name": "w-0", "namespace": "ns", "labels": {"swarm.io/pool": "p"},
                         "annotations": {"swarm.io/acked-version": "7"}},
            "spec": {"holderIdentity": "uid-0", "leaseDurationSeconds": 30},
        }))
        .expect("a Lease"),
        // Left by another instance of w-1: not this one's acknowledgement.
        serde_json::from_value(json!({
            "metadata": {"name": "w-1", "namespace": "ns", "labels": {"swarm.io/pool": "p"},
                         "annotations": {"swarm.io/acked-version": "3"}},
            "spec": {"holderIdentity": "uid-old", "leaseDurationSeconds": 30},
        }))
        .expect("a Lease"),
    ];
    let mut status = view.pool.status.clone().unwrap_or_default();
    status.unavailable_workers = vec![
        serde_json::from_value(json!({"pod": "w-1", "reason": "NotReady"})).expect("a worker"),
    ];
    view.pool.status = Some(status);
    let report = status::report(&view).expect("a config");
    let row = |pod: &str| report.workers.iter().find(|w| w.pod == pod).unwrap();
    assert_eq!(row("w-0").acked_version, Some(7));
    assert_eq!(row("w-1").acked_version, None, "another instance's Lease");
    assert_eq!(row("w-1").unavailable.as_deref(), Some("NotReady"));
    assert_eq!(report.failover_bound_seconds.map(f64::round), Some(58.0));
    let text = status::render(&report);
    assert!(
        text.contains("Failover:   within 58 s of a worker stopping"),
        "{text}"
    );
    assert!(text.contains("ACKED   OUT"), "{text}");
}
