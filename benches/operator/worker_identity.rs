//! Who the load driver's workers are on a real control plane: the worker ServiceAccount of
//! `deploy/worker-rbac` with its Role, authenticated by a token of that account, as a worker
//! pod is. With the benchmark's admin kubeconfig their requests would belong to
//! `system:masters`, which API Priority and Fairness exempts: an overloaded API server would
//! then queue every read until its handlers time out instead of shedding the excess with 429s,
//! and the cell would measure a control plane no real pool meets.

use std::path::Path;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};

use crate::cluster::repo_path;

/// The ServiceAccount `deploy/worker-rbac` creates and binds.
const ACCOUNT: &str = "swarm-worker";
/// How long the token holds: longer than any cell.
const TOKEN_SECONDS: i64 = 24 * 3600;

/// `admin`'s connection settings with the credentials of the worker ServiceAccount of
/// `namespace`, which this creates with its Role and RoleBinding.
pub async fn worker_config(admin: &kube::Config, client: &Client, namespace: &str) -> kube::Config {
    for file in ["service_account.yaml", "role.yaml", "role_binding.yaml"] {
        apply(
            client,
            namespace,
            &repo_path("deploy/worker-rbac").join(file),
        )
        .await;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .expect("a token of the worker ServiceAccount")
        .status
        .expect("the token request's status")
        .token;
    let mut config = admin.clone();
    // Only the token: no client certificate, which would authenticate as the admin first.
    config.auth_info = serde_json::from_value(serde_json::json!({ "token": token }))
        .expect("a token-only AuthInfo");
    config
}

/// Server-side applies the object of `path` in `namespace`.
async fn apply(client: &Client, namespace: &str, path: &Path) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let object: DynamicObject =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    let types = object.types.clone().expect("apiVersion and kind");
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.patch(
        &object.name_any(),
        &PatchParams::apply("swarm-operator-bench").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {}: {e}", path.display()));
}
