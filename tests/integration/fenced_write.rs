//! The operator's ConfigMap write is fenced by the ConfigMap its decision was read from: a
//! write decided on stale state fails with a conflict and changes nothing (kube-sim serves the
//! same preconditions as kube-apiserver; the e2e suite runs the writes on both).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta};
use kube::{Client, Config};
use kube_sim::{Sim, SimConfig};
use swarm_operator::controller::fenced_write::write_config_map;

async fn start() -> (Sim, Api<ConfigMap>) {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("start kube-sim");
    let client = Client::try_from(Config::new(sim.url().parse().expect("URL"))).expect("client");
    (sim, Api::namespaced(client, "default"))
}

fn desired(value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("pool-config".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("config.yml".into(), value.into())])),
        ..Default::default()
    }
}

fn data(cm: &ConfigMap) -> &str {
    &cm.data.as_ref().expect("data")["config.yml"]
}

/// 409: Conflict for a stale resourceVersion, AlreadyExists for a stale "none yet".
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

#[tokio::test]
async fn a_write_lands_only_over_the_config_map_it_was_decided_on() {
    let (_sim, api) = start().await;
    let first = write_config_map(&api, None, desired("v1"))
        .await
        .expect("a first write creates the ConfigMap");
    assert_eq!(data(&first), "v1");

    let second = write_config_map(&api, Some(&first), desired("v2"))
        .await
        .expect("a write over the current ConfigMap lands");
    assert_eq!(data(&second), "v2");

    // A deposed leader still holding `first` decides again: refused, nothing changes.
    let stale = write_config_map(&api, Some(&first), desired("stale"))
        .await
        .expect_err("a write over a stale read is refused");
    assert!(is_conflict(&stale), "a conflict: {stale}");
    let now = api.get("pool-config").await.expect("GET");
    assert_eq!(data(&now), "v2");
    assert_eq!(
        now.metadata.resource_version,
        second.metadata.resource_version
    );
}

#[tokio::test]
async fn a_first_write_decided_before_another_created_the_config_map_is_refused() {
    let (_sim, api) = start().await;
    let theirs = write_config_map(&api, None, desired("theirs"))
        .await
        .expect("the other writer creates it");
    let late = write_config_map(&api, None, desired("late"))
        .await
        .expect_err("a write decided on 'no ConfigMap yet' is refused once one exists");
    assert!(is_conflict(&late), "a conflict: {late}");
    let now = api.get("pool-config").await.expect("GET");
    assert_eq!(data(&now), "theirs");
    assert_eq!(
        now.metadata.resource_version,
        theirs.metadata.resource_version
    );
}
