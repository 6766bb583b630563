//! The API the worker talks to: kube-sim holding this test's Pod, the requests it served, a
//! client whose fence reads can be held back, a client turned away with 429s, and a proxy that
//! can be cut.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body_util::{Either, Full};
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use kube_sim::{Sim, SimConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::Service;

use crate::worker::POD;

/// Creates this test's Pod, the Lease's owner (the sim collects a Lease whose owner is
/// missing); returns its uid.
async fn create_pod(pods: &Api<Pod>) -> String {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(POD.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "worker".into(),
                image: Some("swarm-worker:latest".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    pod.metadata.uid.unwrap()
}

/// Every request the sim served: (verb, path, query), a watch as `WATCH`.
pub async fn requests(sim: &Sim) -> Vec<(String, String, String)> {
    let log: Vec<serde_json::Value> = reqwest::get(format!("{}/kube-sim/v1/requests", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    log.iter()
        .map(|request| {
            let query = request["query"].as_str().unwrap().to_string();
            let verb = match query.contains("watch=true") {
                true => "WATCH".to_string(),
                false => request["method"].as_str().unwrap().to_string(),
            };
            (verb, request["path"].as_str().unwrap().to_string(), query)
        })
        .collect()
}

/// How many requests of `verbs` on paths containing `path` the sim served.
pub async fn count(sim: &Sim, verbs: &[&str], path: &str) -> usize {
    requests(sim)
        .await
        .iter()
        .filter(|(verb, at, _)| verbs.contains(&verb.as_str()) && at.contains(path))
        .count()
}

/// Whether the fence reads (GETs of one ConfigMap) answer: a test holds their answers back to
/// show that nothing but an answer lets a job start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    Answer,
    Hold,
}

/// A client layer that holds back the answers of ConfigMap GETs while `reads` says so; watches
/// and every other request pass.
struct Gate<S> {
    inner: S,
    reads: watch::Receiver<Reads>,
}

impl<S> Service<http::Request<Body>> for Gate<S>
where
    S: Service<http::Request<Body>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let uri = request.uri();
        let read = request.method() == http::Method::GET
            && uri.path().contains("/configmaps/")
            && !uri.query().unwrap_or_default().contains("watch");
        let mut reads = self.reads.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            if read {
                let _ = reads.wait_for(|reads| *reads == Reads::Answer).await;
            }
            answer
        })
    }
}

/// A client of `sim` whose fence reads answer only while `reads` says so.
pub fn gated_client(sim: &Sim, reads: watch::Receiver<Reads>) -> Client {
    let config = Config::new(sim.url().parse().unwrap());
    let layer = tower::layer::layer_fn(move |inner| Gate {
        inner,
        reads: reads.clone(),
    });
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

/// What a [`shedding_client`] was asked while it shed: when, and the request's method and path.
pub type Shed = Arc<Mutex<Vec<(Instant, String)>>>;

/// A client layer that answers every request with 429 Too Many Requests, as API Priority and
/// Fairness does when it cannot queue one, while `shedding` says so, and records each.
struct Shedder<S> {
    inner: S,
    shedding: watch::Receiver<bool>,
    shed: Shed,
}

const TOO_MANY_REQUESTS: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","code":429}"#;

impl<S, B> Service<http::Request<Body>> for Shedder<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Either<B, Full<bytes::Bytes>>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if *self.shedding.borrow() {
            let what = format!("{} {}", request.method(), request.uri());
            self.shed.lock().unwrap().push((Instant::now(), what));
            let answer = http::Response::builder()
                .status(429)
                .header("content-type", "application/json")
                .body(Either::Right(Full::from(TOO_MANY_REQUESTS)))
                .unwrap();
            return Box::pin(async move { Ok(answer) });
        }
        let answer = self.inner.call(request);
        Box::pin(async move { Ok(answer.await?.map(Either::Left)) })
    }
}

/// A client of `sim` turned away with 429s while `shedding` says so; what it sent meanwhile
/// goes to `shed`.
pub fn shedding_client(sim: &Sim, shedding: watch::Receiver<bool>, shed: Shed) -> Client {
    let config = Config::new(sim.url().parse().unwrap());
    let layer = tower::layer::layer_fn(move |inner| Shedder {
        inner,
        shedding: shedding.clone(),
        shed: shed.clone(),
    });
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

/// A sim with this test's Pod (the Lease's owner: the sim collects a Lease whose owner is
/// missing) and, unless `None`, the pod's ConfigMap; returns the sim, a client and the uid.
pub async fn sim_with(config_map: Option<ConfigMap>) -> (Sim, Client, String) {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let uid = create_pod(&Api::namespaced(client.clone(), "default")).await;
    if let Some(config_map) = config_map {
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        config_maps
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();
    }
    (sim, client, uid)
}

/// A TCP proxy in front of the sim that the test can cut: cut, it breaks every open connection
/// and refuses new ones, as a network partition that resets would.
pub struct Proxy {
    pub url: String,
    open: watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (open, _) = watch::channel(true);
        let state = open.clone();
        tokio::spawn(async move {
            while let Ok((mut downstream, _)) = listener.accept().await {
                let mut open = state.subscribe();
                if !*open.borrow_and_update() {
                    continue; // dropped: refused
                }
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream) => {}
                        _ = open.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Self { url, open }
    }

    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    pub fn restore(&self) {
        self.open.send_replace(true);
    }
}

/// How many WATCH requests of ConfigMaps the sim has answered.
pub async fn config_map_watches(sim: &Sim) -> usize {
    requests(sim)
        .await
        .iter()
        .filter(|(verb, path, _)| verb == "WATCH" && path.contains("/configmaps"))
        .count()
}
