//! `kube-sim --kubeconfig <PATH> [--addr 127.0.0.1:0] [--time-scale <F>] [--pod-ready-delay <SECONDS>]`:
//! serves a simulated control plane until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kube_sim::{Sim, SimConfig};

/// In-memory Kubernetes control plane for tests and local playgrounds.
#[derive(Parser, Debug)]
#[command(name = "kube-sim", version, about)]
struct Args {
    /// Where to write the kubeconfig (context `kube-sim`, set as current) once listening.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Listen address; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Factor applied to simulated delays (0.01 makes a 30 s grace period take 0.3 s).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Seconds a pod takes to become Running and Ready, before the time scale.
    #[arg(long, default_value_t = 1.0)]
    pod_ready_delay: f64,
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    anyhow::ensure!(
        args.time_scale >= 0.0 && args.time_scale.is_finite(),
        "--time-scale must be a non-negative number"
    );
    anyhow::ensure!(
        args.pod_ready_delay >= 0.0 && args.pod_ready_delay.is_finite(),
        "--pod-ready-delay must be a non-negative number of seconds"
    );
    let config = SimConfig {
        addr: args.addr,
        time_scale: args.time_scale,
        pod_ready_delay: Duration::from_secs_f64(args.pod_ready_delay),
    };
    let sim = Sim::start(config).await?;
    sim.write_kubeconfig(&args.kubeconfig)
        .with_context(|| format!("writing kubeconfig {}", args.kubeconfig.display()))?;
    println!(
        "kube-sim listening on {} (kubeconfig: {})",
        sim.url(),
        args.kubeconfig.display()
    );
    shutdown_signal().await?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}
