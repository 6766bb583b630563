//! The config writes of one change, for `swarm-operator plan`: the pool, a StatefulSet whose
//! pods named in the current config run, and the ConfigMap holding that config are built in a
//! what-if cluster ([`crate::drive::whatif`]); the StatefulSet is scaled, and the operator's own
//! planner reconciles it until it settles. Every write that changes the config is one step.

use std::collections::BTreeSet;
use swarm_assign::{Qos, Strategy};

use anyhow::{Result, bail};
use k8s_openapi::jiff::Timestamp;
use swarm_protocol::config::WorkerConfig;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::crd::{Handoff, RolloutSpec, SwarmPool, SwarmPoolSpec, WorkloadKind};
use crate::drive::whatif::WhatIf;
use crate::state::config_map;

/// One config write of a change.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoffWrite {
    /// The config written.
    pub config: WorkerConfig,
    /// Jobs of the spec this write revokes (they were held, now in transit).
    pub revoked: usize,
    /// Pods jobs are revoked from, in ordinal order.
    pub revoked_from: Vec<String>,
    /// Jobs this write grants after a time in transit.
    pub granted: usize,
}

/// The config writes that take the pool (`spec`, over StatefulSet `statefulset`) from
/// `previous` to `replicas` workers. Without any change, the one step is the current config.
pub fn handoff_writes(
    spec: SwarmPoolSpec,
    statefulset: &str,
    replicas: usize,
    previous: Option<&WorkerConfig>,
) -> Result<Vec<HandoffWrite>> {
    let jobs: BTreeSet<String> = spec.jobs.iter().cloned().collect();
    let pool = what_if_pool(spec);
    let running: Vec<(String, String)> = previous
        .into_iter()
        .flat_map(WorkerConfig::workloads)
        .map(|(pod, _)| pod)
        .filter(|pod| ordinal_of(pod, statefulset).is_some())
        .map(|pod| (pod.to_owned(), format!("running-{pod}")))
        .collect();
    let config_map = previous.map(|config| config_map::written(&pool, config));
    let mut whatif = WhatIf::new(
        pool,
        statefulset,
        &running,
        config_map,
        Vec::new(),
        Timestamp::UNIX_EPOCH,
    );
    whatif.scale(replicas);
    let transcript = whatif.settle()?;
    // One config per version: the last of each run is the write complete.
    let mut written: Vec<WorkerConfig> = Vec::new();
    for config in transcript.configs {
        match written.last_mut() {
            Some(last) if last.version == config.version => *last = config,
            _ => written.push(config),
        }
    }
    let mut steps = Vec::new();
    let mut last = previous.cloned();
    for config in written {
        if last.as_ref().is_some_and(|l| l.version == config.version) {
            continue;
        }
        steps.push(step(last.as_ref(), config.clone(), &jobs, statefulset));
        last = Some(config);
    }
    match (steps.is_empty(), last) {
        (false, _) => Ok(steps),
        (true, Some(config)) => Ok(vec![step(None, config, &BTreeSet::new(), statefulset)]),
        (true, None) => bail!(
            "the operator would write no config: {}",
            transcript
                .status
                .conditions
                .first()
                .map_or("no reason given", |c| c.message.as_str())
        ),
    }
}

/// The spec of a pool with these jobs, strategy, QoS and handoff; the rest as defaulted.
pub fn pool_spec(
    jobs: Vec<String>,
    strategy: Strategy,
    qos: Qos,
    handoff: Handoff,
) -> SwarmPoolSpec {
    SwarmPoolSpec {
        selector: LabelSelector::default(),
        workload_kind: WorkloadKind::StatefulSet,
        jobs,
        jobs_from: Vec::new(),
        config_map: None,
        strategy,
        qos: Some(qos),
        rollout: RolloutSpec {
            handoff,
            ..RolloutSpec::default()
        },
        paused: false,
    }
}

/// The pool as the what-if holds it.
fn what_if_pool(spec: SwarmPoolSpec) -> SwarmPool {
    let mut pool = SwarmPool::new("plan", spec);
    pool.metadata.namespace = Some("default".to_owned());
    pool.metadata.uid = Some("what-if-pool".to_owned());
    pool.metadata.generation = Some(1);
    pool
}

/// What a write changed from `before`: jobs of `jobs` newly in transit are revoked (from the
/// pods that listed them), jobs that were in transit and are now listed are granted.
fn step(
    before: Option<&WorkerConfig>,
    config: WorkerConfig,
    jobs: &BTreeSet<String>,
    statefulset: &str,
) -> HandoffWrite {
    let in_transit = |c: Option<&WorkerConfig>| -> BTreeSet<String> {
        c.into_iter()
            .flat_map(WorkerConfig::transit)
            .flat_map(|(_, jobs)| jobs.iter().cloned())
            .collect()
    };
    let (was, now) = (in_transit(before), in_transit(Some(&config)));
    let revoked: BTreeSet<&String> = now.difference(&was).filter(|j| jobs.contains(*j)).collect();
    let mut revoked_from: Vec<String> = before
        .into_iter()
        .flat_map(WorkerConfig::workloads)
        .filter(|(_, w)| w.jobs.iter().any(|j| revoked.contains(j)))
        .map(|(pod, _)| pod.to_owned())
        .collect();
    revoked_from.sort_by_key(|pod| (ordinal_of(pod, statefulset), pod.clone()));
    let listed: BTreeSet<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    let granted = was
        .difference(&now)
        .filter(|j| jobs.contains(*j) && listed.contains(j))
        .count();
    HandoffWrite {
        revoked: revoked.len(),
        revoked_from,
        granted,
        config,
    }
}

/// The ordinal of `pod` when it is a pod of `statefulset`.
fn ordinal_of(pod: &str, statefulset: &str) -> Option<usize> {
    pod.strip_prefix(statefulset)?
        .strip_prefix('-')?
        .parse()
        .ok()
}
