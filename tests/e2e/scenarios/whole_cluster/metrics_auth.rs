//! Scenario: `/metrics` behind the real API server's TokenReview and SubjectAccessReview. The
//! operator runs as `deploy/`'s ServiceAccount with `deploy/rbac` applied, serving `/metrics` over
//! HTTPS as in its pod: no token or a forged one gets 401, a ServiceAccount token without the
//! role 403, one bound to `swarm-operator-metrics-reader` 200; and no request of the operator
//! (its reviews included) is refused by RBAC. The helpers here serve the real-node scenarios too.
//!
//! Needs a real control plane; skipped on the simulation, which has no authentication.

use std::time::Duration;

use serde_json::json;

use crate::harness::operator::MetricsServing;
use crate::harness::poll::eventually_within;
use crate::harness::real_cluster::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE};
use crate::harness::{Env, scenario};

/// deploy/'s role for whoever scrapes /metrics.
const METRICS_READER_ROLE: &str = "swarm-operator-metrics-reader";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_a_token_the_api_server_allows_get_on_metrics() {
    scenario!("metrics-auth")
        .real_cluster_only("TokenReview and SubjectAccessReview need a real API server")
        .run(async |env| {
            env.install_crds().await;
            env.kubectl
                .ok(&["apply", "-f", "deploy/namespace.yaml"])
                .await;
            env.kubectl.ok(&["apply", "-k", "deploy/rbac"]).await;
            let kubeconfig = env
                .service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
                .await;
            env.start_operator_serving(&kubeconfig, &[], MetricsServing::Authorized)
                .await;
            let url = format!("https://{}/metrics", env.operator_metrics_addr());
            let reader = assert_only_the_reader_gets_metrics(env, OPERATOR_NAMESPACE, &url).await;
            let (_, text) = scrape(&url, Some(&reader)).await;
            assert!(
                text.contains("swarm_operator_reconciliations_total"),
                "{text}"
            );
        })
        .await;
}

/// `GET url` over HTTPS with `token` as its bearer token, as a ServiceMonitor with
/// `insecureSkipVerify` has Prometheus scrape it (the certificate is self-signed): the status
/// code and the body.
pub(super) async fn scrape(url: &str, token: Option<&str>) -> (u16, String) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .danger_accept_invalid_certs(true)
        .build()
        .expect("build an HTTPS client");
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A token of ServiceAccount `account`, made in `namespace`, bound to deploy/'s
/// `swarm-operator-metrics-reader` when `reader`: a scraper with or without the role.
pub(super) async fn scraper_token(
    env: &Env,
    namespace: &str,
    account: &str,
    reader: bool,
) -> String {
    let mut documents = vec![json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": account, "namespace": namespace},
    })];
    if reader {
        documents.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{account}-{namespace}")},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }));
    }
    env.apply(&format!("scraper-{account}.yaml"), &documents)
        .await;
    let token = env
        .kubectl
        .ok(&["-n", namespace, "create", "token", account, "--duration=1h"])
        .await;
    token.trim().to_owned()
}

/// Who may read the `/metrics` at `url`: no one anonymous or with a forged token (401), not a
/// ServiceAccount the API server authenticates without the role (403), one bound to
/// `swarm-operator-metrics-reader` (200). Its scrapers are ServiceAccounts of `namespace`;
/// returns the reader's token.
pub(super) async fn assert_only_the_reader_gets_metrics(
    env: &Env,
    namespace: &str,
    url: &str,
) -> String {
    let stranger = scraper_token(env, namespace, "metrics-stranger", false).await;
    let reader = scraper_token(env, namespace, "metrics-reader", true).await;
    let (status, body) = scrape(url, None).await;
    assert_eq!(status, 401, "anonymous GET {url}: {body}");
    let (status, body) = scrape(url, Some("not-a-token")).await;
    assert_eq!(status, 401, "GET {url} with a forged token: {body}");
    let (status, body) = scrape(url, Some(&stranger)).await;
    assert_eq!(status, 403, "GET {url} without the role: {body}");
    // The binding was made a moment ago: the API server's RBAC cache takes it in within a
    // second or so (no refusal of the reader has been cached).
    eventually_within(
        &format!("{url} to answer the reader"),
        Duration::from_secs(30),
        || async {
            match scrape(url, Some(&reader)).await {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status}: {body}")),
            }
        },
    )
    .await;
    reader
}
