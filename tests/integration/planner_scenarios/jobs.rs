//! Changes to the pool's jobs: added and removed in the spec, and read from ConfigMaps
//! (`spec.jobsFrom`) that change, go missing and come back.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{ConfigMapRef, JobsFromSource, Phase};

use super::world::{NS, World, balanced, example_jobs, loads, names};
use crate::fixtures::labels;

/// A job ConfigMap as a user creates it: `jobs` one per line, labelled to be watched.
fn job_source(name: &str, jobs: &[&str]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(labels(&[(
                swarm_protocol::names::JOBS_SOURCE_LABEL,
                "true",
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "jobs".to_owned(),
            format!("# generated\n{}\n", jobs.join("\n")),
        )])),
        ..ConfigMap::default()
    }
}

fn jobs_from(names: &[&str]) -> Vec<JobsFromSource> {
    names
        .iter()
        .map(|name| JobsFromSource {
            config_map_ref: ConfigMapRef {
                name: (*name).to_owned(),
            },
            key: "jobs".into(),
        })
        .collect()
}

/// A pool of 3 workers Balanced on two inline jobs and those of the ConfigMaps `first` and
/// `second`.
fn balanced_on_two_sources() -> World {
    let mut world = World::new(vec!["inline-a".into(), "inline-b".into()], 3);
    world.pool.spec.jobs_from = jobs_from(&["first", "second"]);
    world.job_sources = vec![
        job_source("first", &["first-a", "first-b", "first-c"]),
        job_source("second", &["second-a", "second-b"]),
    ];
    world.run_to_balanced(20);
    world
}

#[test]
fn jobs_from_config_maps_are_assigned_once_and_a_missing_source_keeps_the_config_until_it_returns()
{
    let mut world = balanced_on_two_sources();
    let all: BTreeSet<String> = world
        .config()
        .workloads()
        .flat_map(|(_, w)| w.jobs.clone())
        .collect();
    let expected: BTreeSet<String> = [
        "inline-a", "inline-b", "first-a", "first-b", "first-c", "second-a", "second-b",
    ]
    .map(String::from)
    .into();
    assert_eq!(all, expected);
    assert_eq!(
        loads(&world.config()).iter().sum::<usize>(),
        7,
        "each job once"
    );
    assert_eq!(world.pool.status.as_ref().unwrap().jobs, 7);

    // The second source is deleted: nothing is written or deleted, the config stays, the
    // status and one Warning say which ConfigMap and what to do.
    let kept = world.config_map.clone();
    let (writes, deleted) = (world.writes, world.deleted.len());
    world
        .job_sources
        .retain(|cm| cm.metadata.name.as_deref() != Some("second"));
    let outcome = world.reconcile();
    assert_eq!(world.config_map, kept, "the config is kept");
    assert_eq!((world.writes, world.deleted.len()), (writes, deleted));
    assert!(outcome.deletes.is_empty());
    assert_eq!(outcome.status.phase, Some(Phase::Failed));
    assert_eq!(outcome.status.jobs, 7, "the last known count stays");
    let ready = world.ready_condition();
    assert_eq!(ready.reason, reason::JOBS_SOURCE_NOT_FOUND);
    assert!(
        ready
            .message
            .starts_with("ConfigMap second (spec.jobsFrom[1]) does not exist in namespace swarm"),
        "{}",
        ready.message
    );
    assert_eq!(world.event_reasons(), [reason::JOBS_SOURCE_NOT_FOUND]);
    assert!(world.events[0].warning && world.events[0].note.contains("ConfigMap second"));
    world.reconcile();
    assert!(
        world.events.is_empty(),
        "warned once, not on every reconcile"
    );

    // Re-created: the pool is Balanced again on the same config, nothing moved.
    world
        .job_sources
        .push(job_source("second", &["second-a", "second-b"]));
    world.run_to_balanced(5);
    assert_eq!(world.config_map, kept);
}

#[test]
fn jobs_moved_between_sources_are_rewritten_and_a_job_in_two_sources_fails_naming_both() {
    let mut world = balanced_on_two_sources();

    // A job moved between sources and a new one: one new version with all of them.
    world.job_sources[0] = job_source("first", &["first-a", "first-b"]);
    world.job_sources[1] = job_source("second", &["second-a", "second-b", "first-c", "second-c"]);
    world.run_to_balanced(20);
    let config = world.config();
    assert_eq!(loads(&config).iter().sum::<usize>(), 8);
    assert!(
        config
            .workloads()
            .any(|(_, w)| w.jobs.contains(&"second-c".to_owned()))
    );

    // A job listed in two sources is invalid jobs, naming both, and keeps the config.
    let kept = world.config_map.clone();
    world.job_sources[1] = job_source("second", &["second-a", "first-a"]);
    let outcome = world.reconcile();
    assert_eq!(outcome.status.phase, Some(Phase::Failed));
    assert_eq!(world.ready_condition().reason, reason::INVALID_JOBS);
    assert!(
        world
            .ready_condition()
            .message
            .contains("in ConfigMap first key jobs line 2 and in ConfigMap second key jobs line 3"),
        "{}",
        world.ready_condition().message
    );
    assert_eq!(world.config_map, kept);
}

#[test]
fn adding_a_job_refreshes_only_the_worker_that_receives_it() {
    let mut world = balanced(example_jobs(), 3);
    let before = world.config();
    world.pool.spec.jobs.push("stream:new:job".into());
    world.pool.metadata.generation = Some(2);
    world.reconcile();
    let after = world.config();
    assert_eq!(after.version, before.version + 1);
    let touched: Vec<&str> = after
        .workloads()
        .filter(|(pod, w)| before.workload(pod).unwrap().jobs != w.jobs)
        .map(|(pod, _)| pod)
        .collect();
    assert_eq!(touched.len(), 1);
    assert_eq!(world.pending().keys().collect::<Vec<_>>(), touched);
    assert_eq!(names(&world.deleted), touched);
    assert_eq!(
        world.pool.status.as_ref().unwrap().observed_generation,
        Some(2)
    );
}

#[test]
fn removing_a_job_refreshes_at_most_two_workers() {
    let mut world = balanced(example_jobs(), 3);
    world.pool.spec.jobs.retain(|j| j != "stream:xxrtve1");
    world.reconcile();
    assert!(
        (1..=2).contains(&world.pending().len()),
        "{:?}",
        world.pending()
    );
    let mut all: Vec<String> = world
        .config()
        .workloads()
        .flat_map(|(_, w)| w.jobs.clone())
        .collect();
    all.sort();
    assert_eq!(all.len(), 26);
    assert!(!all.contains(&"stream:xxrtve1".to_owned()));
}
