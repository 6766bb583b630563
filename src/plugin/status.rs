//! `kubectl swarm status POOL`: the pool's phase and version, then one row per worker.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use swarm_assign::Qos;

use super::output::Table;
use super::{PluginError, PoolView};
use crate::api::conditions::READY;
use crate::api::crd::RolloutPolicy;
use crate::api::crd::SwarmPoolStatus;
use crate::state::node_leases::NODE_SILENCE;
use swarm_protocol::config::WorkerConfig;
use swarm_protocol::fence;

/// What `status` reports, as `-o json|yaml` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The status phase, if the operator reported one.
    pub phase: Option<String>,
    /// Reason of the `Ready` condition.
    pub reason: Option<String>,
    /// Message of the `Ready` condition.
    pub message: Option<String>,
    /// `StatefulSet` or `Deployment`.
    pub workload_kind: String,
    /// Name of the workload the selector matched.
    pub workload: Option<String>,
    /// The ConfigMap the workers mount.
    pub config_map: String,
    /// The config version in the ConfigMap.
    pub version: u64,
    /// Jobs in the spec.
    pub jobs: usize,
    /// Jobs of the spec a worker holds.
    pub held_jobs: usize,
    /// Jobs of the spec that no worker holds and none is handing over.
    pub unassigned_jobs: Vec<String>,
    /// Jobs revoked from a worker and not yet granted.
    pub jobs_in_transit: usize,
    /// Under `rollout.policy: Acknowledge`: at worst how long after a worker stops (frozen, cut
    /// off, its node lost) its jobs run elsewhere, from the workers' permit and the pool's
    /// grace (see docs/worker-protocol.md, the failover table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_bound_seconds: Option<f64>,
    /// The workers in the config, in ordinal (slot) order, then pods that only hold jobs in
    /// transit.
    pub workers: Vec<WorkerStatus>,
}

/// One worker's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// Pod name.
    pub pod: String,
    /// Whether the pod exists.
    pub exists: bool,
    /// Whether the pod is Ready (and not terminating).
    pub ready: bool,
    /// The jobs it runs.
    pub jobs: Vec<String>,
    /// Sum of its jobs' weights, for a pool with weighted jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    /// The config version at which its job set last changed.
    pub since_version: u64,
    /// Whether its pod still has to restart on its current job set.
    pub restart_pending: bool,
    /// Jobs revoked from it, waiting for its pod to be gone before another worker gets them.
    pub in_transit: Vec<String>,
    /// Under `Acknowledge`: the config version its pod instance last acknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acked_version: Option<u64>,
    /// Under `Acknowledge`: why the operator took it out of the pool, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// Builds the report of one pool.
pub fn report(view: &PoolView) -> Result<StatusReport, PluginError> {
    let config = view.config()?;
    let spec = &view.pool.spec;
    let status = view.pool.status.clone().unwrap_or_default();
    let acknowledge = spec.rollout.policy == RolloutPolicy::Acknowledge;
    let workers = worker_rows(view, &config, &status, acknowledge);

    let held: BTreeSet<&str> = config
        .workloads()
        .flat_map(|(_, w)| w.jobs.iter())
        .map(String::as_str)
        .collect();
    let in_transit: BTreeSet<&str> = config
        .transit()
        .flat_map(|(_, jobs)| jobs.iter())
        .map(String::as_str)
        .collect();
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    let grace = Duration::from_secs(spec.rollout.lease_grace_seconds.max(0).unsigned_abs());
    let failover_bound_seconds =
        acknowledge.then(|| failover_bound(view.permit(), grace).as_secs_f64());
    Ok(StatusReport {
        namespace: view.namespace(),
        pool: view.name(),
        phase: status.phase.map(|p| p.as_str().to_owned()),
        reason: ready.map(|c| c.reason.clone()),
        message: ready.map(|c| c.message.clone()),
        workload_kind: spec.workload_kind.as_str().to_owned(),
        workload: status.workload.or(status.stateful_set),
        config_map: view.pool.config_map_name(),
        version: config.version,
        jobs: spec.jobs.len(),
        held_jobs: spec
            .jobs
            .iter()
            .filter(|job| held.contains(job.as_str()))
            .count(),
        unassigned_jobs: spec
            .jobs
            .iter()
            .filter(|job| !held.contains(job.as_str()) && !in_transit.contains(job.as_str()))
            .cloned()
            .collect(),
        jobs_in_transit: config.transit().map(|(_, jobs)| jobs.len()).sum(),
        failover_bound_seconds,
        workers,
    })
}

/// One row per worker of `config`, in ordinal (slot) order, then the pods that only hold jobs
/// in transit.
fn worker_rows(
    view: &PoolView,
    config: &WorkerConfig,
    status: &SwarmPoolStatus,
    acknowledge: bool,
) -> Vec<WorkerStatus> {
    let spec = &view.pool.spec;
    let neutral = Qos::default();
    let qos = spec.qos.as_ref().unwrap_or(&neutral);
    let weight = |jobs: &[String]| {
        qos.is_weighted()
            .then(|| jobs.iter().map(|job| qos.weight(job)).sum())
    };
    let transit_of = |pod: &str| -> Vec<String> {
        config
            .transit()
            .filter(|(from, _)| *from == pod)
            .flat_map(|(_, jobs)| jobs.iter().cloned())
            .collect()
    };
    let row = |pod: &str, jobs: Vec<String>, since_version: u64| WorkerStatus {
        pod: pod.to_owned(),
        exists: view.ready(pod).is_some(),
        ready: view.ready(pod).unwrap_or(false),
        weight: weight(&jobs),
        jobs,
        since_version,
        restart_pending: view.restart_pending(pod),
        in_transit: transit_of(pod),
        acked_version: acknowledge.then(|| view.acked(pod)).flatten(),
        unavailable: status
            .unavailable_workers
            .iter()
            .find(|w| w.pod == pod)
            .map(|w| format!("{:?}", w.reason)),
    };
    let mut workers: Vec<WorkerStatus> = config
        .workloads()
        .map(|(pod, workload)| row(pod, workload.jobs.clone(), workload.version))
        .collect();
    for (pod, _) in config.transit() {
        if config.workload(pod).is_none() && !workers.iter().any(|w| w.pod == pod) {
            workers.push(row(pod, Vec::new(), config.version));
        }
    }
    workers
}

/// The kubelet's probe period in the workers' pod template (docs/worker-protocol.md).
const PROBE_PERIOD: Duration = Duration::from_secs(5);

/// At worst how long after a worker stops its jobs run elsewhere: the longer of its pod turning
/// NotReady (its last read's readiness window, one probe period and the grace) and its node's
/// Lease turning silent, then the revoke wait.
pub fn failover_bound(permit: Duration, grace: Duration) -> Duration {
    let not_ready = fence::ready_within(permit) + PROBE_PERIOD + grace;
    let node = NODE_SILENCE.unsigned_abs();
    not_ready.max(node) + fence::revoke_wait(permit, grace)
}

/// The report as a person reads it: a summary, then the table of workers.
pub fn render(report: &StatusReport) -> String {
    let mut out = String::new();
    let workload = report.workload.as_deref().unwrap_or("(none matched)");
    out.push_str(&format!(
        "Pool:       {}/{}\n",
        report.namespace, report.pool
    ));
    let phase = report.phase.as_deref().unwrap_or("(not reconciled yet)");
    match report.reason.as_ref().filter(|reason| *reason != phase) {
        Some(reason) => out.push_str(&format!("Phase:      {phase} ({reason})\n")),
        None => out.push_str(&format!("Phase:      {phase}\n")),
    }
    if let Some(message) = report.message.as_deref().filter(|m| !m.is_empty()) {
        out.push_str(&format!("Message:    {message}\n"));
    }
    out.push_str(&format!(
        "Workload:   {} {workload}\n",
        report.workload_kind
    ));
    out.push_str(&format!(
        "Config:     version {} in ConfigMap {}\n",
        report.version, report.config_map
    ));
    out.push_str(&format!(
        "Jobs:       {} ({} held, {} in transit, {} unassigned)\n",
        report.jobs,
        report.held_jobs,
        report.jobs_in_transit,
        report.unassigned_jobs.len()
    ));
    if let Some(bound) = report.failover_bound_seconds {
        out.push_str(&format!(
            "Failover:   within {bound:.0} s of a worker stopping, its jobs run elsewhere\n"
        ));
    }
    out.push('\n');

    if report.workers.is_empty() {
        out.push_str("No workers.\n");
    } else {
        out.push_str(&workers_table(report));
    }
    if !report.unassigned_jobs.is_empty() {
        out.push_str(&format!(
            "\nUnassigned: {}\n",
            report.unassigned_jobs.join(", ")
        ));
    }
    out
}

/// The table of workers, one row each.
fn workers_table(report: &StatusReport) -> String {
    let weighted = report.workers.iter().any(|w| w.weight.is_some());
    let mut header = vec!["WORKER", "READY", "JOBS"];
    if weighted {
        header.push("WEIGHT");
    }
    header.extend(["SINCE", "RESTART", "IN TRANSIT"]);
    let acknowledge = report.failover_bound_seconds.is_some();
    if acknowledge {
        header.extend(["ACKED", "OUT"]);
    }
    let mut table = Table::new(&header);
    for worker in &report.workers {
        let ready = match (worker.exists, worker.ready) {
            (false, _) => "no pod",
            (true, true) => "yes",
            (true, false) => "no",
        };
        let mut cells = vec![
            worker.pod.clone(),
            ready.to_owned(),
            worker.jobs.len().to_string(),
        ];
        if weighted {
            cells.push(worker.weight.unwrap_or(0).to_string());
        }
        cells.extend([
            format!("v{}", worker.since_version),
            if worker.restart_pending { "yes" } else { "no" }.to_owned(),
            worker.in_transit.len().to_string(),
        ]);
        if acknowledge {
            cells.push(
                worker
                    .acked_version
                    .map_or("-".to_owned(), |v| format!("v{v}")),
            );
            cells.push(worker.unavailable.clone().unwrap_or_else(|| "-".to_owned()));
        }
        table.row(cells);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failover_bound_is_the_slower_path_out_of_the_pool_then_the_revoke_wait() {
        let s = Duration::from_secs;
        // NotReady after the last read's 18 s, a 5 s probe and the 2 s grace: 25 s; then 33.2 s.
        let bound = failover_bound(fence::DEFAULT_PERMIT, s(2));
        assert_eq!(bound.as_millis(), 58_224);
        // A 10 s permit: its node's 20 s silence is the slower path.
        let bound = failover_bound(s(10), s(2));
        assert_eq!(bound.as_millis(), 32_408);
    }
}
