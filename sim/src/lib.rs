//! kube-sim: an in-memory Kubernetes control plane that kube-rs clients and kubectl talk to
//! over plain HTTP, for swarm-operator's tests and local playground.
//!
//! Start one in-process with [`Sim::start`], or run the `kube-sim` binary.
//!
//! Where it knowingly differs from kube-apiserver (`sim/README.md` has these as a table):
//! - Request bodies in protobuf are decoded for the kinds kubectl's `create <generator>`
//!   subcommands send, except those with a pod template (Deployment, Job, CronJob): those
//!   and other kinds get 415 naming the kind. CBOR bodies get 415. Responses are always
//!   JSON.
//! - Discovery is the legacy form only; kubectl falls back to it from aggregated discovery.
//! - `/openapi/v3` documents have schemas for custom resources only (from each CRD
//!   version's `openAPIV3Schema`, with brief `meta/v1` metadata schemas): `kubectl explain`
//!   works for custom resources, not for built-in kinds. Patch operations carry no request
//!   body, so kubectl builds strategic merge patches from its compiled-in types, as it does
//!   against any server without schemas.
//! - CRD `x-kubernetes-validations` (CEL) rules are not evaluated.
//! - Reads always see the latest state: a `resourceVersion` on GET or list is not used to
//!   serve an older snapshot (paged lists do keep the snapshot of their first page).
//! - Pods have no network: `httpGet` readiness probes go to the address in the pod's
//!   `kube-sim.swarm.io/probe-address` annotation, and other probe kinds are not run.
//! - No authentication or admission webhooks, and every request is authorized:
//!   `authorization.k8s.io/v1` access reviews answer `allowed: true` and rules reviews one
//!   rule allowing everything, as kube-apiserver's `AlwaysAllow` authorizer does.

pub mod config;
pub mod controllers;
pub mod kubeconfig;
pub mod mounts;
pub mod server;
pub mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub use config::SimConfig;

/// A running simulation: store, HTTP server and in-cluster controllers.
pub struct Sim {
    addr: SocketAddr,
    store: store::Store,
    server: JoinHandle<()>,
    stop: Option<oneshot::Sender<()>>,
    closing: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Sim {
    /// Binds the listener, starts serving and spawns the controllers; the server is
    /// listening when this returns.
    pub async fn start(config: SimConfig) -> anyhow::Result<Sim> {
        let store = store::Store::new();
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("binding {}", config.addr))?;
        let addr = listener.local_addr()?;
        let (closing, closing_rx) = watch::channel(false);
        let api = server::ApiServer::new(store.clone(), closing_rx);
        let mounts = mounts::Mounts::default();
        let tasks = controllers::spawn_all(store.clone(), mounts.clone(), config.clone());
        let app = api.router().merge(mounts::routes(mounts));
        let (stop, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "kube-sim server failed");
            }
        });
        tracing::info!(%addr, "kube-sim listening");
        Ok(Sim {
            addr,
            store,
            server,
            stop: Some(stop),
            closing,
            tasks,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The store behind the API.
    pub fn store(&self) -> &store::Store {
        &self.store
    }

    /// Writes a kubeconfig pointing at this simulation (context `kube-sim`, current).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        kubeconfig::write(path, &self.url())
    }

    /// Drops the watch history ("compact now"): watches from older resourceVersions get
    /// a 410 Expired ERROR event.
    pub fn compact(&self) {
        self.store.compact();
    }

    /// Stops the controllers and the server; open watches end.
    pub async fn shutdown(mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.closing.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(Duration::from_secs(2), &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
    }
}
