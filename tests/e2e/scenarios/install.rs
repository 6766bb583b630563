//! Scenario 1: installing the CRD and the examples gives every job to exactly one worker.

use super::kubectl_ns;
use crate::harness::observe::{assert_invariants, wait_balanced, wait_event};
use crate::harness::scenario;

/// The `kubectl get swarmpools` columns the operator-core issue documents.
const COLUMNS: [&str; 7] = [
    "NAME",
    "STATEFULSET",
    "READY",
    "JOBS",
    "VERSION",
    "PHASE",
    "AGE",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_install_assigns_each_of_the_27_jobs_once_over_two_workers_at_version_1() {
    scenario!("install")
        .run(async |env| {
            env.install_crds().await;
            env.start_operator().await;
            env.apply_examples().await;

            let settled = wait_balanced(env, 2).await;
            assert_invariants(env, &settled).await;
            let config = settled.config();
            assert_eq!(
                env.example.jobs().len(),
                27,
                "the example lists the predecessor's 27 jobs"
            );
            assert_eq!(config.version, 1, "first assignment is version 1");
            assert_eq!(config.loads(), [14, 13], "27 jobs over 2 workers");
            for (pod, workload) in &config.workloads {
                assert_eq!(
                    workload.version, 1,
                    "{pod}: per-worker version of the first write"
                );
            }

            let pool = env.example.pool_name();
            let rebalanced = wait_event(env, &pool, "Normal", "Rebalanced").await;
            assert_eq!(
                rebalanced.iter().map(|e| e.count).sum::<i32>(),
                1,
                "one assignment was computed, so one Rebalanced event: {rebalanced:#?}"
            );

            // What a user sees first.
            let table = kubectl_ns(env, &["get", "swarmpools"]).await;
            let (header, rows) = parse_table(&table);
            assert_eq!(header, COLUMNS, "kubectl get swarmpools columns:\n{table}");
            assert_eq!(rows.len(), 1, "one pool:\n{table}");
            let row = &rows[0];
            let sts = env.example.statefulset_name();
            assert_eq!(
                &row[..6],
                [pool.as_str(), sts.as_str(), "2/2", "27", "1", "Balanced"],
                "kubectl get swarmpools:\n{table}"
            );
            assert!(
                row[6].ends_with('s') || row[6].ends_with('m'),
                "AGE is rendered as an age: {}",
                row[6]
            );

            let wide = kubectl_ns(env, &["get", "swp", "-o", "wide"]).await;
            let (wide_header, wide_rows) = parse_table(&wide);
            let unassigned = wide_header
                .iter()
                .position(|c| c == "UNASSIGNED")
                .unwrap_or_else(|| panic!("-o wide lacks UNASSIGNED:\n{wide}"));
            let in_transit = wide_header
                .iter()
                .position(|c| c == "IN-TRANSIT")
                .unwrap_or_else(|| panic!("-o wide lacks IN-TRANSIT:\n{wide}"));
            let narrow: Vec<String> = wide_header
                .iter()
                .enumerate()
                .filter(|(i, _)| ![unassigned, in_transit].contains(i))
                .map(|(_, c)| c.clone())
                .collect();
            assert_eq!(
                narrow, COLUMNS,
                "-o wide adds only UNASSIGNED and IN-TRANSIT:\n{wide}"
            );
            assert_eq!(wide_rows[0][unassigned], "0", "no job unassigned:\n{wide}");
            assert_eq!(wide_rows[0][in_transit], "0", "no job in transit:\n{wide}");
        })
        .await;
}

/// Splits kubectl's table output into the header and the rows (cells have no spaces here).
fn parse_table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let split = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let header = split(
        lines
            .next()
            .unwrap_or_else(|| panic!("empty table: {text:?}")),
    );
    let rows: Vec<Vec<String>> = lines.map(split).collect();
    for row in &rows {
        assert_eq!(row.len(), header.len(), "ragged table:\n{text}");
    }
    (header, rows)
}
