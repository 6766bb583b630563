//! `kubectl-swarm`: the kubectl plugin. On PATH, `kubectl swarm ...` runs it with the current
//! kubeconfig. Only fetching and printing here; the reports live in `swarm_operator::plugin`.
//!
//! Exit codes: 0 answered; 1 the pool, its config or the job does not exist; 2 bad usage;
//! 3 no cluster configured, unreachable, or the request was refused.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt as _};
use swarm_operator::api::crd::{RolloutPolicy, SwarmPool};
use swarm_operator::plugin::output::{self, Format};
use swarm_operator::plugin::{self, PluginError, PoolView, locate, scale_plan, status};
use swarm_operator::state::lease_summary::LeaseSummary;
use swarm_operator::state::pod_summary::PodSummary;
use swarm_operator::state::{jobs_source, worker_slices};
use swarm_protocol::names::{POOL_LABEL, WORKER_LABEL};

/// Inspect SwarmPools: where each job runs, what each worker holds, what a scale would move.
#[derive(Parser, Debug)]
#[command(name = "kubectl swarm", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

/// The kubectl flags every command takes.
#[derive(Args, Debug)]
struct ClusterArgs {
    /// Namespace of the pool [default: the current context's namespace].
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Path to the kubeconfig file [default: KUBECONFIG, then ~/.kube/config].
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use [default: the current context].
    #[arg(long, global = true)]
    context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t)]
    output: Format,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The pool's phase and config version, then each worker: ready, jobs, the version its job
    /// set last changed, whether it still has to restart, jobs in transit.
    Status {
        /// The SwarmPool.
        pool: String,
    },
    /// The pool and worker holding a job, or whether it is in transit or unassigned.
    Where {
        /// The job, as listed in `spec.jobs` or a `spec.jobsFrom` ConfigMap.
        job: String,
        /// Search every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// What scaling the pool's workers to N would do: jobs moved, workers restarted, jobs per
    /// worker.
    Plan {
        /// The SwarmPool.
        pool: String,
        /// The number of workers to plan for.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(..=100_000))]
        replicas: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<String, PluginError> {
    let cluster = connect(&cli.cluster).await?;
    let client = cluster.client.clone();
    let namespace = cli
        .cluster
        .namespace
        .clone()
        .unwrap_or_else(|| cluster.namespace.clone());
    let format = cli.cluster.output;
    match cli.command {
        Command::Status { pool } => {
            let view = fetch(&cluster, &namespace, &pool).await?;
            let report = status::report(&view)?;
            Ok(output::print(format, &report, status::render))
        }
        Command::Where {
            job,
            all_namespaces,
        } => {
            let pools: Api<SwarmPool> = if all_namespaces {
                Api::all(client.clone())
            } else {
                Api::namespaced(client.clone(), &namespace)
            };
            let listed = pools
                .list(&ListParams::default())
                .await
                .map_err(|e| cluster.error(&e, "list SwarmPools"))?;
            let mut views = Vec::new();
            for pool in listed {
                // A pool whose sources cannot be read is searched by its own jobs only.
                let pool = match resolve_jobs(&cluster, pool.clone()).await {
                    Ok(resolved) => resolved,
                    Err(PluginError::JobsFrom { detail, .. }) => {
                        eprintln!("warning: {detail}");
                        pool
                    }
                    Err(error) => return Err(error),
                };
                let ns = pool.metadata.namespace.clone().unwrap_or_default();
                let (config_map, worker_config_maps) =
                    read_config_maps(&cluster, &ns, &pool).await?;
                views.push(PoolView {
                    pool,
                    config_map,
                    worker_config_maps,
                    pods: Vec::new(),
                    leases: Vec::new(),
                });
            }
            let scope = if all_namespaces {
                "in any namespace".to_owned()
            } else {
                format!("in namespace {namespace}")
            };
            let found = locate::require_found(locate::locate(&views, &job), &job, &scope)?;
            Ok(output::print(format, &found, |found| locate::render(found)))
        }
        Command::Plan { pool, replicas } => {
            let view = fetch(&cluster, &namespace, &pool).await?;
            let replicas = usize::try_from(replicas).expect("at most 100000");
            let plan = scale_plan::predict(&view, replicas)?;
            Ok(output::print(format, &plan, scale_plan::render))
        }
    }
}

/// The cluster the kubeconfig names.
struct Cluster {
    client: Client,
    /// The context's namespace.
    namespace: String,
    /// The API server's URL, for error messages.
    server: String,
}

impl Cluster {
    /// One line saying what could not be done and why, from a client error.
    fn error(&self, error: &kube::Error, what: &str) -> PluginError {
        let why = match error {
            kube::Error::Api(status) if status.code == 404 => format!(
                "{} (is the SwarmPool CRD installed? kubectl get crd swarmpools.swarm.io)",
                status.message
            ),
            kube::Error::Api(status) => status.message.clone(),
            other => {
                let mut chain = vec![other.to_string()];
                let mut source = std::error::Error::source(other);
                while let Some(cause) = source {
                    let text = cause.to_string();
                    if !chain.iter().any(|seen| seen.contains(&text)) {
                        chain.push(text);
                    }
                    source = cause.source();
                }
                format!(
                    "no answer from the API server {}: {}",
                    self.server,
                    chain.join(": ")
                )
            }
        };
        PluginError::Cluster(format!("cannot {what}: {why}"))
    }
}

/// A client for the kubeconfig and context the flags name.
async fn connect(args: &ClusterArgs) -> Result<Cluster, PluginError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                PluginError::Cluster(format!("cannot read --kubeconfig {}: {e}", path.display()))
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| {
        PluginError::Cluster(format!(
            "no usable kubeconfig ({e}); set KUBECONFIG or pass --kubeconfig"
        ))
    })?;
    let namespace = config.default_namespace.clone();
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|e| PluginError::Cluster(format!("cannot build a client: {e}")))?;
    Ok(Cluster {
        client,
        namespace,
        server,
    })
}

/// The pool, its ConfigMap and the pods of its namespace.
async fn fetch(cluster: &Cluster, namespace: &str, name: &str) -> Result<PoolView, PluginError> {
    let client = &cluster.client;
    // Not `get_opt`: a resource the API server does not serve (no CRD) is a 404 too, and must
    // not read as a missing pool.
    let pool = match Api::<SwarmPool>::namespaced(client.clone(), namespace)
        .get(name)
        .await
    {
        Ok(pool) => pool,
        Err(kube::Error::Api(status)) if plugin::names_missing_object(&status, name) => {
            return Err(PluginError::NoPool {
                namespace: namespace.to_owned(),
                pool: name.to_owned(),
            });
        }
        Err(e) => return Err(cluster.error(&e, "read the SwarmPool")),
    };
    let pool = resolve_jobs(cluster, pool).await?;
    let (config_map, worker_config_maps) = read_config_maps(cluster, namespace, &pool).await?;
    let pods = Api::<PodSummary>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error(&e, "list pods"))?
        .items;
    let leases = read_leases(cluster, namespace, &pool).await?;
    Ok(PoolView {
        pool,
        config_map,
        worker_config_maps,
        pods,
        leases,
    })
}

/// The workers' Leases of an `Acknowledge` pool: what each acknowledged. A user who may not
/// list Leases still gets the rest of the status.
async fn read_leases(
    cluster: &Cluster,
    namespace: &str,
    pool: &SwarmPool,
) -> Result<Vec<LeaseSummary>, PluginError> {
    if pool.spec.rollout.policy != RolloutPolicy::Acknowledge {
        return Ok(Vec::new());
    }
    let selector = format!("{POOL_LABEL}={}", pool.name_any());
    match Api::<LeaseSummary>::namespaced(cluster.client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            eprintln!(
                "warning: cannot list Leases in {namespace}: acknowledged versions not shown"
            );
            Ok(Vec::new())
        }
        Err(e) => Err(cluster.error(&e, "list the workers' Leases")),
    }
}

/// The pool's ConfigMap, and in the per-worker layout (an `index.yml`) the workers' own.
async fn read_config_maps(
    cluster: &Cluster,
    namespace: &str,
    pool: &SwarmPool,
) -> Result<(Option<ConfigMap>, Vec<ConfigMap>), PluginError> {
    let api = Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace);
    let config_map = api
        .get_opt(&pool.config_map_name())
        .await
        .map_err(|e| cluster.error(&e, "read the pool's ConfigMap"))?;
    let indexed = config_map
        .as_ref()
        .is_some_and(|cm| worker_slices::index_of(cm).is_some());
    if !indexed {
        return Ok((config_map, Vec::new()));
    }
    let selector = format!("{POOL_LABEL}={},{WORKER_LABEL}", pool.name_any());
    let workers = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| cluster.error(&e, "list the workers' ConfigMaps"))?
        .items;
    Ok((config_map, workers))
}

/// The pool with its `spec.jobsFrom` resolved into `spec.jobs`, from the ConfigMaps as the API
/// server has them, the way the operator resolves it.
async fn resolve_jobs(cluster: &Cluster, pool: SwarmPool) -> Result<SwarmPool, PluginError> {
    if pool.spec.jobs_from.is_empty() {
        return Ok(pool);
    }
    let namespace = pool.metadata.namespace.clone().unwrap_or_default();
    let api = Api::<ConfigMap>::namespaced(cluster.client.clone(), &namespace);
    let mut read = BTreeMap::new();
    for source in &pool.spec.jobs_from {
        let name = &source.config_map_ref.name;
        let cm = api
            .get_opt(name)
            .await
            .map_err(|e| cluster.error(&e, &format!("read ConfigMap {name} (spec.jobsFrom)")))?;
        read.insert(name.clone(), cm);
    }
    let (resolved, unresolved) = jobs_source::resolve(&pool, |name| {
        jobs_source::found(read.get(name).and_then(Option::as_ref))
    });
    match unresolved {
        None => Ok(resolved.into_owned()),
        Some(why) => Err(PluginError::JobsFrom {
            namespace,
            pool: pool.metadata.name.clone().unwrap_or_default(),
            detail: why.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use clap::error::ErrorKind;
    use proptest::prelude::*;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-swarm").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_replica_count_out_of_range_is_refused_naming_the_flag() {
        let error = parse(&["plan", "p", "--replicas", "100001"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ValueValidation);
        assert!(error.to_string().contains("--replicas"), "{error}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any arguments parse, or are refused with a message, never a panic; an invalid value
        /// is refused naming its flag or argument.
        #[test]
        fn any_arguments_parse_or_are_refused_saying_what_is_wrong(
            args in prop::collection::vec(prop_oneof![
                Just("status"), Just("where"), Just("plan"), Just("--replicas"), Just("-n"),
                Just("-o"), Just("json"), Just("yaml"), Just("-A"), Just("--"), Just("--context"),
            ].prop_map(str::to_owned).boxed().prop_union("[a-z0-9=-]{0,8}|\\PC{0,8}".boxed()), 0..6),
        ) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(error) = parse(&args) {
                let message = error.to_string();
                prop_assert!(!message.trim().is_empty());
                if error.kind() == ErrorKind::InvalidValue || error.kind() == ErrorKind::ValueValidation {
                    prop_assert!(message.contains("--") || message.contains('<'), "{}", message);
                }
            }
        }
    }
}
