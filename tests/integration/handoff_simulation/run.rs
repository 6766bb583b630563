//! One run of a schedule: the model cluster and the operator step by step, the invariants
//! after every step, then settling (and, under faults, a failover probe) with the liveness
//! bounds.

use std::collections::BTreeSet;
use std::time::Duration;

use swarm_assign::Qos;
use swarm_operator::api::crd::{Handoff, RolloutPolicy, SwarmPool, WorkloadKind};
use swarm_operator::planner::membership::START_WINDOW;

use super::cluster::{self, Cluster, Kind, Link};
use super::operator::{Operator, OperatorBugs, Record};
use super::process::{self, WorkerBugs};
use super::schedule::{Probe, QosEdit, Schedule, Step};
use super::schedule::{bump_generation, edit_qos, job, pool, prune_qos};

/// Steps of fair scheduling (relist, reconcile, time) the pool gets to settle after the last
/// change without `Acknowledge`; each step lets at least one paced refresh happen and one
/// grace period run down. Over 2000 schedules per mode pools settle within 18 steps; the bound
/// leaves room for rarer schedules.
const SETTLE_STEPS: usize = 80;
/// Under `Acknowledge`, seconds the pool gets to settle once every fault has ended, the
/// operator reconciling and every watch delivering each second: a revoke wait (33.2 s), the
/// readiness of a worker that had been cut off (one read and a probe, 5 s), an
/// acknowledgement timeout (20 s) and the restarts it causes all fit, with room for rarer
/// schedules.
const SETTLE_SECONDS: usize = 150;
/// `spec.rollout.ackTimeoutSeconds` of the simulated pools: short, so that workers that
/// acknowledge late (their watch delivers late, their reads are slow) exercise the fallback
/// deletes.
const ACK_TIMEOUT_SECONDS: i64 = 20;
/// Under faults, long enough that out-of-reach workers are taken out of the pool and their jobs
/// move through the revoke wait, not through deletes.
const FAULT_ACK_TIMEOUT_SECONDS: i64 = 180;
/// Jobs move off an out-of-reach worker within the bound of docs/worker-protocol.md's failover
/// table for its fault (with F = 30 s, the probe every 5 s, grace 2 s), plus the one second
/// between the simulated operator's reconciles: a frozen process within 44 s, one cut off from
/// the API server within 60 s, a node cut off within 55 s.
fn failover_bound(probe: Probe) -> Duration {
    let table = match probe {
        Probe::Pause => 44,
        Probe::Cut(_) => 60,
        Probe::Node => 55,
    };
    Duration::from_secs(table + 1)
}

/// The operator's start window: a NotReady pod whose container started less than this long ago
/// is starting, not failed (docs/worker-protocol.md, the safety rule).
const START_WINDOW_SECONDS: u64 = START_WINDOW.as_secs() as u64;

/// A pool under `rollout.policy: Acknowledge`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Acknowledging {
    /// Faults: pauses, cut off workers and nodes, etcd out of reach, operator failovers, slow
    /// requests; and the failover probe after the schedule.
    pub faults: bool,
    pub workers: WorkerBugs,
    pub operator: OperatorBugs,
}

/// What one run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Steps (seconds under `Acknowledge`) the pool took to settle, at worst of its settlings.
    pub settle: usize,
    pub restarts: usize,
    pub unavailable: usize,
    pub unsettled: usize,
    /// The failover probe: its fault, and how long its victim's jobs took to run elsewhere.
    pub failover: Option<(Probe, Duration)>,
}

/// One run: the schedule's pool and steps.
pub struct Run {
    cluster: Cluster,
    operator: Operator,
    record: Record,
    exclusive: bool,
    stats: Stats,
}

/// Runs one schedule, checking the invariants after every step: with `exclusive`, that no job
/// runs on two live pods.
pub fn run(
    schedule: &Schedule,
    kind: Kind,
    qos: Option<Qos>,
    edits: &[(usize, QosEdit)],
    mode: Handoff,
    exclusive: bool,
    acknowledging: Option<Acknowledging>,
) -> Result<Stats, String> {
    let mut run = Run::new(schedule, kind, qos, mode, exclusive, acknowledging);
    for (i, step) in schedule.steps.iter().enumerate() {
        for (_, edit) in edits.iter().filter(|(at, _)| *at == i) {
            edit_qos(edit, &mut run.operator.pool);
        }
        run.apply(step);
        prune_qos(&mut run.operator.pool);
        run.check()
            .map_err(|e| format!("after step {i} ({step:?}): {e}"))?;
    }
    run.cluster.heal();
    run.check().map_err(|e| format!("healing: {e}"))?;
    run.settle()?;
    if acknowledging.is_some_and(|a| a.faults) {
        run.probe_failover(schedule.probe)?;
    }
    run.stats.restarts = run.record.deletes.values().sum();
    run.stats.unavailable = run.record.unavailable;
    run.stats.unsettled = run.record.unsettled;
    Ok(run.stats)
}

impl Run {
    fn new(
        schedule: &Schedule,
        kind: Kind,
        qos: Option<Qos>,
        mode: Handoff,
        exclusive: bool,
        acknowledging: Option<Acknowledging>,
    ) -> Run {
        let mut cluster = Cluster::of(kind, schedule.replicas);
        cluster.rng = schedule.seed;
        cluster.exclusive = exclusive;
        let mut pool = pool(schedule.jobs, mode, schedule.max_unavailable);
        if kind == Kind::Deployment {
            pool.spec.workload_kind = WorkloadKind::Deployment;
        }
        pool.spec.qos = qos;
        prune_qos(&mut pool);
        let a = acknowledging.unwrap_or_default();
        if acknowledging.is_some() {
            pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
            pool.spec.rollout.ack_timeout_seconds = if a.faults {
                FAULT_ACK_TIMEOUT_SECONDS
            } else {
                ACK_TIMEOUT_SECONDS
            };
            cluster.acknowledge = true;
            cluster.slow = a.faults;
            cluster.bugs = a.workers;
        }
        let mut operator = Operator::start(pool, &cluster, process::rate(schedule.seed >> 7));
        operator.bugs = a.operator;
        Run {
            cluster,
            operator,
            record: Record::default(),
            exclusive,
            stats: Stats::default(),
        }
    }

    /// A run of `schedule`'s pool under `Acknowledge` and `Exclusive`, for a scenario that
    /// drives it step by step.
    pub fn start(schedule: &Schedule, kind: Kind, acknowledging: Acknowledging) -> Run {
        let mode = Handoff::Exclusive;
        Run::new(schedule, kind, None, mode, true, Some(acknowledging))
    }

    /// Applies `steps`, checking the invariants after each.
    pub fn steps(&mut self, steps: &[Step]) -> Result<(), String> {
        for step in steps {
            self.apply(step);
            self.check().map_err(|e| format!("after {step:?}: {e}"))?;
        }
        Ok(())
    }

    /// The config version written last.
    pub fn version(&self) -> u64 {
        self.cluster.config().map_or(0, |c| c.version)
    }

    /// The jobs of `pod`'s entry, sorted.
    pub fn entry(&self, pod: &str) -> Vec<String> {
        let mut jobs = self.cluster.entry(pod).jobs;
        jobs.sort();
        jobs
    }

    /// The jobs that do work on `pod` now, sorted.
    pub fn running(&self, pod: &str) -> Vec<String> {
        let pod = self.cluster.pods.iter().find(|p| p.name() == pod);
        let mut jobs: Vec<String> = pod
            .map(|p| {
                p.running(self.cluster.millis)
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        jobs.sort();
        jobs
    }

    fn apply(&mut self, step: &Step) {
        let (cluster, operator) = (&mut self.cluster, &mut self.operator);
        let jobs = &mut operator.pool.spec.jobs;
        match *step {
            Step::Tick => cluster.tick(),
            Step::Reconcile(crash_after) => {
                operator.reconcile(cluster, &mut self.record, crash_after);
            }
            Step::Deliver(mask) => operator.deliver(cluster, mask),
            Step::Relist => operator.relist(cluster),
            Step::Scale(replicas) => cluster.replicas = replicas,
            Step::AddJob(index) if !jobs.contains(&job(index)) => {
                jobs.push(job(index));
                bump_generation(&mut operator.pool);
            }
            Step::RemoveJob(index) if jobs.contains(&job(index)) => {
                jobs.retain(|j| *j != job(index));
                bump_generation(&mut operator.pool);
            }
            Step::AddJob(_) | Step::RemoveJob(_) => {}
            Step::DeletePod(index) => {
                if let Some(uid) = cluster.pod_at(index).map(|p| p.uid.clone()) {
                    cluster.delete(&uid);
                }
            }
            Step::LosePod(index) => cluster.lose(index),
            Step::RestartContainer(index) => cluster.restart_container(index),
            Step::RolloutRestart => cluster.rollout_restart(),
            Step::RefreshMounts(mask) => cluster.refresh_mounts(mask),
            Step::Sync(mask) => cluster.sync(mask),
            Step::Elapse(ms) => cluster.advance(ms),
            Step::Pause(index) => cluster.pause(index),
            Step::Resume(index) => cluster.resume(index),
            Step::Cut(index, link) => cluster.cut(index, link),
            Step::Reconnect(index) => cluster.cut(index, Link::Up),
            Step::CutNode(node, pods) => cluster.cut_node(node, true, pods),
            Step::HealNode(node) => cluster.cut_node(node, false, false),
            Step::EtcdDown => cluster.etcd(true),
            Step::EtcdUp => cluster.etcd(false),
            Step::StallLeaseWatch => operator.leases_stalled = true,
            Step::Failover => {
                let rate = process::rate(operator.processes * 13 + cluster.millis);
                operator.crash(cluster, rate);
            }
        }
    }

    /// The invariants that hold after every step.
    fn check(&self) -> Result<(), String> {
        if self.exclusive {
            if let Some(duplicate) = &self.cluster.duplicate {
                let ms = self.cluster.duplicate_millis;
                return Err(format!("{duplicate} (duplicated for {ms} ms so far)"));
            }
            if let Some((job, pods)) = self
                .cluster
                .holders()
                .into_iter()
                .find(|(_, p)| p.len() > 1)
            {
                let who: Vec<String> = pods
                    .iter()
                    .map(|p| format!("{} ({})", p.name(), p.uid))
                    .collect();
                return Err(format!(
                    "job {job} runs on {} live pods: {}",
                    pods.len(),
                    who.join(", ")
                ));
            }
        }
        let deletes = &self.record.deletes;
        if let Some((uid, n)) = deletes.iter().find(|(_, n)| **n > 1) {
            return Err(format!("pod instance {uid} deleted {n} times"));
        }
        if let Some(pair) = self.record.versions.windows(2).find(|w| w[1] < w[0]) {
            return Err(format!(
                "config version went down: {} -> {}",
                pair[0], pair[1]
            ));
        }
        Ok(())
    }

    /// What the pool reports once settled: Degraded without replicas, or while dedicated
    /// jobs wait for workers; Balanced otherwise.
    fn at_rest(&self) -> &'static str {
        let pool = &self.operator.pool;
        let unmet =
            pool.spec.qos.as_ref().is_some_and(|qos| {
                qos.dedicated.len() > dedicated_room(pool, self.cluster.replicas)
            });
        if self.cluster.replicas == 0 || unmet {
            "Degraded"
        } else {
            "Balanced"
        }
    }

    /// Fair scheduling until the pool settles, within [`SETTLE_STEPS`] (under `Acknowledge`,
    /// [`SETTLE_SECONDS`]), every fault over and every request fast.
    fn settle(&mut self) -> Result<(), String> {
        self.cluster.slow = false;
        let limit = if self.cluster.acknowledge {
            SETTLE_SECONDS
        } else {
            SETTLE_STEPS
        };
        for settle in 0..limit {
            self.operator.relist(&self.cluster);
            let phase = self
                .operator
                .reconcile(&mut self.cluster, &mut self.record, None);
            let failed = |e| format!("settling, step {settle}: {e}");
            self.check().map_err(failed)?;
            self.trace(settle, phase.as_deref());
            if phase.as_deref() == Some(self.at_rest())
                && settled(&self.cluster, &self.operator).is_ok()
            {
                self.stats.settle = self.stats.settle.max(settle);
                return Ok(());
            }
            self.cluster.tick();
            self.cluster.refresh_all_mounts();
            self.cluster.sync_all();
            self.check().map_err(failed)?;
        }
        let status = self.operator.pool.status.as_ref();
        Err(format!(
            "not settled {limit} steps after the last change: {}; status: {:?}",
            settled(&self.cluster, &self.operator)
                .err()
                .unwrap_or_else(|| "status not at rest".into()),
            status.map(|s| (
                &s.phase,
                &s.stale_workers,
                &s.unavailable_workers,
                &s.conditions
            )),
        ))
    }

    /// One second of fair scheduling (the operator reconciles on a fresh cache, every watch
    /// delivers), checking the invariants.
    fn fair_second(&mut self) -> Result<(), String> {
        self.operator.relist(&self.cluster);
        self.operator
            .reconcile(&mut self.cluster, &mut self.record, None);
        self.check()?;
        self.cluster.tick();
        self.cluster.sync_all();
        self.check()
    }

    /// The failover probe on a settled pool: one worker is put out of reach by `probe`, and
    /// its jobs must run elsewhere within the bound of the doc's table, whenever another
    /// member can take them; then the fault ends and the pool settles again.
    fn probe_failover(&mut self, (probe, index): (Probe, usize)) -> Result<(), String> {
        // The table's bounds are for workers whose container is older than the start window
        // (a NotReady pod that started less than 15 s ago counts as starting).
        for _ in 0..START_WINDOW_SECONDS + 1 {
            let millis = self.cluster.millis;
            let young = |p: &cluster::PodInstance| {
                p.started
                    .is_none_or(|s| s + START_WINDOW_SECONDS * 1000 > millis)
            };
            if !self.cluster.pods.iter().any(young) {
                break;
            }
            self.fair_second()
                .map_err(|e| format!("before the probe: {e}"))?;
        }
        let Some((victim, held, probe)) = self.victim(probe, index) else {
            return Ok(());
        };
        match probe {
            Probe::Pause => self.cluster.pause(index),
            Probe::Cut(link) => self.cluster.cut(index, link),
            Probe::Node => {
                let node = self.cluster.pods.iter().find(|p| p.uid == victim).unwrap();
                let n = node.node.trim_start_matches("node-").parse().unwrap();
                self.cluster.cut_node(n, true, true);
            }
        }
        let (start, bound) = (self.cluster.millis, failover_bound(probe));
        loop {
            let elsewhere = self.cluster.holders();
            let moved = held.iter().all(|job| {
                elsewhere
                    .get(job.as_str())
                    .is_some_and(|pods| pods.iter().any(|p| p.uid != victim))
            });
            let took = Duration::from_millis(self.cluster.millis - start);
            if moved {
                self.stats.failover = Some((probe, took));
                break;
            }
            if took > bound {
                return Err(format!(
                    "the jobs {held:?} of {victim}, out of reach ({probe:?}), ran nowhere else within {bound:?}"
                ));
            }
            self.fair_second()
                .map_err(|e| format!("failover probe ({probe:?}): {e}"))?;
        }
        self.cluster.heal();
        self.settle()
            .map_err(|e| format!("after the failover probe: {e}"))
    }

    /// The probe's victim (pod `index`, if another member can take its jobs), the jobs it
    /// runs, and the fault (a node cut only when another pod runs on another node).
    fn victim(&self, probe: Probe, index: usize) -> Option<(String, BTreeSet<String>, Probe)> {
        let pod = self.cluster.pod_at(index)?;
        let others = self.cluster.pods.iter().filter(|p| p.uid != pod.uid);
        let elsewhere = others.clone().any(|p| p.node != pod.node);
        if others.count() == 0 {
            return None;
        }
        let probe = match probe {
            Probe::Node if !elsewhere => Probe::Cut(Link::Fail),
            probe => probe,
        };
        let held: BTreeSet<String> = pod
            .running(self.cluster.millis)
            .into_iter()
            .map(str::to_owned)
            .collect();
        (!held.is_empty()).then(|| (pod.uid.clone(), held, probe))
    }

    /// With `SWARM_SIM_TRACE`, what each settling step found.
    fn trace(&self, settle: usize, phase: Option<&str>) {
        if std::env::var_os("SWARM_SIM_TRACE").is_none() {
            return;
        }
        let c = &self.cluster;
        eprintln!(
            "settle {settle} at {} ms: {phase:?} leases {:?}",
            c.millis, c.leases
        );
        for p in &c.pods {
            let process = p.process.as_ref();
            eprintln!(
                "  {} {} on {} ready {} runs {:?} fence until {:?} link {:?} gone {:?}",
                p.name(),
                p.uid,
                p.node,
                p.ready,
                p.running(c.millis),
                process.map(|p| p.fence.until().map(|u| process::real_at(p.rate, u))),
                p.link,
                p.gone_at
            );
        }
    }
}

/// Whether the pool has settled: the ConfigMap gives every job to exactly one of the N workers
/// with nothing in transit, and exactly the N workers run, each exactly its entry; every
/// dedicated job that has room runs alone.
fn settled(cluster: &Cluster, operator: &Operator) -> Result<(), String> {
    let config = cluster.config().ok_or("no config")?;
    if let Some(qos) = &operator.pool.spec.qos {
        let room = dedicated_room(&operator.pool, cluster.replicas);
        for dedicated in qos.dedicated.iter().take(room) {
            let alone = config
                .workloads()
                .any(|(_, w)| w.jobs.as_slice() == std::slice::from_ref(dedicated));
            if !alone {
                return Err(format!("dedicated job {dedicated} does not run alone"));
            }
        }
    }
    if config.transit().count() > 0 {
        return Err("jobs still in transit".into());
    }
    let workers: Vec<String> = match cluster.kind {
        Kind::StatefulSet => (0..cluster.replicas)
            .map(|i| format!("{}-{i}", cluster::STS))
            .collect(),
        // Every live pod of the Deployment, in the config's (name) order.
        Kind::Deployment => {
            let mut live: Vec<String> = cluster.pods.iter().map(|p| p.name()).collect();
            live.sort();
            live
        }
    };
    let mut pods: Vec<&str> = config.workloads().map(|(pod, _)| pod).collect();
    pods.sort_unstable();
    if pods != workers {
        return Err(format!("config names {pods:?}, want {workers:?}"));
    }
    if cluster.kind == Kind::Deployment && cluster.replicas > 0 {
        let loads: Vec<usize> = config.workloads().map(|(_, w)| w.jobs.len()).collect();
        let (min, max) = (loads.iter().min(), loads.iter().max());
        if operator.pool.spec.qos.is_none() && max.zip(min).is_some_and(|(max, min)| max - min > 1)
        {
            return Err(format!("unbalanced over the slots: {loads:?}"));
        }
    }
    let mut held: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    held.sort();
    let mut spec: Vec<&String> = operator.pool.spec.jobs.iter().collect();
    spec.sort();
    if cluster.replicas == 0 {
        spec.clear();
    }
    if held != spec {
        return Err(format!("config holds {held:?}, spec has {spec:?}"));
    }
    every_worker_runs_its_entry(cluster, &config)
}

/// Exactly the N workers run, each exactly its entry.
fn every_worker_runs_its_entry(
    cluster: &Cluster,
    config: &swarm_protocol::config::WorkerConfig,
) -> Result<(), String> {
    if cluster.pods.len() != cluster.replicas {
        return Err(format!(
            "{} pods for {} replicas",
            cluster.pods.len(),
            cluster.replicas
        ));
    }
    for pod in &cluster.pods {
        let want: BTreeSet<&str> = config
            .workload(&pod.name())
            .map(|w| w.jobs.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let runs: BTreeSet<&str> = pod.running(cluster.millis).into_iter().collect();
        if pod.gone_at.is_some() || pod.runs.is_none() || runs != want {
            return Err(format!(
                "{} runs {runs:?}, its entry says {want:?}",
                pod.name()
            ));
        }
    }
    Ok(())
}

/// How many dedicated jobs get a worker of their own: one worker stays shared while some job,
/// dedicated or not, has to be shared.
pub fn dedicated_room(pool: &SwarmPool, replicas: usize) -> usize {
    let dedicated = pool.spec.qos.as_ref().map_or(0, |qos| qos.dedicated.len());
    let shared = pool.spec.jobs.len() - dedicated;
    if shared == 0 && dedicated <= replicas {
        dedicated
    } else {
        replicas.saturating_sub(1)
    }
}
