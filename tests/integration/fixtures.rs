//! The objects the planner and Deployment scenarios and the handoff simulation build alike: a
//! pool, labels, the owner reference and Ready condition of a workload's pod, and what one
//! reconcile observes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerState, ContainerStateRunning, ContainerStatus, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use swarm_operator::api::crd::{SwarmPool, SwarmPoolSpec};
use swarm_operator::planner::Observed;
use swarm_operator::state::config_map::pool_config;
use swarm_operator::state::lease::Acks;
use swarm_operator::state::slice_summary::SliceSummary;
use swarm_protocol::config::WorkerConfig;

/// The config a pool's ConfigMap `main` and its workers' ConfigMaps `slices` assemble.
pub fn written_config(main: &ConfigMap, slices: &[ConfigMap]) -> WorkerConfig {
    let slices: Vec<SliceSummary> = slices.iter().map(SliceSummary::from).collect();
    pool_config(main, &slices).expect("a config")
}

/// The uid of every pool the tests make.
pub const POOL_UID: &str = "pool-uid";

/// Labels of these `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The spec of a pool selecting the pods labelled `selector`, with `jobs` written to the
/// ConfigMap `config_map`, every other setting its default.
pub fn pool_spec(
    selector: BTreeMap<String, String>,
    jobs: Vec<String>,
    config_map: &str,
) -> SwarmPoolSpec {
    SwarmPoolSpec {
        selector: LabelSelector {
            match_labels: Some(selector),
            ..LabelSelector::default()
        },
        workload_kind: Default::default(),
        jobs,
        jobs_from: Vec::new(),
        config_map: Some(config_map.into()),
        strategy: Default::default(),
        qos: None,
        rollout: Default::default(),
        paused: false,
    }
}

/// The pool `name` in `namespace` with `spec`, as the API server serves it at generation 1.
pub fn pool(namespace: &str, name: &str, spec: SwarmPoolSpec) -> SwarmPool {
    let mut pool = SwarmPool::new(name, spec);
    pool.metadata.namespace = Some(namespace.into());
    pool.metadata.uid = Some(POOL_UID.into());
    pool.metadata.generation = Some(1);
    pool
}

/// The controller owner reference to the `apps/v1` object `kind` `name` of uid `uid`.
pub fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod's status with its `Ready` condition, last changed at `since`, and its one container
/// running since then.
pub fn ready_status(ready: bool, since: Timestamp) -> PodStatus {
    PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(since)),
            ..PodCondition::default()
        }]),
        container_statuses: Some(vec![ContainerStatus {
            name: "worker".into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(since)),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    }
}

/// What one reconcile of `pool` observes at `now` from its caches, before it adds the objects
/// it has: no workload, pod, ConfigMap or other pool, nothing listed live.
pub fn observed<'a>(
    pool: &'a SwarmPool,
    acks: &'a Acks,
    deleting: &'a BTreeSet<String>,
    now: Timestamp,
) -> Observed<'a> {
    Observed {
        pool,
        jobs_unresolved: None,
        statefulsets: Vec::new(),
        deployments: Vec::new(),
        replica_sets: Vec::new(),
        pods: Vec::new(),
        other_pools: Vec::new(),
        pods_are_live: false,
        config_map: None,
        worker_config_maps: Vec::new(),
        slices_are_live: false,
        deleting,
        acks,
        revokes: &NO_REVOKES,
        node_leases: &NO_NODE_LEASES,
        now,
    }
}

/// No worker's ConfigMap known to show anything yet: no revoke wait runs.
static NO_REVOKES: std::sync::LazyLock<swarm_operator::state::revokes::RevokeWaits> =
    std::sync::LazyLock::new(Default::default);
/// No node Lease: no node is silent.
static NO_NODE_LEASES: std::sync::LazyLock<swarm_operator::state::node_leases::NodeLeases> =
    std::sync::LazyLock::new(Default::default);
