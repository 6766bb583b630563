//! The pool's ConfigMap as the operator finds it: unowned (adopted, or repaired from the
//! predecessor's layout), controlled by something else, written by an earlier process, or
//! unreadable.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::Phase;
use swarm_operator::planner;
use swarm_protocol::config::CONFIG_KEY;
use swarm_protocol::names::VERSION_ANNOTATION;

use super::world::{CM, NS, World, balanced, example_jobs, transit_jobs};
use crate::fixtures::POOL_UID;

#[test]
fn an_unowned_configmap_is_adopted_and_its_assignment_kept() {
    // A placeholder written by hand before install, holding a valid assignment at version 7.
    let reference = balanced(example_jobs(), 2);
    let text = reference
        .config()
        .render()
        .replace("version: 1", "version: 7");
    let mut world = World::new(example_jobs(), 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    });
    world.reconcile();
    let cm = world.config_map.as_ref().unwrap();
    assert_eq!(cm.owner_references()[0].uid, POOL_UID, "adopted");
    assert_eq!(world.config().version, 7, "same assignment, same version");
    assert!(world.pending().is_empty(), "no worker's job set changed");
    assert!(world.deleted.is_empty());
    assert!(!world.event_reasons().contains(&reason::REBALANCED));
}

#[test]
fn an_unowned_configmap_with_the_predecessors_broken_layout_is_repaired() {
    // The predecessor's layout of the 27 jobs: job 14 twice, job 27 nowhere.
    let jobs = example_jobs();
    let text = format!(
        "workloads:\n  swarm-worker-0:\n    jobs: {:?}\n  swarm-worker-1:\n    jobs: {:?}\n",
        &jobs[0..14],
        &jobs[13..26]
    );
    let mut world = World::new(jobs, 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    });
    world.reconcile();
    let config = world.config();
    assert!(config.version >= 1);
    let held: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    let unique: BTreeSet<&String> = held.iter().copied().collect();
    assert_eq!(held.len(), unique.len(), "no job is given to two workers");
    // The job both workers ran waits in transit until both have restarted.
    assert_eq!(
        transit_jobs(&config),
        BTreeSet::from([example_jobs()[13].clone()])
    );
    assert_eq!(held.len(), 26);

    world.run_to_balanced(10);
    let config = world.config();
    let mut all: Vec<&String> = config.workloads().flat_map(|(_, w)| &w.jobs).collect();
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!((count, all.len()), (27, 27), "each job exactly once");
}

#[test]
fn a_configmap_controlled_by_something_else_is_never_written() {
    let mut world = World::new(example_jobs(), 2);
    world.config_map = Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(CM.into()),
            namespace: Some(NS.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "other".into(),
                uid: "other-uid".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    let plan = world.reconcile();
    assert_eq!(world.writes, 0);
    assert!(world.deleted.is_empty());
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::CONFIG_MAP_CONFLICT);
    assert!(world.ready_condition().message.contains("Deployment other"));
    assert_eq!(world.events.len(), 1);
    assert!(world.events[0].warning);
    assert_eq!(plan.requeue_after, planner::REQUEUE_CONFLICT);

    // The failure persists: no second warning, no status write.
    world.reconcile();
    assert!(world.events.is_empty());
    assert!(!world.status_written);
}

#[test]
fn the_version_continues_from_the_configmap_after_a_restart() {
    let mut world = balanced(example_jobs(), 2);
    let mut config = world.config();
    config.version = 5;
    world
        .config_map
        .as_mut()
        .unwrap()
        .data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), config.render());
    world.pool.spec.jobs.push("stream:later".into());
    let plan = world.reconcile();
    assert_eq!(world.config().version, 6);
    assert_eq!(plan.status.version, Some(6));
}

#[test]
fn an_unreadable_config_continues_from_the_version_annotation() {
    let mut world = balanced(example_jobs(), 2);
    let cm = world.config_map.as_mut().unwrap();
    cm.data
        .as_mut()
        .unwrap()
        .insert(CONFIG_KEY.into(), "{{{ not yaml".into());
    cm.annotations_mut()
        .insert(VERSION_ANNOTATION.into(), "9".into());
    world.reconcile();
    assert_eq!(world.config().version, 10);
    assert!(world.event_reasons().contains(&reason::CONFIG_UNREADABLE));
}
