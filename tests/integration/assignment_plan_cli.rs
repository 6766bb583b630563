//! `swarm-operator plan` as a user runs it, on the example pool.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use swarm_assign::ConfigAssignment;

const EXAMPLE_POOL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/swarmpool.yaml");

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
        .arg("plan")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn plan_example(replicas: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--pool",
        EXAMPLE_POOL,
        "--statefulset",
        "swarm-worker",
        "--replicas",
        replicas,
    ];
    args.extend_from_slice(extra);
    plan(&args)
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8")
}

/// The one error line of a failed run.
fn error_line(output: &Output) -> String {
    assert!(!output.status.success(), "expected a failure");
    assert!(output.stdout.is_empty(), "nothing on stdout");
    let text = stderr(output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {text}");
    lines[0].to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("UTF-8 path").to_string()
}

fn example_jobs() -> Vec<String> {
    let text = std::fs::read_to_string(EXAMPLE_POOL).expect("example pool");
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("- \""))
        .map(|job| job.trim_end_matches('"').to_string())
        .collect()
}

#[test]
fn the_example_pool_on_2_workers_gets_14_and_13_jobs_each_exactly_once() {
    let config = swarm_protocol::config::WorkerConfig::parse(&stdout(&plan_example("2", &[])))
        .expect("config");
    assert_eq!(config.version, 1);
    let assignment = config.assignment("swarm-worker").expect("our pods");
    assert_eq!(assignment.loads(), [14, 13]);
    let held: Vec<&String> = assignment.workers().iter().flatten().collect();
    let distinct: HashSet<&String> = held.iter().copied().collect();
    assert_eq!(held.len(), 27);
    assert_eq!(distinct, example_jobs().iter().collect());
}

#[test]
fn planning_again_from_the_written_config_prints_byte_identical_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = stdout(&plan_example("3", &[]));
    let previous = write(dir.path(), "config.yml", &first);
    let again = plan_example("3", &["--previous", &previous, "--explain"]);
    assert_eq!(stdout(&again), first);
    let explain = stderr(&again);
    assert!(explain.contains("version: 1 (unchanged)"), "{explain}");
    assert!(explain.contains("workers touched: 0\n"), "{explain}");
}

#[test]
fn scaling_from_2_to_3_moves_9_jobs_and_explains_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let previous = write(dir.path(), "config.yml", &stdout(&plan_example("2", &[])));
    let output = plan_example("3", &["--previous", &previous, "--explain"]);
    let config = swarm_protocol::config::WorkerConfig::parse(&stdout(&output)).expect("config");
    // Exclusive (the example's default): version 2 revokes the 9 jobs, version 3 grants them.
    assert_eq!(config.version, 3);
    assert_eq!(config.transit().count(), 0, "settled: nothing in transit");
    let explain = stderr(&output);
    for line in [
        "handoff: Exclusive, 2 writes",
        "  version 2: revokes 9 jobs from swarm-worker-0, swarm-worker-1, 9 in transit",
        "  version 3: grants 9 jobs",
        "jobs: 27",
        "workers: 3",
        "min load: 9",
        "max load: 9",
        "jobs moved: 9",
        "workers touched: 3 (swarm-worker-0, swarm-worker-1, swarm-worker-2)",
        "  swarm-worker-2: 9",
    ] {
        assert!(
            explain.lines().any(|l| l == line),
            "missing {line:?} in:\n{explain}"
        );
    }
}

#[test]
fn overlap_handoff_writes_the_move_in_one_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let previous = write(dir.path(), "config.yml", &stdout(&plan_example("2", &[])));
    let exclusive = stdout(&plan_example("3", &["--previous", &previous]));
    let output = plan_example(
        "3",
        &["--previous", &previous, "--handoff", "overlap", "--explain"],
    );
    let overlap = swarm_protocol::config::WorkerConfig::parse(&stdout(&output)).expect("config");
    assert_eq!(overlap.version, 2);
    assert!(stderr(&output).contains("handoff: Overlap, 1 writes\n"));
    // The same assignment either way; only the version differs.
    let exclusive = swarm_protocol::config::WorkerConfig::parse(&exclusive).expect("config");
    let jobs = |c: &swarm_protocol::config::WorkerConfig| {
        c.workloads()
            .map(|(pod, w)| (pod.to_owned(), w.jobs.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(jobs(&overlap), jobs(&exclusive));
}

#[test]
fn zero_replicas_print_no_worker_and_explain_lists_every_job_unassigned() {
    let output = plan_example("0", &["--explain"]);
    assert_eq!(stdout(&output), "version: 1\nworkloads: {}\n");
    let explain = stderr(&output);
    assert!(
        explain.contains("unassigned jobs: 27 (no workers)\n"),
        "{explain}"
    );
    for job in example_jobs() {
        assert!(
            explain.lines().any(|line| line == format!("  {job}")),
            "{job} listed"
        );
    }
}

#[test]
fn the_strategy_flag_overrides_the_pools_strategy() {
    let config = stdout(&plan_example("2", &["--strategy", "contiguous"]));
    let config = swarm_protocol::config::WorkerConfig::parse(&config).expect("config");
    let jobs = example_jobs();
    assert_eq!(
        config.workload("swarm-worker-0").expect("worker 0").jobs,
        jobs[..14]
    );
    assert_eq!(
        config.workload("swarm-worker-1").expect("worker 1").jobs,
        jobs[14..]
    );
}

#[test]
fn the_pool_can_come_from_standard_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
        .args([
            "plan",
            "--pool",
            "-",
            "--statefulset",
            "swarm-worker",
            "--replicas",
            "2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let text = std::fs::read(EXAMPLE_POOL).expect("example pool");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &text).expect("write stdin");
    let output = child.wait_with_output().expect("finishes");
    assert_eq!(stdout(&output), stdout(&plan_example("2", &[])));
}

#[test]
fn a_duplicate_job_fails_with_one_line_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = write(
        dir.path(),
        "pool.yaml",
        "kind: SwarmPool\nspec:\n  jobs: [stream:a, stream:b, stream:a]\n",
    );
    let line = error_line(&plan(&[
        "--pool",
        &pool,
        "--statefulset",
        "w",
        "--replicas",
        "2",
    ]));
    assert!(
        line.contains("\"stream:a\" is listed more than once"),
        "{line}"
    );
}

#[test]
fn an_empty_job_name_fails_with_one_line_naming_its_position() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = write(dir.path(), "pool.yaml", "spec:\n  jobs: [stream:a, '']\n");
    let line = error_line(&plan(&[
        "--pool",
        &pool,
        "--statefulset",
        "w",
        "--replicas",
        "2",
    ]));
    assert!(line.contains("spec.jobs[1] is empty"), "{line}");
}

#[test]
fn an_unreadable_pool_file_fails_with_one_line_naming_it() {
    let line = error_line(&plan(&[
        "--pool",
        "/does/not/exist.yaml",
        "--statefulset",
        "w",
        "--replicas",
        "2",
    ]));
    assert!(
        line.contains("cannot read --pool /does/not/exist.yaml"),
        "{line}"
    );
}

#[test]
fn a_replica_count_that_is_not_a_number_fails_naming_the_flag() {
    let output = plan_example("two", &[]);
    assert!(!output.status.success());
    let text = stderr(&output);
    let first = text.lines().next().expect("an error line");
    assert!(
        first.contains("invalid value 'two' for '--replicas <N>'"),
        "{text}"
    );
}

#[test]
fn an_unreadable_previous_config_is_reported_and_planned_from_scratch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let previous = write(dir.path(), "config.yml", "version: [\n");
    let output = plan_example("2", &["--previous", &previous]);
    assert_eq!(stdout(&output), stdout(&plan_example("2", &[])));
    assert!(
        stderr(&output).starts_with("warning: --previous"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn plan_reads_jobs_from_the_config_maps_beside_the_pool_or_given_with_jobs_from() {
    let example = |path: &str| format!("{}/examples/{path}", env!("CARGO_MANIFEST_DIR"));
    let args = |pool: &str| {
        vec![
            "--pool".to_owned(),
            pool.to_owned(),
            "--statefulset".to_owned(),
            "swarm-worker".to_owned(),
            "--replicas".to_owned(),
            "3".to_owned(),
        ]
    };
    let run = |args: &[String]| plan(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let plain = stdout(&run(&args(&example("swarmpool.yaml"))));
    let from = stdout(&run(&args(&example("jobs-from/swarmpool.yaml"))));
    assert_eq!(from, plain, "the same 27 jobs give the same config");

    // The pool alone names a ConfigMap it was not given; --jobs-from supplies it.
    let dir = tempfile::tempdir().expect("temp dir");
    let text = std::fs::read_to_string(example("jobs-from/swarmpool.yaml")).unwrap();
    let (config_map, pool) = text.split_once("\n---\n").expect("two documents");
    let pool_only = write(dir.path(), "pool.yaml", pool);
    let source = write(dir.path(), "jobs.yaml", config_map);
    let line = error_line(&run(&args(&pool_only)));
    assert!(
        line.contains("ConfigMap swarm-pool-jobs") && line.contains("--jobs-from"),
        "{line}"
    );
    let mut with_source = args(&pool_only);
    with_source.extend(["--jobs-from".to_owned(), source]);
    assert_eq!(stdout(&run(&with_source)), plain);
}

#[test]
fn the_qos_example_gives_dedicated_jobs_their_own_workers_and_a_bad_qos_is_one_line() {
    let qos_pool = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/qos/swarmpool.yaml");
    let output = plan(&[
        "--pool",
        qos_pool,
        "--statefulset",
        "swarm-worker",
        "--replicas",
        "4",
        "--explain",
    ]);
    let config = swarm_protocol::config::WorkerConfig::parse(&stdout(&output)).expect("config");
    let alone: Vec<&str> = config
        .workloads()
        .filter(|(_, w)| w.jobs.len() == 1)
        .map(|(_, w)| w.jobs[0].as_str())
        .collect();
    assert_eq!(alone, ["stream:xxrtve1", "stream:cars:new"]);
    let explain = stderr(&output);
    assert!(
        explain.contains("  swarm-worker-0: 1 (weight 1) dedicated\n"),
        "{explain}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let bad = write(
        dir.path(),
        "bad.yaml",
        "spec:\n  jobs: [a, b]\n  qos:\n    weights: {c: 2}\n",
    );
    let line = error_line(&plan(&[
        "--pool",
        &bad,
        "--statefulset",
        "w",
        "--replicas",
        "2",
    ]));
    assert!(
        line.contains("spec.qos.weights names job \"c\", which is not in spec.jobs"),
        "{line}"
    );
}
