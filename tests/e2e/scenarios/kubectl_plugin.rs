//! Operating a pool day to day: `kubectl swarm status/where/plan`, found by the real kubectl
//! through PATH, agree with the ConfigMap and the status; `plan` predicts what a scale does;
//! the per-pool metrics follow the status through a rollout, pass `promtool check metrics`,
//! and go with the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use super::{scale, swarm_json};
use crate::harness::kubectl::Kubectl;
use crate::harness::observe::{
    Observed, RolloutEvents, assert_invariants, balanced, observe, rollout_events,
    wait_rollout_events,
};
use crate::harness::poll::eventually_within;
use crate::harness::promtool;
use crate::harness::scenario;
use crate::harness::worker_config::moved_jobs;
use crate::harness::{Env, SimSpeed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubectl_plugin_and_the_pool_metrics_tell_what_the_config_map_and_status_say() {
    // Slow enough that the handoff of the scale below lasts seconds, for samples taken in it.
    scenario!("kubectl-plugin")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let before = env.install_example().await;
            status_and_where_tell_the_settled_pool(env, &before).await;
            let plan = plan(env, 3).await;
            assert_eq!(plan["fromReplicas"], 2, "{plan}");
            assert_eq!(plan["toReplicas"], 3, "{plan}");
            let sts = env.example.statefulset_name();
            assert_eq!(
                plan["workersRestarted"],
                serde_json::json!([format!("{sts}-0"), format!("{sts}-1"), format!("{sts}-2")]),
                "both workers give jobs away, the new one restarts at the grant: {plan}"
            );
            let metrics = env.operator_metrics().await;
            promtool::check_metrics(&metrics).unwrap_or_else(|why| panic!("{why}\n{metrics}"));
            assert_metrics_match(&metrics, &before)
                .unwrap_or_else(|why| panic!("{why}\n{metrics}"));
            assert_allocator_stats(&metrics);

            let workers: Vec<String> = (0..3).map(|i| format!("{sts}-{i}")).collect();
            let events_before = rollout_events(env, &workers).await;
            scale(env, 3).await;
            let after = sample_through_the_rollout(env, &before).await;
            // The plan said what the scale did. Its restarts and config writes are the
            // operator's: one RefreshingWorker event per worker it named, one Rebalanced event
            // per config version.
            assert_plan_was_done(&plan, &before, &after);
            wait_plan_events(env, &plan, &events_before).await;
            let pool = env.example.pool_name();
            let namespace = env.example.namespace();
            let status = swarm_json(env, &["status", &pool, "-n", &namespace]).await;
            assert_status_matches(&status, &after);

            scale_down_as_planned(env, &after, &workers).await;
            errors_a_script_can_use(env).await;
            a_deleted_pool_is_a_series_gone(env).await;
        })
        .await;
}

/// `kubectl swarm status` (as JSON and as a table) and `kubectl swarm where` say what the
/// ConfigMap and the status of the settled pool `before` say.
async fn status_and_where_tell_the_settled_pool(env: &Env, before: &Observed) {
    let namespace = env.example.namespace();
    let pool = env.example.pool_name();
    let status = swarm_json(env, &["status", &pool, "-n", &namespace]).await;
    assert_status_matches(&status, before);
    let table = swarm_ok(env, &["status", &pool, "-n", &namespace]).await;
    assert_table_matches(&table, before);

    for job in before.spec_jobs().iter().step_by(9) {
        let found = swarm_json(env, &["where", job, "-n", &namespace]).await;
        let holder = before
            .config()
            .job_sets()
            .into_iter()
            .find(|(_, jobs)| jobs.contains(job))
            .map(|(pod, _)| pod)
            .expect("every job is held");
        assert_eq!(found.as_array().map(Vec::len), Some(1), "{found}");
        assert_eq!(found[0]["state"], "Assigned", "{found}");
        assert_eq!(found[0]["worker"], holder.as_str(), "{found}");
        assert_eq!(found[0]["pool"], pool.as_str(), "{found}");
        let since = before.config().workload(&holder).map(|w| w.version);
        assert_eq!(found[0]["sinceVersion"].as_u64(), since, "{found}");
    }
}

/// `kubectl swarm plan <pool> --replicas <replicas> -o json`.
async fn plan(env: &Env, replicas: usize) -> Value {
    let pool = env.example.pool_name();
    let namespace = env.example.namespace();
    let replicas = replicas.to_string();
    swarm_json(
        env,
        &["plan", &pool, "-n", &namespace, "--replicas", &replicas],
    )
    .await
}

/// Through the rollout of a scale to 3 from `before`: samples of the metrics agree with the
/// status read around them (the operator's pool cache may lag the API for a moment, so not every
/// sample can), and mid-handoff `kubectl swarm status` with the ConfigMap. Returns the settled
/// pool, once the metrics show it.
async fn sample_through_the_rollout(env: &Env, before: &Observed) -> Observed {
    let pool = env.example.pool_name();
    let namespace = env.example.namespace();
    let sts = env.example.statefulset_name();
    let (mut agreed, mut reported_handoff) = (0, 0);
    let after = loop {
        let observed = observe(env).await.expect("the pool and its ConfigMap");
        let metrics = env.operator_metrics().await;
        let report = swarm_json(env, &["status", &pool, "-n", &namespace]).await;
        let again = observe(env).await.expect("the pool and its ConfigMap");
        let pool_unchanged = again.pool_resource_version() == observed.pool_resource_version();
        let unchanged = pool_unchanged
            && again.config_map_resource_version() == observed.config_map_resource_version();
        if pool_unchanged
            && observed.phase() != "Balanced"
            && assert_metrics_match(&metrics, &observed).is_ok()
        {
            agreed += 1;
        }
        // Mid-handoff, the plugin's IN TRANSIT and RESTART columns say what the ConfigMap and
        // the status say (the pods may change between the reads, so not every sample can).
        if unchanged
            && !observed.config().in_transit().is_empty()
            && status_agrees(&report, &observed).is_ok()
        {
            reported_handoff += 1;
        }
        if balanced(&again, 3, &sts).is_ok() && again.config().version > before.config().version {
            break again;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        agreed > 0,
        "no sample of the metrics agreed with the status"
    );
    assert!(
        reported_handoff > 0,
        "no sample of kubectl swarm status agreed with the ConfigMap mid-handoff"
    );
    assert_invariants(env, &after).await;
    eventually_within("the metrics to show the settled pool", WAIT, || {
        let after = &after;
        async move { assert_metrics_match(&env.operator_metrics().await, after) }
    })
    .await;
    after
}

/// Waits for the events of what `plan` said: one RefreshingWorker event per worker it names,
/// one Rebalanced event per config write, since `events_before`.
async fn wait_plan_events(env: &Env, plan: &Value, events_before: &RolloutEvents) {
    let restarted = restarted_by(plan);
    let writes = plan["configWrites"].as_i64().expect("configWrites");
    wait_rollout_events(env, events_before, writes as i32, &restarted).await;
}

/// And back down to 2 from `after`: the plan of a scale-down is what the operator does too.
async fn scale_down_as_planned(env: &Env, after: &Observed, workers: &[String]) {
    let plan = plan(env, 2).await;
    let events_before = rollout_events(env, workers).await;
    scale(env, 2).await;
    let sts = env.example.statefulset_name();
    let version = after.config().version;
    let down = eventually_within(
        "the pool to settle on 2 workers",
        Duration::from_secs(120),
        || {
            let sts = &sts;
            async move {
                let o = observe(env).await?;
                balanced(&o, 2, sts)?;
                if o.config().version > version {
                    Ok(o)
                } else {
                    Err("no new version".to_owned())
                }
            }
        },
    )
    .await;
    assert_plan_was_done(&plan, after, &down);
    wait_plan_events(env, &plan, &events_before).await;
}

/// One-line errors and exit codes a script can use: 1 for what is not there, 2 for a usage
/// error, 3 for a cluster that does not answer.
async fn errors_a_script_can_use(env: &Env) {
    let namespace = env.example.namespace();
    let pool = env.example.pool_name();
    let missing = env
        .kubectl
        .run(&["swarm", "status", "no-such-pool", "-n", &namespace])
        .await;
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert_eq!(
        missing.stderr,
        format!("error: no SwarmPool no-such-pool in namespace {namespace}\n")
    );
    let unknown = env
        .kubectl
        .run(&["swarm", "where", "no-such-job", "-A"])
        .await;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    // `-A` reads every namespace: on a real cluster the scenarios run side by side, and another
    // one's pool may warn first (an unlabelled `jobsFrom` ConfigMap, say). The error is the
    // last line, and anything before it is a warning.
    let (warnings, error) = unknown
        .stderr
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", unknown.stderr.trim_end()));
    assert_eq!(
        error, "error: job no-such-job is in no SwarmPool in any namespace",
        "{unknown:?}"
    );
    assert!(
        warnings.lines().all(|line| line.starts_with("warning: ")),
        "{unknown:?}"
    );
    let usage = env.kubectl.run(&["swarm", "plan", &pool]).await;
    assert_eq!(usage.code, Some(2), "--replicas is required: {usage:?}");
    let unreachable = unreachable_cluster(env)
        .run(&["swarm", "status", &pool, "-n", &namespace])
        .await;
    assert_eq!(unreachable.code, Some(3), "{unreachable:?}");
    assert!(
        unreachable
            .stderr
            .starts_with("error: cannot read the SwarmPool: ")
            && unreachable.stderr.lines().count() == 1,
        "{unreachable:?}"
    );
}

/// A deleted pool is a series gone from the operator's metrics.
async fn a_deleted_pool_is_a_series_gone(env: &Env) {
    let namespace = env.example.namespace();
    let pool = env.example.pool_name();
    env.kubectl
        .ok(&["-n", &namespace, "delete", "swarmpool", &pool])
        .await;
    let label = format!("pool=\"{pool}\"");
    eventually_within("the deleted pool's series to disappear", WAIT, || {
        let label = &label;
        async move {
            let metrics = env.operator_metrics().await;
            match metrics.lines().find(|line| line.contains(label.as_str())) {
                Some(line) => Err(format!("still exported: {line}")),
                None => Ok(()),
            }
        }
    })
    .await;
}

const WAIT: Duration = Duration::from_secs(30);

/// The plan's jobs moved, shares and config writes are what the scale from `before` to `after`
/// did.
fn assert_plan_was_done(plan: &Value, before: &Observed, after: &Observed) {
    let moved = moved_jobs(before.config(), after.config());
    assert_eq!(
        plan["jobsMoved"].as_u64(),
        Some(moved.len() as u64),
        "{plan}"
    );
    let predicted: BTreeMap<String, u64> = plan["workers"]
        .as_array()
        .expect("workers")
        .iter()
        // A position scaled away has no jobs after; every row names its pod.
        .filter_map(|w| {
            let jobs = w["jobsAfter"].as_u64()?;
            Some((w["pod"].as_str().expect("pod").to_owned(), jobs))
        })
        .collect();
    let actual: BTreeMap<String, u64> = after
        .config()
        .job_sets()
        .into_iter()
        .map(|(pod, jobs)| (pod, jobs.len() as u64))
        .collect();
    assert_eq!(predicted, actual, "plan: {plan}");
    let writes = plan["configWrites"].as_i64().expect("configWrites");
    assert_eq!(
        i64::try_from(after.config().version - before.config().version).unwrap(),
        writes,
        "{plan}"
    );
}

/// The workers the plan says restart.
fn restarted_by(plan: &Value) -> BTreeSet<String> {
    plan["workersRestarted"]
        .as_array()
        .expect("workersRestarted")
        .iter()
        .map(|pod| pod.as_str().expect("a pod name").to_owned())
        .collect()
}

/// kubectl with a kubeconfig whose API server does not answer (a port nothing listens on).
fn unreachable_cluster(env: &Env) -> Kubectl {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    let path = env.scratch("unreachable.kubeconfig");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\n\
         clusters: [{{name: gone, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\n\
         users: [{{name: nobody, user: {{}}}}]\n\
         contexts: [{{name: gone, context: {{cluster: gone, user: nobody, namespace: swarm}}}}]\n"
    );
    std::fs::write(&path, kubeconfig).expect("write the kubeconfig");
    Kubectl::new(&path, &env.scratch("unreachable-cache"))
}

/// `kubectl swarm <args>`, which must succeed; its standard output.
async fn swarm_ok(env: &Env, args: &[&str]) -> String {
    let mut full = vec!["swarm"];
    full.extend_from_slice(args);
    env.kubectl.ok(&full).await
}

/// `status -o json` says what the ConfigMap and the pool's status say.
fn assert_status_matches(report: &Value, o: &Observed) {
    status_agrees(report, o).unwrap_or_else(|why| panic!("{why}: {report}"));
}

/// Whether `status -o json` says what the ConfigMap and the pool's status in `o` say: the phase
/// and version, then per worker its jobs, version, readiness, pending restart (the status's
/// stale workers) and the jobs in transit from it.
fn status_agrees(report: &Value, o: &Observed) -> Result<(), String> {
    let config = o.config();
    let same = |what: &str, got: &Value, want: Value| {
        if *got == want {
            Ok(())
        } else {
            Err(format!("{what}: {got}, expected {want}"))
        }
    };
    same("phase", &report["phase"], o.phase().into())?;
    same("version", &report["version"], config.version.into())?;
    same(
        "workload",
        &report["workload"],
        o.status_str("workload").unwrap_or("").into(),
    )?;
    same(
        "jobsInTransit",
        &report["jobsInTransit"],
        config.in_transit().len().into(),
    )?;
    same(
        "unassignedJobs",
        &report["unassignedJobs"]
            .as_array()
            .map_or(0, Vec::len)
            .into(),
        o.status_u64("unassignedJobs").unwrap_or(0).into(),
    )?;
    let workers = report["workers"].as_array().ok_or("no workers")?;
    let pods: Vec<&str> = workers.iter().filter_map(|w| w["pod"].as_str()).collect();
    let mut expected: Vec<&str> = config.pods();
    for (pod, _) in &config.transit {
        if !expected.contains(&pod.as_str()) {
            expected.push(pod);
        }
    }
    if pods != expected {
        return Err(format!("workers {pods:?}, expected {expected:?}"));
    }
    let stale = o.stale_workers();
    for worker in workers {
        let pod = worker["pod"].as_str().ok_or("a worker without a pod")?;
        let (jobs, version) = config
            .workload(pod)
            .map_or((Vec::new(), config.version), |w| {
                (w.jobs.clone(), w.version)
            });
        let in_transit: Vec<&String> = config
            .transit
            .iter()
            .filter(|(from, _)| from == pod)
            .flat_map(|(_, jobs)| jobs)
            .collect();
        same(&format!("{pod} jobs"), &worker["jobs"], jobs.into())?;
        same(
            &format!("{pod} sinceVersion"),
            &worker["sinceVersion"],
            version.into(),
        )?;
        let ready = o.pods.get(pod).is_some_and(|p| p.ready && !p.terminating);
        same(&format!("{pod} ready"), &worker["ready"], ready.into())?;
        let pending = stale.iter().any(|p| p == pod);
        same(
            &format!("{pod} restartPending"),
            &worker["restartPending"],
            pending.into(),
        )?;
        same(
            &format!("{pod} inTransit"),
            &worker["inTransit"],
            serde_json::json!(in_transit),
        )?;
    }
    Ok(())
}

/// The table a person reads: the phase, the version, and one row per worker with its ready
/// state, job count and version.
fn assert_table_matches(table: &str, o: &Observed) {
    let config = o.config();
    assert!(
        table.contains(&format!("Phase:      {}\n", o.phase())),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "Config:     version {} in ConfigMap",
            config.version
        )),
        "{table}"
    );
    let header: Vec<&str> = table
        .lines()
        .find(|line| line.starts_with("WORKER"))
        .expect("a header row")
        .split("   ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .collect();
    assert_eq!(
        header,
        ["WORKER", "READY", "JOBS", "SINCE", "RESTART", "IN TRANSIT"]
    );
    for pod in config.pods() {
        let workload = config.workload(pod).expect("in the config");
        let row: Vec<&str> = table
            .lines()
            .find(|line| line.split_whitespace().next() == Some(pod))
            .unwrap_or_else(|| panic!("no row for {pod}:\n{table}"))
            .split_whitespace()
            .collect();
        let expected = [
            pod.to_owned(),
            "yes".to_owned(),
            workload.jobs.len().to_string(),
            format!("v{}", workload.version),
            "no".to_owned(),
            "0".to_owned(),
        ];
        assert_eq!(row, expected, "{table}");
    }
}

/// The value of `series` (name and labels, as exposed) in `metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// The operator's allocator statistics: a live heap of some MiB, within its active pages,
/// within what jemalloc holds resident.
fn assert_allocator_stats(metrics: &str) {
    let stat = |name: &str| -> f64 {
        let series = format!("swarm_operator_allocator_bytes{{stat=\"{name}\"}}");
        sample(metrics, &series).unwrap_or_else(|| panic!("no {series}:\n{metrics}"))
    };
    let (allocated, active, resident) = (stat("allocated"), stat("active"), stat("resident"));
    assert!(
        allocated > 1_048_576.0,
        "a running operator's heap: {allocated}"
    );
    assert!(
        allocated <= active && active <= resident,
        "allocated {allocated} <= active {active} <= resident {resident}"
    );
}

/// The pool's gauges in `metrics` equal its status in `o`.
fn assert_metrics_match(metrics: &str, o: &Observed) -> Result<(), String> {
    let namespace = o.pool["metadata"]["namespace"].as_str().unwrap_or_default();
    let pool = o.pool["metadata"]["name"].as_str().unwrap_or_default();
    let labels = format!("{{namespace=\"{namespace}\",pool=\"{pool}\"}}");
    let gauge = |name: &str, labels: &str| -> Result<f64, String> {
        let series = format!("swarm_operator_{name}{labels}");
        sample(metrics, &series).ok_or_else(|| format!("no {series}"))
    };
    let status_count = |field: &str| o.status_u64(field).unwrap_or(0) as f64;
    let expected = [
        ("pool_jobs", status_count("jobs")),
        ("pool_workers", status_count("workers")),
        ("pool_ready_workers", status_count("readyWorkers")),
        ("pool_unassigned_jobs", status_count("unassignedJobs")),
        ("pool_jobs_in_transit", status_count("jobsInTransit")),
        ("pool_stale_workers", o.stale_workers().len() as f64),
        ("pool_config_version", status_count("version")),
    ];
    for (name, value) in expected {
        let got = gauge(name, &labels)?;
        if got != value {
            return Err(format!("{name} is {got}, the status says {value}"));
        }
    }
    for phase in ["Pending", "RollingOut", "Balanced", "Degraded", "Failed"] {
        let labels = format!("{{namespace=\"{namespace}\",pool=\"{pool}\",phase=\"{phase}\"}}");
        let got = gauge("pool_phase", &labels)?;
        let value = if o.phase() == phase { 1.0 } else { 0.0 };
        if got != value {
            return Err(format!(
                "pool_phase{labels} is {got}, the phase is {}",
                o.phase()
            ));
        }
    }
    Ok(())
}
