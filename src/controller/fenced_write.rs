//! The operator's ConfigMap writes, fenced by the state they were decided on.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use swarm_protocol::names::MANAGER as FIELD_MANAGER;

/// Writes `desired` (server-side apply) only over `based_on`, the ConfigMap the decision was
/// made from: its resourceVersion is a precondition, so a write decided on stale state (by an
/// operator that lost its lease while deciding, or raced by any other writer) fails with a
/// conflict instead of landing, and the next reconcile decides again from a fresh read.
///
/// An apply that creates ignores a resourceVersion, so a decision made on "no ConfigMap yet"
/// first creates an empty one (failing if one exists by then) and then applies over that.
pub async fn write_config_map(
    config_maps: &Api<ConfigMap>,
    based_on: Option<&ConfigMap>,
    mut desired: ConfigMap,
) -> Result<ConfigMap, kube::Error> {
    let name = desired.name_any();
    let base = match based_on {
        Some(current) => current.metadata.resource_version.clone(),
        None => {
            let placeholder = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            config_maps
                .create(&params, &placeholder)
                .await?
                .metadata
                .resource_version
        }
    };
    desired.metadata.resource_version = base;
    config_maps
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
}
