//! `kubectl swarm plan POOL --replicas N`: what the operator would do if the workers were
//! scaled to N, from the live pool and ConfigMap, with the planner's own assignment.
//!
//! The assignment is the one the pool settles on (the operator's [`swarm_assign::assign_with_qos`]
//! from the current config); under the `Exclusive` handoff it is reached in two writes, the
//! revoke and the grant. A Deployment's ReplicaSet picks the pods a scale-down removes; the plan
//! removes the highest slots, which moves as many jobs as removing any others.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use swarm_assign::{Assignment, Qos, pod_name};

use super::output::Table;
use super::{PluginError, PoolView};
use crate::crd::{Handoff, RolloutPolicy, WorkloadKind};
use crate::planner::slot_table;

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

/// Plans scaling the pool's workload to `replicas`.
pub fn plan(view: &PoolView, replicas: usize) -> Result<ScalePlan, PluginError> {
    let config = view.config()?;
    let pool = &view.pool;
    let spec = &pool.spec;
    let status = pool.status.clone().unwrap_or_default();
    let workload = status
        .workload
        .clone()
        .or(status.stateful_set.clone())
        .ok_or_else(|| PluginError::NoWorkload {
            namespace: view.namespace(),
            pool: view.name(),
            why: match &status.phase {
                Some(phase) => format!("phase {phase}"),
                None => "not reconciled yet".to_owned(),
            },
        })?;
    let neutral = Qos::default();
    let qos = spec.qos.as_ref().unwrap_or(&neutral);

    // Worker positions now: their pod names and the jobs each holds (or has in transit).
    let (names, current): (Vec<Option<String>>, Option<Assignment>) = match spec.workload_kind {
        WorkloadKind::StatefulSet => {
            let now = usize::try_from(status.workers).unwrap_or(0);
            let names = (0..now).map(|i| Some(pod_name(&workload, i))).collect();
            (
                names,
                swarm_assign::current_assignment(&config, &workload, qos),
            )
        }
        WorkloadKind::Deployment => {
            let table = slot_table(view.config_map.as_ref());
            let live: Vec<&str> = table
                .slots()
                .iter()
                .filter_map(|slot| slot.pod())
                .filter(|pod| {
                    view.pod(pod)
                        .is_some_and(|p| p.metadata.deletion_timestamp.is_none() && !p.finished)
                })
                .collect();
            let rebound = table.rebind(table.len(), &live);
            let names = rebound
                .table
                .slots()
                .iter()
                .map(|slot| slot.pod().map(str::to_owned))
                .collect();
            (names, Some(rebound.current(&config)))
        }
    };
    let now_jobs = |i: usize| -> Option<&[String]> {
        (i < names.len()).then(|| {
            current
                .as_ref()
                .and_then(|a| a.workers().get(i))
                .map_or(&[][..], Vec::as_slice)
        })
    };
    let target =
        swarm_assign::assign_with_qos(spec.strategy, &spec.jobs, replicas, current.as_ref(), qos)
            .assignment;

    let position_now: HashMap<&str, usize> = (0..names.len())
        .flat_map(|i| {
            now_jobs(i)
                .unwrap_or_default()
                .iter()
                .map(move |j| (j.as_str(), i))
        })
        .collect();
    let position_after: HashMap<&str, usize> = target
        .workers()
        .iter()
        .enumerate()
        .flat_map(|(i, jobs)| jobs.iter().map(move |j| (j.as_str(), i)))
        .collect();
    // Where each held job that moves goes (`None`: nowhere, at 0 replicas).
    let moves: Vec<Option<usize>> = spec
        .jobs
        .iter()
        .filter_map(|job| {
            let after = position_after.get(job.as_str()).copied();
            position_now
                .get(job.as_str())
                .is_some_and(|&now| after != Some(now))
                .then_some(after)
        })
        .collect();
    let jobs_moved = moves.len();
    let receivers = moves.iter().flatten().collect::<BTreeSet<_>>().len();

    let new_pods_restart = spec.workload_kind == WorkloadKind::StatefulSet
        && spec.rollout.handoff == Handoff::Exclusive
        && jobs_moved > 0;
    let mut workers = Vec::new();
    let mut restarted = Vec::new();
    let mut changed = false;
    for i in 0..names.len().max(replicas) {
        let before = now_jobs(i);
        let after = target.workers().get(i).map(Vec::as_slice);
        let touched = before.map(sorted) != after.map(sorted);
        changed |=
            touched && !(before.is_none_or(<[_]>::is_empty) && after.is_none_or(<[_]>::is_empty));
        let pod = names.get(i).cloned().flatten().or_else(|| {
            (spec.workload_kind == WorkloadKind::StatefulSet).then(|| pod_name(&workload, i))
        });
        let exists = pod.as_deref().is_some_and(|p| view.ready(p).is_some());
        let restart = spec.rollout.policy == RolloutPolicy::DeletePods
            && touched
            && match (before, after) {
                (_, None) => false,
                // A Deployment's pod waits for its first jobs; a StatefulSet's restarts.
                (Some(jobs), Some(_)) => {
                    exists && (spec.workload_kind == WorkloadKind::StatefulSet || !jobs.is_empty())
                }
                // A new StatefulSet pod starts at once, on no jobs, and restarts at the grant.
                (None, Some(jobs)) => new_pods_restart && !jobs.is_empty(),
            };
        if restart {
            restarted.extend(pod.clone());
        }
        workers.push(PlannedWorker {
            pod,
            jobs_now: before.map(<[_]>::len),
            jobs_after: after.map(<[_]>::len),
            restart,
        });
    }
    let config_writes = match (changed, spec.rollout.handoff) {
        (false, _) => 0,
        (true, Handoff::Exclusive) if jobs_moved > 0 => 1 + receivers,
        (true, _) => 1,
    };
    Ok(ScalePlan {
        namespace: view.namespace(),
        pool: view.name(),
        workload_kind: spec.workload_kind.as_str().to_owned(),
        workload,
        from_replicas: names.len(),
        to_replicas: replicas,
        jobs: spec.jobs.len(),
        jobs_moved,
        workers_restarted: restarted,
        config_writes,
        unassigned_jobs: if replicas == 0 { spec.jobs.len() } else { 0 },
        workers,
    })
}

fn sorted(jobs: &[String]) -> Vec<&str> {
    let mut jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
    jobs.sort_unstable();
    jobs
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
