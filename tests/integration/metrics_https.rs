//! `/metrics` over HTTPS behind the API server's reviews, served as the operator serves it, with
//! a reviewer that answers as a TokenReview and SubjectAccessReview would: no token 401, a token
//! the API server does not accept 401, one without the role 403, one with it 200; `/metrics` no
//! longer on the probes' port; a mounted certificate replaced is served from then on.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use prometheus_client::registry::Registry;
use swarm_operator::runtime::http::{self, HttpState, MetricsAccess};
use swarm_operator::runtime::metrics::Metrics;
use swarm_operator::runtime::metrics_auth::{Authorizer, ReviewError, Reviewer, Verdict};
use swarm_operator::runtime::tls::{self, CERT_FILE, KEY_FILE};
use tokio::sync::oneshot;

/// The API server's answers: `reader` may get /metrics, `stranger` is authenticated without
/// the role, anything else is not a token it knows.
struct FakeApiServer;

impl Reviewer for FakeApiServer {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verdict, ReviewError>> {
        Box::pin(async move {
            Ok(match token {
                "reader" => Verdict::Allowed,
                "stranger" => Verdict::Forbidden,
                _ => Verdict::Unauthenticated,
            })
        })
    }
}

/// A self-signed pair for `name`, as PEM (certificate, key).
fn pem_pair(name: &str) -> (String, String) {
    let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    (generated.cert.pem(), generated.signing_key.serialize_pem())
}

fn write_pair(dir: &Path, (cert, key): &(String, String)) {
    // Written aside and renamed in, as the kubelet swaps a Secret's files atomically.
    for (name, text) in [(KEY_FILE, key), (CERT_FILE, cert)] {
        let aside = dir.join(format!(".{name}.new"));
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(aside, dir.join(name)).unwrap();
    }
}

/// The probes' and `/metrics`'s servers, stopped when dropped.
struct Servers {
    health: SocketAddr,
    metrics: SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn start(cert_dir: Option<&Path>) -> Servers {
    let mut registry = Registry::default();
    let metrics = Metrics::default().register(&mut registry);
    metrics.config_writes.inc();
    let state = Arc::new(HttpState::new(registry));
    state.set_ready();
    let cert = tls::serving_cert(cert_dir, Duration::from_millis(50)).unwrap();
    let access = MetricsAccess::Authorized {
        tls: cert.server_config(),
        authorizer: Arc::new(Authorizer::new(FakeApiServer)),
    };
    let health = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let servers = (health.local_addr().unwrap(), metrics.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = futures::FutureExt::shared(async move {
        let _ = stopped.await;
    });
    tokio::spawn(http::serve(health, state.clone(), stopped.clone()));
    tokio::spawn(http::serve_metrics(metrics, state, access, stopped));
    Servers {
        health: servers.0,
        metrics: servers.1,
        _stop: stop,
    }
}

/// A client that takes any certificate (as a ServiceMonitor with `insecureSkipVerify`) and
/// reports the one it was served.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .build()
        .unwrap()
}

async fn scrape(addr: SocketAddr, token: Option<&str>) -> (u16, String) {
    let mut request = client().get(format!("https://{addr}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET /metrics over HTTPS");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The certificate `addr` serves, DER.
async fn served_certificate(addr: SocketAddr) -> Vec<u8> {
    let response = client()
        .get(format!("https://{addr}/metrics"))
        .send()
        .await
        .expect("GET /metrics over HTTPS");
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .unwrap();
    info.peer_certificate().unwrap().to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn metrics_answer_only_a_token_the_api_server_allows() {
    let servers = start(None).await;
    assert_eq!(scrape(servers.metrics, None).await.0, 401, "anonymous");
    assert_eq!(scrape(servers.metrics, Some("forged")).await.0, 401);
    assert_eq!(scrape(servers.metrics, Some("stranger")).await.0, 403);
    let (status, body) = scrape(servers.metrics, Some("reader")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("swarm_operator_config_writes_total 1"),
        "{body}"
    );
}

#[tokio::test]
async fn plain_http_to_the_metrics_port_gets_no_metrics() {
    let servers = start(None).await;
    let plain = reqwest::get(format!("http://{}/metrics", servers.metrics)).await;
    assert!(
        plain.is_err() || !plain.unwrap().status().is_success(),
        "plain HTTP served /metrics"
    );
}

#[tokio::test]
async fn the_probes_stay_plain_http_and_metrics_leave_their_port() {
    let servers = start(None).await;
    let probe = |path: &str| reqwest::get(format!("http://{}{path}", servers.health));
    assert_eq!(probe("/healthz").await.unwrap().status(), 200);
    assert_eq!(probe("/readyz").await.unwrap().status(), 200);
    assert_eq!(probe("/metrics").await.unwrap().status(), 404);
}

#[tokio::test]
async fn a_mounted_certificate_is_served_and_reloaded_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (pem_pair("first.example"), pem_pair("second.example"));
    write_pair(dir.path(), &first);
    let servers = start(Some(dir.path())).await;
    assert_eq!(served_certificate(servers.metrics).await, der(&first.0));
    write_pair(dir.path(), &second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while served_certificate(servers.metrics).await != der(&second.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
