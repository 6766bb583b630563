//! Scenario tests of the pure planner: a small in-memory world (pool, StatefulSet, pods,
//! ConfigMap) is reconciled the way the controller does it (plan, apply the ConfigMap, list
//! pods live when asked, plan again, delete), and a StatefulSet stand-in replaces deleted pods.
//!
//! One module per topic; the world they share is `world`. The property test stays in this file,
//! where proptest keeps its regressions (`tests/proptest-regressions/planner_scenarios.txt`).

mod acknowledge;
mod config_map;
mod failover;
mod failures;
mod jobs;
mod qos;
mod rollout;
mod scaling;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use swarm_assign::Strategy;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;
use swarm_operator::api::crd::{Handoff, Phase};
use swarm_operator::plugin::{PoolView, scale_plan};
use swarm_operator::state::pod_summary::PodSummary;

use world::World;

/// Reconciles and lets pods settle until a reconcile writes and deletes nothing and the pool
/// is not rolling out.
fn run_until_quiet(world: &mut World) {
    for _ in 0..60 {
        let (writes, deletes) = (world.writes, world.deleted.len());
        let outcome = world.reconcile();
        let quiet = world.writes == writes && world.deleted.len() == deletes;
        if quiet && outcome.status.phase != Some(Phase::RollingOut) {
            return;
        }
        world.settle_pods();
    }
    panic!("the pool did not settle: {:?}", world.pool.status);
}

/// What `kubectl swarm plan` reads of a world.
fn plugin_view(world: &World) -> PoolView {
    PoolView {
        pool: world.pool.clone(),
        config_map: world.config_map.clone(),
        worker_config_maps: world.slices.clone(),
        pods: world.pods.iter().map(PodSummary::from).collect(),
        leases: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `kubectl swarm plan` runs the operator's planner on a what-if copy of the pool; this
    /// world runs it through its own StatefulSet stand-in. The writes, restarts and shares the
    /// plan predicts are what the operator then does.
    #[test]
    fn kubectl_swarm_plan_predicts_the_writes_and_restarts_of_a_scale(
        jobs in 1usize..40,
        from in 1usize..6,
        to in 0usize..8,
        overlap in any::<bool>(),
        max_unavailable in 1i32..3,
        strategy in prop_oneof![Just(Strategy::Sticky), Just(Strategy::Consistent), Just(Strategy::Contiguous)],
    ) {
        let mut world = World::new((0..jobs).map(|i| format!("job-{i:02}")).collect(), from);
        world.pool.spec.strategy = strategy;
        world.pool.spec.rollout.max_unavailable = IntOrString::Int(max_unavailable);
        if overlap {
            world.pool.spec.rollout.handoff = Handoff::Overlap;
        }
        run_until_quiet(&mut world);
        let plan = scale_plan::predict(&plugin_view(&world), to).expect("a plan");

        let version = world.config().version;
        world.deleted.clear();
        world.scale(to as i32);
        run_until_quiet(&mut world);

        prop_assert_eq!(plan.config_writes as u64, world.config().version - version);
        let restarted: BTreeSet<&str> = world.deleted.iter().map(|(pod, _)| pod.as_str()).collect();
        let predicted: BTreeSet<&str> = plan.workers_restarted.iter().map(String::as_str).collect();
        prop_assert_eq!(predicted, restarted);
        let shares: BTreeMap<String, usize> = world
            .config()
            .workloads()
            .map(|(pod, w)| (pod.to_owned(), w.jobs.len()))
            .filter(|(pod, _)| ordinal_of_name(pod) < to)
            .collect();
        let predicted: BTreeMap<String, usize> = plan
            .workers
            .iter()
            .filter_map(|w| Some((w.pod.clone()?, w.jobs_after?)))
            .collect();
        prop_assert_eq!(predicted, shares);
    }
}

fn ordinal_of_name(pod: &str) -> usize {
    pod.rsplit_once('-')
        .and_then(|(_, o)| o.parse().ok())
        .unwrap_or(usize::MAX)
}
