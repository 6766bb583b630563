//! `kubectl swarm plan POOL --replicas N`: what the operator would do if the workers were
//! scaled to N. The live pool, ConfigMap and pods are copied into a what-if cluster
//! ([`crate::drive::whatif`]), the workload is scaled there, and the operator's own planner
//! reconciles it through the round protocol until it settles: the config writes, restarts and
//! jobs moved printed are the ones it made. A Deployment's ReplicaSet picks the pods a
//! scale-down removes; the what-if removes the newest.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use swarm_assign::{Assignment, Qos, pod_name};
use swarm_protocol::config::WorkerConfig;

use super::output::Table;
use super::{PluginError, PoolView};
use crate::api::crd::WorkloadKind;
use crate::drive::whatif::WhatIf;
use crate::state::config_map::{self, slot_table};

/// What `plan` reports, as `-o json|yaml` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScalePlan {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// `StatefulSet` or `Deployment`.
    pub workload_kind: String,
    /// Name of the workload.
    pub workload: String,
    /// Workers now.
    pub from_replicas: usize,
    /// Workers after the scale.
    pub to_replicas: usize,
    /// Jobs in the spec.
    pub jobs: usize,
    /// Jobs that would run on another worker than now.
    pub jobs_moved: usize,
    /// Pods deleted so they restart on their new job set: existing pods whose job set changes,
    /// and, under the `Exclusive` handoff, a new StatefulSet pod that starts before its jobs are
    /// granted (a Deployment's new pod waits for its jobs instead).
    pub workers_restarted: Vec<String>,
    /// ConfigMap writes to get there, at most: 0 when nothing changes, 1 without moves or under
    /// `Overlap`. Under `Exclusive` moved jobs take a revoke, then a grant per receiving worker
    /// once the jobs coming to it are free; receivers whose jobs free at once share a grant.
    pub config_writes: usize,
    /// Jobs no worker would hold (scaling to 0).
    pub unassigned_jobs: usize,
    /// One row per worker position, now and after.
    pub workers: Vec<PlannedWorker>,
}

/// One worker position (ordinal or slot) before and after.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWorker {
    /// Pod name; `None` for a pod the scale would create.
    pub pod: Option<String>,
    /// Jobs now (`None`: the position does not exist yet).
    pub jobs_now: Option<usize>,
    /// Jobs after (`None`: the position is scaled away).
    pub jobs_after: Option<usize>,
    /// Whether its pod would be deleted to restart.
    pub restart: bool,
}

/// Plans scaling the pool's workload to `replicas`: the pool as it is now, scaled in a
/// what-if cluster and reconciled by the operator's own planner until it settles.
pub fn predict(view: &PoolView, replicas: usize) -> Result<ScalePlan, PluginError> {
    let config = view.config()?;
    let workload = workload_name(view)?;
    let now = Positions::now(view, &config, &workload);
    let mut whatif = WhatIf::new(
        view.pool.clone(),
        &workload,
        &now.running(view),
        view.config_map.clone(),
        view.worker_config_maps.clone(),
        Timestamp::now(),
    );
    whatif.scale(replicas);
    let transcript = whatif.settle().map_err(|e| PluginError::WhatIf {
        namespace: view.namespace(),
        pool: view.name(),
        detail: e.to_string(),
    })?;
    let after = Positions::settled(view, &workload, whatif.config_map(), whatif.config());
    let rows = rows(view, &now, &after, replicas, &transcript.restarted);
    let workers_restarted: Vec<String> = rows
        .iter()
        .filter(|row| row.restart)
        .filter_map(|row| row.pod.clone())
        .collect();
    let spec = &view.pool.spec;
    Ok(ScalePlan {
        namespace: view.namespace(),
        pool: view.name(),
        workload_kind: spec.workload_kind.as_str().to_owned(),
        workload,
        from_replicas: now.names.len(),
        to_replicas: replicas,
        jobs: spec.jobs.len(),
        jobs_moved: jobs_moved(&spec.jobs, &now.assignment, &after.assignment),
        workers_restarted,
        config_writes: versions_written(config.version, &transcript.writes),
        unassigned_jobs: if replicas == 0 { spec.jobs.len() } else { 0 },
        workers: rows,
    })
}

/// The name of the pool's workload, from its status.
fn workload_name(view: &PoolView) -> Result<String, PluginError> {
    let status = view.pool.status.clone().unwrap_or_default();
    status
        .workload
        .or(status.stateful_set)
        .ok_or_else(|| PluginError::NoWorkload {
            namespace: view.namespace(),
            pool: view.name(),
            why: match &status.phase {
                Some(phase) => format!("phase {phase}"),
                None => "not reconciled yet".to_owned(),
            },
        })
}

/// Worker positions (ordinals, or a Deployment's slots): the pod of each, and the jobs each
/// holds or has in transit.
struct Positions {
    names: Vec<Option<String>>,
    assignment: Assignment,
}

impl Positions {
    /// The positions now, from the status and the ConfigMap.
    fn now(view: &PoolView, config: &WorkerConfig, workload: &str) -> Positions {
        let workers = view.pool.status.as_ref().map_or(0, |s| s.workers);
        let now = usize::try_from(workers).unwrap_or(0);
        Positions::of(view, config, workload, view.config_map.as_ref(), Some(now))
    }

    /// The positions the what-if settled on.
    fn settled(
        view: &PoolView,
        workload: &str,
        cm: Option<&ConfigMap>,
        config: Option<WorkerConfig>,
    ) -> Positions {
        let config = config.unwrap_or_else(|| WorkerConfig::new(0, []));
        Positions::of(view, &config, workload, cm, None)
    }

    /// A StatefulSet's positions are its ordinals up to `ordinals` (or as many as `config`
    /// names); a Deployment's are the slots `cm` records.
    fn of(
        view: &PoolView,
        config: &WorkerConfig,
        workload: &str,
        cm: Option<&ConfigMap>,
        ordinals: Option<usize>,
    ) -> Positions {
        let spec = &view.pool.spec;
        let neutral = Qos::default();
        let qos = spec.qos.as_ref().unwrap_or(&neutral);
        match spec.workload_kind {
            WorkloadKind::StatefulSet => {
                let assignment = swarm_assign::current_assignment(config, workload, qos)
                    .unwrap_or_else(|| Assignment::new(Vec::new()));
                let count = ordinals.unwrap_or(assignment.workers().len());
                Positions {
                    names: (0..count).map(|i| Some(pod_name(workload, i))).collect(),
                    assignment,
                }
            }
            WorkloadKind::Deployment => {
                let table = slot_table(cm);
                let held: Vec<&str> = table.slots().iter().filter_map(|s| s.pod()).collect();
                let rebound = table.rebind(table.len(), &held);
                Positions {
                    names: rebound
                        .table
                        .slots()
                        .iter()
                        .map(|slot| slot.pod().map(str::to_owned))
                        .collect(),
                    assignment: rebound.current(config),
                }
            }
        }
    }

    /// The pods of these positions that run now (not terminating or finished), with their uids.
    fn running(&self, view: &PoolView) -> Vec<(String, String)> {
        self.names
            .iter()
            .flatten()
            .filter_map(|name| {
                let pod = view.pod(name)?;
                let live = pod.metadata.deletion_timestamp.is_none() && !pod.finished;
                live.then(|| (name.clone(), pod.metadata.uid.clone().unwrap_or_default()))
            })
            .collect()
    }

    fn jobs(&self, i: usize) -> &[String] {
        self.assignment
            .workers()
            .get(i)
            .map_or(&[][..], Vec::as_slice)
    }
}

/// One row per worker position, now and after.
fn rows(
    view: &PoolView,
    now: &Positions,
    after: &Positions,
    replicas: usize,
    restarted: &[String],
) -> Vec<PlannedWorker> {
    let statefulset = view.pool.spec.workload_kind == WorkloadKind::StatefulSet;
    (0..now.names.len().max(replicas))
        .map(|i| {
            let exists = i < now.names.len();
            // A Deployment's new pods are named by the ReplicaSet when it creates them.
            let pod = match now.names.get(i).cloned().flatten() {
                Some(pod) => Some(pod),
                None if statefulset => after.names.get(i).cloned().flatten(),
                None => None,
            };
            PlannedWorker {
                restart: pod.as_ref().is_some_and(|p| restarted.contains(p)),
                pod,
                jobs_now: exists.then(|| now.jobs(i).len()),
                jobs_after: (i < replicas).then(|| after.jobs(i).len()),
            }
        })
        .collect()
}

/// Jobs of the spec held now that end up on another position, or on none.
fn jobs_moved(jobs: &[String], now: &Assignment, after: &Assignment) -> usize {
    let positions = |assignment: &Assignment| -> HashMap<String, usize> {
        assignment
            .workers()
            .iter()
            .enumerate()
            .flat_map(|(i, jobs)| jobs.iter().map(move |j| (j.clone(), i)))
            .collect()
    };
    let (now, after) = (positions(now), positions(after));
    jobs.iter()
        .filter(|job| now.get(*job).is_some_and(|i| after.get(*job) != Some(i)))
        .count()
}

/// Config versions written after `from`: writes that change only the bookkeeping annotations
/// keep the version.
fn versions_written(from: u64, writes: &[ConfigMap]) -> usize {
    let mut last = from.to_string();
    let mut count = 0;
    for write in writes {
        if let Some(version) = config_map::recorded_version(write)
            && version != last
        {
            count += 1;
            last = version.to_owned();
        }
    }
    count
}

/// The plan as a person reads it: a summary, then the table of worker positions.
pub fn render(plan: &ScalePlan) -> String {
    let mut out = format!(
        "Scaling {} {} of SwarmPool {}/{} from {} to {} workers:\n",
        plan.workload_kind,
        plan.workload,
        plan.namespace,
        plan.pool,
        plan.from_replicas,
        plan.to_replicas
    );
    out.push_str(&format!(
        "  jobs moved:        {} of {}\n",
        plan.jobs_moved, plan.jobs
    ));
    out.push_str(&format!(
        "  workers restarted: {}{}\n",
        plan.workers_restarted.len(),
        if plan.workers_restarted.is_empty() {
            String::new()
        } else {
            format!(" ({})", plan.workers_restarted.join(", "))
        }
    ));
    // Beyond a revoke and one grant, grants may coincide: the count is a bound.
    let bound = if plan.config_writes > 2 { "up to " } else { "" };
    out.push_str(&format!(
        "  config writes:     {bound}{}\n",
        plan.config_writes
    ));
    if plan.unassigned_jobs > 0 {
        out.push_str(&format!(
            "  unassigned jobs:   {} (no workers)\n",
            plan.unassigned_jobs
        ));
    }
    out.push('\n');
    let mut table = Table::new(&["WORKER", "JOBS NOW", "JOBS AFTER", "RESTART"]);
    for worker in &plan.workers {
        let count = |n: Option<usize>, missing: &str| {
            n.map_or_else(|| missing.to_owned(), |n| n.to_string())
        };
        table.row(vec![
            worker.pod.clone().unwrap_or_else(|| "(new pod)".to_owned()),
            count(worker.jobs_now, "new"),
            count(worker.jobs_after, "removed"),
            if worker.restart { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out.push_str(&table.render());
    out
}
