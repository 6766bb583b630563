//! `swarm-operator`: the operator binary. Only wiring; the logic lives in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::http::HeaderValue;
use axum::http::header::USER_AGENT;
use clap::{Args, Parser, Subcommand};
use prometheus_client::registry::Registry;
use swarm_operator::api::crd;
use swarm_operator::cli::check::{self, CheckArgs};
use swarm_operator::cli::plan::{self, PlanArgs};
use swarm_operator::controller;
use swarm_operator::runtime::http::{HttpState, MetricsAccess};
use swarm_operator::runtime::leader::{self, LeaseConfig};
use swarm_operator::runtime::metrics::Metrics;
use swarm_operator::runtime::metrics_auth::Authorizer;
use swarm_operator::runtime::metrics_review::ApiServerReviewer;
use swarm_operator::runtime::telemetry::{self, LogFormat};
use swarm_operator::runtime::{api_requests, http, tls};
use tokio::sync::watch;
use tracing::{error, info, warn};

/// Shares a SwarmPool's jobs over the workers of a StatefulSet, each job on exactly one worker.
#[derive(Parser, Debug)]
#[command(
    name = "swarm-operator",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default when no subcommand is given).
    Run(RunArgs),
    /// Print the SwarmPool CustomResourceDefinition as YAML.
    Crd,
    /// Print the config.yml the operator would write for a pool.
    Plan(PlanArgs),
    /// Check an installed operator: SwarmPools served, an operator pod Ready, the Lease held by
    /// one (the chart's `helm test`).
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Most pools reconciled at once: bounds the memory a burst of reconciles can take (each
    /// holds its pool's live pod list and plan), whatever the number of pools. The others wait
    /// their turn in the order they were triggered.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// Address of the /healthz and /readyz endpoints, in plain HTTP for the kubelet (port 0:
    /// a free port, logged at start).
    #[arg(long, default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Address of /metrics: HTTPS, answering only a bearer token the API server authenticates
    /// and allows `get` on the non-resource URL /metrics (port 0: a free port, logged at
    /// start).
    #[arg(long, default_value = "0.0.0.0:8443")]
    metrics_addr: SocketAddr,
    /// Serve /metrics in plain HTTP to anyone, for a local run.
    #[arg(long)]
    metrics_insecure: bool,
    /// Directory holding the /metrics serving certificate as `tls.crt` and `tls.key` (a
    /// mounted kubernetes.io/tls Secret), reloaded when they change [default: a self-signed
    /// certificate made at start].
    #[arg(long, value_name = "DIR", conflicts_with = "metrics_insecure")]
    metrics_cert_dir: Option<PathBuf>,
    /// Run as one of several replicas: only the holder of a Lease reconciles, the others
    /// stand by to take over.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease [default: the client's namespace; in a cluster,
    /// the operator's own].
    #[arg(long, value_name = "NS")]
    leader_elect_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "swarm-operator")]
    leader_elect_lease_name: String,
    /// Seconds the lease stays valid after its last renewal: a standby takes over this long
    /// after a leader stops renewing it (at once when a leader shuts down).
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    leader_elect_lease_duration: u64,
}

/// With `--features dhat-heap`, every allocation is recorded (see `Cargo.toml`).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// jemalloc returns freed memory to the system as it goes; glibc's per-thread arenas kept the
/// operator's RSS well above its live heap after every burst of reconciles.
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::new_heap();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    let result = match cli.command {
        None => run(cli.run),
        Some(Command::Run(args)) => run(args),
        Some(Command::Crd) => {
            print!("{}", crd::crd_yaml());
            Ok(())
        }
        Some(Command::Plan(args)) => plan::run(&args),
        Some(Command::Check(args)) => check_install(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout as clap prints them; a usage error is one line naming the
/// problem (clap's hint to try `--help` follows on a second line otherwise).
fn usage_error(error: &clap::Error) -> ExitCode {
    if !error.use_stderr() {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    let rendered = error.render().to_string();
    let problem: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty())
        .collect();
    eprintln!("{}", problem.join(" "));
    ExitCode::from(2)
}

/// The error and its causes on one line, skipping causes whose text the previous message
/// already includes (kube's errors repeat their sources in their own message).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

fn check_install(args: &CheckArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let summary = runtime.block_on(async {
        let client = kube::Client::try_from(client_config().await?)
            .context("building the Kubernetes client")?;
        check::check(&client, args).await
    })?;
    println!("swarm-operator works: {summary}");
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        info!(
            version = env!("CARGO_PKG_VERSION"),
            namespace = args.namespace.as_deref().unwrap_or("(all)"),
            "starting swarm-operator"
        );
        let config = client_config().await?;
        let mut registry = Registry::default();
        let metrics = Metrics::default().register(&mut registry);
        #[cfg(not(feature = "dhat-heap"))]
        registry.register_collector(Box::new(
            swarm_operator::runtime::allocator_metrics::AllocatorStats,
        ));
        let client = kube::client::ClientBuilder::try_from(config)
            .context("building the Kubernetes client")?
            .with_layer(&api_requests::counting_layer(metrics.api_requests.clone()))
            .build();
        let listener = bind(args.http_addr, "serving /healthz and /readyz").await?;
        let metrics_listener = bind(args.metrics_addr, "serving /metrics").await?;
        let access = metrics_access(&args, &client)?;

        let state = Arc::new(HttpState::new(registry));

        let stopped = stop_on_signal();
        let server = tokio::spawn(serve(
            listener,
            metrics_listener,
            access,
            state.clone(),
            stopped.clone(),
        ));

        let leadership = if args.leader_elect {
            let lease = LeaseConfig {
                namespace: args
                    .leader_elect_namespace
                    .unwrap_or_else(|| client.default_namespace().to_owned()),
                name: args.leader_elect_lease_name,
                identity: leader::default_identity(),
                duration: Duration::from_secs(args.leader_elect_lease_duration),
            };
            match stand_by(&client, &lease, &state, stopped.clone()).await? {
                Some(leadership) => Some(leadership),
                None => return Ok(()),
            }
        } else {
            None
        };

        let lease = leadership
            .as_ref()
            .map_or_else(leader::LeaseGuard::unelected, leader::Leadership::guard);
        let controller = controller::run(
            client,
            args.namespace,
            args.max_concurrent_reconciles,
            metrics,
            state,
            lease,
            until(stopped.clone()),
        );
        let controller = run_while_leading(controller, leadership);
        wait_for_shutdown(server, controller, stopped).await
    })
}

/// A listener on `addr`, its bound address logged with `what`: `--http-addr 127.0.0.1:0` picks
/// a free port, and whoever started the process learns it from this line.
async fn bind(addr: SocketAddr, what: &'static str) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    info!(addr = %bound, "{what}");
    Ok(listener)
}

/// Who may read `/metrics`: with `--metrics-insecure` anyone, else over HTTPS whoever the API
/// server allows.
fn metrics_access(args: &RunArgs, client: &kube::Client) -> anyhow::Result<MetricsAccess> {
    if args.metrics_insecure {
        warn!("/metrics in plain HTTP, to anyone (--metrics-insecure)");
        return Ok(MetricsAccess::Insecure);
    }
    let cert = tls::serving_cert(args.metrics_cert_dir.as_deref(), tls::RELOAD_INTERVAL)
        .context("loading the /metrics serving certificate")?;
    Ok(MetricsAccess::Authorized {
        tls: cert.server_config(),
        authorizer: Arc::new(Authorizer::new(ApiServerReviewer::new(client.clone()))),
    })
}

/// Serves the probes and `/metrics` until `stopped`; the first to fail ends both.
async fn serve(
    health: tokio::net::TcpListener,
    metrics: tokio::net::TcpListener,
    access: MetricsAccess,
    state: Arc<HttpState>,
    stopped: watch::Receiver<bool>,
) -> std::io::Result<()> {
    tokio::try_join!(
        http::serve(health, state.clone(), until(stopped.clone())),
        http::serve_metrics(metrics, state, access, until(stopped)),
    )
    .map(|_| ())
}

/// The client configuration: inferred from the environment, with the operator's own user agent,
/// retries and timeouts.
async fn client_config() -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::infer()
        .await
        .context("no Kubernetes client configuration (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    // Names the operator in API server audit and request logs.
    config.headers.push((
        USER_AGENT,
        HeaderValue::from_static(concat!("swarm-operator/", env!("CARGO_PKG_VERSION"))),
    ));
    // kube's own retry of 429/503/504 makes up to 15 attempts with delays growing to
    // minutes, silently: a watch or reconcile could hang that long while an API server
    // starts. Without it the error reaches the watch or reconcile backoff at once, which
    // logs it, reports it, honours Retry-After and caps its delay at a few seconds.
    config.default_retry = false;
    // A request that gets no byte for this long is abandoned (the default is about five
    // minutes); every watch is renewed well within it (relisting_watch).
    config.read_timeout = Some(REQUEST_READ_TIMEOUT);
    config.write_timeout = Some(REQUEST_READ_TIMEOUT);
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(config)
}

/// Listens for SIGTERM or SIGINT: the receiver turns true on either, and the HTTP server, the
/// controller and the shutdown deadline all follow it.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested; finishing running reconciles");
        let _ = stop.send(true);
    });
    stopped
}

/// Stands by until this replica holds `lease`: the leadership, or `None` if a stop comes first.
async fn stand_by(
    client: &kube::Client,
    lease: &LeaseConfig,
    state: &HttpState,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<Option<leader::Leadership>> {
    // A standby is ready: it can take over (and a PodDisruptionBudget counts it).
    state.set_ready();
    tokio::select! {
        acquired = leader::acquire(client.clone(), lease) => {
            Ok(Some(acquired.context("leader election")?))
        }
        () = until(stopped) => {
            info!("stopped while standing by");
            Ok(None)
        }
    }
}

/// Runs `controller`; under a `leadership`, releases the lease once it stops, and exits the
/// process at once if the lease is lost.
async fn run_while_leading(
    controller: impl Future<Output = ()>,
    leadership: Option<leader::Leadership>,
) {
    let Some(mut leadership) = leadership else {
        return controller.await;
    };
    tokio::select! {
        () = controller => leadership.release().await,
        () = leadership.lost() => {
            // Exit rather than stop gracefully: nothing of this replica may be
            // written any more (what was already decided is fenced).
            error!("lost the lease, or could not renew it in time; exiting at once");
            std::process::exit(1);
        }
    }
}

/// Waits for the HTTP server and the controller to finish, or, once `stopped`, for no longer
/// than [`SHUTDOWN_GRACE`].
async fn wait_for_shutdown(
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    controller: impl Future<Output = ()>,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let server = async move {
        server
            .await
            .context("the HTTP server task")?
            .context("serving HTTP")
    };
    let deadline = async {
        until(stopped).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        (served, ()) = async { tokio::join!(server, controller) } => {
            served?;
            info!("stopped");
        }
        () = deadline => {
            warn!(grace = ?SHUTDOWN_GRACE, "shutdown grace elapsed; exiting without waiting further");
        }
    }
    Ok(())
}

/// The longest an API request may wait for its next byte.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(90);
/// The longest a connection to the API server may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a requested shutdown waits for running reconciles (and for watches stuck in retry
/// backoff, which can hold kube-runtime's controller open) before the process exits anyway;
/// below the 30 s termination grace Kubernetes gives a pod by default.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Resolves once `stopped` turns true.
async fn until(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
