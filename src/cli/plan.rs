//! `swarm-operator plan`: prints the `config.yml` the operator would write.

use std::path::PathBuf;

use anyhow::{Context, Result};
use swarm_assign::worker_config::WorkerConfig;
use swarm_assign::{PlanRequest, Strategy};

/// Arguments of `swarm-operator plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// SwarmPool manifest (YAML), `-` for stdin.
    #[arg(long)]
    pub pool: PathBuf,
    /// Name of the worker StatefulSet.
    #[arg(long)]
    pub statefulset: String,
    /// Number of workers.
    #[arg(long)]
    pub replicas: usize,
    /// The `config.yml` now in the ConfigMap.
    #[arg(long)]
    pub previous: Option<PathBuf>,
}

#[derive(serde::Deserialize)]
struct Manifest {
    spec: ManifestSpec,
}

#[derive(serde::Deserialize)]
struct ManifestSpec {
    jobs: Vec<String>,
    #[serde(default)]
    strategy: Strategy,
}

/// Runs the subcommand.
pub fn run(args: &PlanArgs) -> Result<()> {
    let text = if args.pool.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the pool from stdin")?
    } else {
        std::fs::read_to_string(&args.pool)
            .with_context(|| format!("reading {}", args.pool.display()))?
    };
    let manifest: Manifest = serde_yaml::from_str(&text).context("parsing the pool manifest")?;
    let previous = match &args.previous {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            WorkerConfig::parse(&text).ok()
        }
        None => None,
    };
    let outcome = swarm_assign::plan(&PlanRequest {
        statefulset: &args.statefulset,
        replicas: args.replicas,
        jobs: &manifest.spec.jobs,
        strategy: manifest.spec.strategy,
        previous: previous.as_ref(),
    })?;
    print!("{}", outcome.config.render());
    Ok(())
}
