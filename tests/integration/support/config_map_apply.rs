//! The API server's side of the operator's ConfigMap writes, for the offline test worlds: a
//! server-side apply merges the fields the operator sends over what the ConfigMap holds (data,
//! labels and annotations by key, owner references by uid) and keeps everything else.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Applies `desired` to the ConfigMap in `current`, creating it when there is none.
pub fn apply_config_map(current: &mut Option<ConfigMap>, desired: ConfigMap) {
    let cm = current.get_or_insert_with(|| ConfigMap {
        metadata: ObjectMeta {
            name: desired.metadata.name.clone(),
            namespace: desired.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    cm.data
        .get_or_insert_default()
        .extend(desired.data.unwrap_or_default());
    cm.metadata
        .labels
        .get_or_insert_default()
        .extend(desired.metadata.labels.unwrap_or_default());
    cm.metadata
        .annotations
        .get_or_insert_default()
        .extend(desired.metadata.annotations.unwrap_or_default());
    let refs = cm.metadata.owner_references.get_or_insert_default();
    for r in desired.metadata.owner_references.unwrap_or_default() {
        if !refs.iter().any(|have| have.uid == r.uid) {
            refs.push(r);
        }
    }
}
