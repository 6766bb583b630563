//! `rollout.policy: None` with `handoff: Overlap`: nothing restarts, and each worker reloads
//! the `config.yml` the kubelet refreshes in its volume. This measures that refresh where it
//! happens, on a real kubelet with its default settings: from the operator's ConfigMap write
//! (as the harness sees it, within 0.1 s) to the worker's report of the new version (it polls
//! the file every second), over [`CHANGES`] job edits, and prints the median and the worst.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{
    FileWorkers, Rollout, assert_workers_run_their_entries, install_file_workers, median_and_worst,
};
use crate::harness::observe::Observed;
use crate::harness::observe::{assert_invariants, observe, wait_balanced};
use crate::harness::poll::eventually_within;
use crate::harness::worker_fleet::Reports;
use crate::harness::{Env, WORKER_IMAGE_ENV, scenario};

/// How many config versions are measured.
const CHANGES: usize = 10;
/// The pause between two edits: shorter than the kubelet's period, so the changes land at
/// different points of it.
const BETWEEN_CHANGES: Duration = Duration::from_secs(3);
/// How long a refresh may take at most before the scenario fails: the kubelet's sync period
/// (1 min), its ConfigMap cache and the worker's poll, with room for a loaded machine.
const REFRESH_WITHIN: Duration = Duration::from_secs(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_refreshes_a_mounted_config_within_its_sync_period() {
    scenario!("real-workers-file-refresh")
        .image(WORKER_IMAGE_ENV)
        .run(async |env| {
            let FileWorkers {
                reports,
                pods,
                documents,
            } = install_file_workers(env, Rollout::ReloadOverlap).await;
            let settled = settle(env, &reports).await;
            let uids: Vec<String> = settled.pods.values().map(|p| p.uid.clone()).collect();
            let mut pool: Value = documents
                .iter()
                .find(|doc| doc["kind"] == "SwarmPool")
                .expect("the example's pool")
                .clone();
            let written = edit_the_jobs(env, &mut pool, settled.config().version).await;
            wait_every_worker_at(&reports, &uids, written.last().expect("a change").0).await;
            report_the_refresh_times(&reports, &uids, &written);

            settle(env, &reports).await;
            pods.assert_no_restart();
            let stats = env.handoff_stats();
            eprintln!(
                "real-workers-file-refresh: Overlap's duplicates, the cost it documents: \
                 {:.1} job-seconds on {} jobs",
                stats.duplicate_job_seconds,
                stats.duplicated_jobs.len()
            );
        })
        .await;
}

/// Waits until the pool is Balanced over the example's replicas, checks its invariants, and
/// that the containers run exactly their entries.
async fn settle(env: &Env, reports: &Reports) -> Observed {
    let settled = wait_balanced(env, env.example.replicas()).await;
    assert_invariants(env, &settled).await;
    assert_workers_run_their_entries(reports, &settled, REFRESH_WITHIN).await;
    settled
}

/// Applies [`CHANGES`] edits of `pool`'s jobs, [`BETWEEN_CHANGES`] apart, each once the
/// operator wrote the one before (after config `version`); returns each version and when the
/// harness saw it written.
async fn edit_the_jobs(env: &Env, pool: &mut Value, version: u64) -> Vec<(u64, Timestamp)> {
    let mut jobs = env.example.jobs();
    let mut written: Vec<(u64, Timestamp)> = Vec::new();
    let mut version = version;
    for change in 0..CHANGES {
        jobs.push(format!("stream:refresh-{change}:new"));
        pool["spec"]["jobs"] = json!(jobs);
        env.apply("real-workers-edit.yaml", std::slice::from_ref(pool))
            .await;
        let previous = version;
        version = eventually_within(
            "the operator to write the edit",
            Duration::from_secs(30),
            || async move {
                let o = observe(env).await?;
                match o.config.as_ref().map(|c| c.version) {
                    Some(v) if v > previous => Ok(v),
                    v => Err(format!("config version {v:?}")),
                }
            },
        )
        .await;
        written.push((version, Timestamp::now()));
        tokio::time::sleep(BETWEEN_CHANGES).await;
    }
    written
}

/// Waits until the worker of every pod instance of `uids` reported config version `last`.
async fn wait_every_worker_at(reports: &Reports, uids: &[String], last: u64) {
    eventually_within(
        "every worker to see the last version",
        REFRESH_WITHIN,
        || async move {
            let behind: Vec<&String> = uids
                .iter()
                .filter(|uid| {
                    !reports
                        .worker_lines(uid)
                        .iter()
                        .any(|line| line.version >= Some(last))
                })
                .collect();
            if behind.is_empty() {
                Ok(())
            } else {
                Err(format!("behind: {behind:?}"))
            }
        },
    )
    .await;
}

/// Prints the median and the worst time from each version's write to each worker's first
/// report of it (or of a later one), and fails if one took [`REFRESH_WITHIN`].
fn report_the_refresh_times(reports: &Reports, uids: &[String], written: &[(u64, Timestamp)]) {
    let mut refresh = Vec::new();
    for uid in uids {
        let lines = reports.worker_lines(uid);
        for (version, at) in written {
            let seen = lines
                .iter()
                .find(|line| line.version >= Some(*version))
                .expect("a line at or past the last version");
            refresh.push(seen.at.duration_since(*at).as_secs_f64().max(0.0));
        }
    }
    let (median, worst) = median_and_worst(&refresh);
    eprintln!(
        "real-workers-file-refresh: mounted config.yml refresh, ConfigMap write to the worker's \
         report: {median:.1} s (median), {worst:.1} s (worst) over {} changes x {} workers",
        written.len(),
        uids.len()
    );
    assert!(
        worst < REFRESH_WITHIN.as_secs_f64(),
        "a refresh took {worst:.1} s"
    );
}
