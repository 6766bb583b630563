//! `swarm-operator plan`: prints the `config.yml` the operator would write for a pool, without a
//! cluster: the config the pool settles on once the change is rolled out (under the `Exclusive`
//! handoff a move takes two writes, the revoke and the grant; `--explain` shows both).
//!
//! ```text
//! swarm-operator plan --pool <FILE|-> --statefulset <NAME> --replicas <N>
//!                     [--jobs-from <FILE>]... [--previous <FILE>]
//!                     [--strategy sticky|consistent|contiguous]
//!                     [--handoff exclusive|overlap] [--explain]
//! ```

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use swarm_assign::{ConfigRequest, NextConfig, Qos, Strategy};
use swarm_protocol::config::WorkerConfig;

use super::handoff_writes::{HandoffWrite, handoff_writes, pool_spec};
use k8s_openapi::api::core::v1::ConfigMap;

use crate::api::crd::{Handoff, JobsFromSource, RolloutSpec};
use crate::state::config_map::CONFIG_MAP_MAX_BYTES;
use crate::state::jobs_source::{self, Found, Unresolved};
use swarm_protocol::config::CONFIG_KEY;

/// The most workers `--replicas` accepts: far more than one ConfigMap can describe, small
/// enough that a typo cannot exhaust memory.
const MAX_REPLICAS: u64 = 100_000;

/// Arguments of `swarm-operator plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// SwarmPool manifest (YAML); only `spec.jobs`, `spec.jobsFrom`, `spec.strategy`,
    /// `spec.qos` and `spec.rollout.handoff` are read. ConfigMap documents in it are sources
    /// for `spec.jobsFrom`. `-` reads standard input.
    #[arg(long, value_name = "FILE|-")]
    pub pool: PathBuf,
    /// ConfigMap manifests (YAML, one or more documents) that the pool's `spec.jobsFrom`
    /// names; their jobs are read as the operator reads them (the watch label is not needed
    /// here).
    #[arg(long, value_name = "FILE")]
    pub jobs_from: Vec<PathBuf>,
    /// Name of the worker StatefulSet; workers are the pods `<NAME>-0` .. `<NAME>-(N-1)`.
    #[arg(long, value_name = "NAME")]
    pub statefulset: String,
    /// Number of workers (the StatefulSet's replicas); 0 leaves every job unassigned.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(..=MAX_REPLICAS))]
    pub replicas: u64,
    /// The `config.yml` now in the ConfigMap; without it, the first config is planned.
    #[arg(long, value_name = "FILE")]
    pub previous: Option<PathBuf>,
    /// Overrides the pool's `spec.strategy`.
    #[arg(long, value_enum)]
    pub strategy: Option<StrategyArg>,
    /// Overrides the pool's `spec.rollout.handoff`.
    #[arg(long, value_enum)]
    pub handoff: Option<HandoffArg>,
    /// Also print to standard error what the plan changes: loads, jobs moved, workers touched,
    /// and the writes of the handoff.
    #[arg(long)]
    pub explain: bool,
}

/// `--handoff` values, the lower-case names of [`Handoff`].
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffArg {
    /// Revoke a moving job, grant it once its old worker is gone (the default).
    Exclusive,
    /// Grant a moving job at once.
    Overlap,
}

impl From<HandoffArg> for Handoff {
    fn from(arg: HandoffArg) -> Self {
        match arg {
            HandoffArg::Exclusive => Handoff::Exclusive,
            HandoffArg::Overlap => Handoff::Overlap,
        }
    }
}

/// `--strategy` values, the lower-case names of [`Strategy`].
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyArg {
    /// Balanced, moves as few jobs as possible (the default).
    Sticky,
    /// Jump consistent hash of the job name.
    Consistent,
    /// Jobs in spec order, in contiguous chunks.
    Contiguous,
}

impl From<StrategyArg> for Strategy {
    fn from(arg: StrategyArg) -> Self {
        match arg {
            StrategyArg::Sticky => Strategy::Sticky,
            StrategyArg::Consistent => Strategy::Consistent,
            StrategyArg::Contiguous => Strategy::Contiguous,
        }
    }
}

/// The part of a SwarmPool manifest that planning reads; other fields are ignored.
#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    metadata: ManifestMetadata,
    spec: ManifestSpec,
}

#[derive(Deserialize, Default)]
struct ManifestMetadata {
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestSpec {
    jobs: Vec<String>,
    #[serde(default)]
    jobs_from: Vec<JobsFromSource>,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default)]
    qos: Option<Qos>,
    #[serde(default)]
    rollout: RolloutSpec,
}

/// Runs `swarm-operator plan`: the config on standard output, warnings and `--explain` on
/// standard error. Fails with one line naming the problem on unreadable input or invalid jobs.
pub fn run(args: &PlanArgs) -> Result<()> {
    let (manifest, mut config_maps) = read_pool(&args.pool)?;
    for path in &args.jobs_from {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --jobs-from {}", path.display()))?;
        config_maps.extend(config_maps_in(&text, &path.display().to_string())?);
    }
    let jobs = pool_jobs(&manifest, &config_maps)
        .with_context(|| format!("invalid pool {}", args.pool.display()))?;
    let strategy = args.strategy.map_or(manifest.spec.strategy, Strategy::from);
    let mode = args
        .handoff
        .map_or(manifest.spec.rollout.handoff, Handoff::from);
    let previous = match &args.previous {
        Some(path) => read_previous(path)?,
        None => None,
    };
    let replicas =
        usize::try_from(args.replicas).context("--replicas does not fit this platform")?;
    let qos = manifest.spec.qos.unwrap_or_default();
    let outcome = swarm_assign::next_config(&ConfigRequest {
        statefulset: &args.statefulset,
        replicas,
        jobs: &jobs,
        strategy,
        previous: previous.as_ref(),
        qos: Some(&qos),
    })
    .with_context(|| format!("invalid pool {}", args.pool.display()))?;
    let spec = pool_spec(jobs, strategy, qos.clone(), mode);
    let steps = handoff_writes(spec, &args.statefulset, replicas, previous.as_ref())?;
    let settled = &steps.last().expect("at least one step").config;

    let text = settled.render();
    let size = CONFIG_KEY.len() + text.len();
    if size > CONFIG_MAP_MAX_BYTES {
        eprintln!(
            "warning: config.yml is {size} bytes, more than the {CONFIG_MAP_MAX_BYTES} the operator writes into one ConfigMap: only a pool with rollout.policy: Acknowledge (one ConfigMap per worker) can have it"
        );
    }
    if args.explain {
        eprint!(
            "{}",
            explain(strategy, &qos, &outcome, mode, &steps, previous.as_ref())
        );
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to standard output")
}

/// Reads the pool manifest from `path` (`-`: standard input), and the ConfigMaps beside it.
fn read_pool(path: &Path) -> Result<(Manifest, Vec<ConfigMap>)> {
    let (text, name) = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the pool from standard input")?;
        (text, "standard input".to_owned())
    } else {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --pool {}", path.display()))?;
        (text, path.display().to_string())
    };
    Ok((parse_pool(&text, &name)?, config_maps_in(&text, &name)?))
}

/// The ConfigMap documents of a (possibly multi-document) manifest.
fn config_maps_in(text: &str, name: &str) -> Result<Vec<ConfigMap>> {
    let mut config_maps = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(document)
            .with_context(|| format!("{name} is not YAML"))?;
        if value.get("kind").and_then(serde_yaml::Value::as_str) == Some("ConfigMap") {
            config_maps.push(
                serde_yaml::from_value(value)
                    .with_context(|| format!("{name} holds a ConfigMap that cannot be read"))?,
            );
        }
    }
    Ok(config_maps)
}

/// The pool's jobs: `spec.jobs`, then those of `spec.jobsFrom` from `config_maps` (by name),
/// combined as the operator combines them.
fn pool_jobs(manifest: &Manifest, config_maps: &[ConfigMap]) -> Result<Vec<String>> {
    let namespace = manifest.metadata.namespace.as_deref().unwrap_or("default");
    let jobs = jobs_source::combine(
        namespace,
        &manifest.spec.jobs,
        &manifest.spec.jobs_from,
        |name| {
            config_maps
                .iter()
                .find(|cm| cm.metadata.name.as_deref() == Some(name))
                .map_or(Found::Missing, Found::ConfigMap)
        },
    );
    jobs.map_err(|why| match why {
        Unresolved::NotFound { config_map, .. } => anyhow::anyhow!(
            "spec.jobsFrom names ConfigMap {config_map}: pass its manifest with --jobs-from <FILE> (kubectl get configmap {config_map} -o yaml)"
        ),
        other => other.into(),
    })
}

/// The one SwarmPool of a (possibly multi-document) manifest; a document without `kind` counts
/// as a SwarmPool.
fn parse_pool(text: &str, name: &str) -> Result<Manifest> {
    let mut pools = Vec::new();
    let mut others = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(document)
            .with_context(|| format!("{name} is not YAML"))?;
        match value.get("kind").map(serde_yaml::Value::as_str) {
            _ if value.is_null() => {}
            None | Some(Some("SwarmPool")) => pools.push(index),
            Some(kind) => others.push(kind.unwrap_or("non-string kind").to_owned()),
        }
    }
    match pools[..] {
        [index] => {
            // Read the document again from text so errors name the field path and line.
            let document = serde_yaml::Deserializer::from_str(text)
                .nth(index)
                .context("the document just read")?;
            Manifest::deserialize(document)
                .with_context(|| format!("{name} is not a SwarmPool manifest"))
        }
        [] if others.is_empty() => bail!("{name} is empty"),
        [] => bail!("{name} holds no SwarmPool, only {}", others.join(", ")),
        _ => bail!("{name} holds {} SwarmPools; pass one", pools.len()),
    }
}

/// Reads `--previous`. A file that cannot be opened is an error; one whose text is not a worker
/// config is reported and treated as no current config, as the operator does.
fn read_previous(path: &Path) -> Result<Option<WorkerConfig>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --previous {}", path.display()))?;
    match WorkerConfig::parse(&text) {
        Ok(config) => Ok(Some(config)),
        Err(error) => {
            eprintln!(
                "warning: --previous {}: {error}; planning as if there were no current config",
                path.display()
            );
            Ok(None)
        }
    }
}

/// The `--explain` report: the change from `previous` to where the pool settles (`outcome`
/// is that change in one step), then the writes of the handoff.
fn explain(
    strategy: Strategy,
    qos: &Qos,
    outcome: &NextConfig,
    mode: Handoff,
    steps: &[HandoffWrite],
    previous: Option<&WorkerConfig>,
) -> String {
    let movement = &outcome.movement;
    let settled = &steps.last().expect("at least one step").config;
    let changed = previous.is_none_or(|p| p.version != settled.version);
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "strategy: {strategy}");
    let _ = writeln!(
        out,
        "version: {}{}",
        settled.version,
        if changed {
            " (changed)"
        } else {
            " (unchanged)"
        }
    );
    let _ = writeln!(out, "jobs: {}", movement.jobs);
    let _ = writeln!(out, "workers: {}", movement.workers);
    let _ = writeln!(out, "min load: {}", movement.min_load);
    let _ = writeln!(out, "max load: {}", movement.max_load);
    let _ = writeln!(out, "jobs moved: {}", movement.jobs_moved);
    let _ = writeln!(
        out,
        "workers touched: {}{}",
        movement.workers_touched.len(),
        if movement.workers_touched.is_empty() {
            String::new()
        } else {
            format!(" ({})", movement.workers_touched.join(", "))
        }
    );
    explain_loads(&mut out, qos, outcome);
    explain_writes(&mut out, mode, steps);
    out
}

/// The `--explain` lines on each worker's load and the jobs left without a worker.
fn explain_loads(out: &mut String, qos: &Qos, outcome: &NextConfig) {
    let movement = &outcome.movement;
    if !outcome.config.is_empty() {
        let _ = writeln!(out, "jobs per worker:");
    }
    let weighted = qos.is_weighted();
    for (ordinal, (pod, workload)) in outcome.config.workloads().enumerate() {
        let mut line = format!("  {pod}: {}", workload.jobs.len());
        if weighted {
            let weight: u64 = workload.jobs.iter().map(|job| qos.weight(job)).sum();
            let _ = write!(line, " (weight {weight})");
        }
        if outcome.dedicated_workers.binary_search(&ordinal).is_ok() {
            line.push_str(" dedicated");
        }
        let _ = writeln!(out, "{line}");
    }
    if !outcome.dedicated_unmet.is_empty() && movement.workers > 0 {
        let _ = writeln!(
            out,
            "dedicated jobs without a worker of their own: {} (too few workers)",
            outcome.dedicated_unmet.len()
        );
        for job in &outcome.dedicated_unmet {
            let _ = writeln!(out, "  {job}");
        }
    }
    if !movement.unassigned.is_empty() {
        let _ = writeln!(
            out,
            "unassigned jobs: {} (no workers)",
            movement.unassigned.len()
        );
        for job in &movement.unassigned {
            let _ = writeln!(out, "  {job}");
        }
    }
}

/// The `--explain` lines on the handoff's config writes.
fn explain_writes(out: &mut String, mode: Handoff, steps: &[HandoffWrite]) {
    let mode_name = match mode {
        Handoff::Exclusive => "Exclusive",
        Handoff::Overlap => "Overlap",
    };
    let _ = writeln!(out, "handoff: {mode_name}, {} writes", steps.len());
    for step in steps {
        let mut what = Vec::new();
        if step.revoked > 0 {
            what.push(format!(
                "revokes {} jobs from {}",
                step.revoked,
                step.revoked_from.join(", ")
            ));
        }
        if step.granted > 0 {
            what.push(format!("grants {} jobs", step.granted));
        }
        let in_transit: usize = step.config.transit().map(|(_, jobs)| jobs.len()).sum();
        if in_transit > 0 {
            what.push(format!("{in_transit} in transit"));
        }
        if what.is_empty() {
            what.push("the assignment".to_owned());
        }
        let _ = writeln!(
            out,
            "  version {}: {}",
            step.config.version,
            what.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_from_are_read_from_config_maps_beside_the_pool_or_named_as_missing() {
        let text = "apiVersion: swarm.io/v1alpha1\nkind: SwarmPool\nmetadata: {name: p}\nspec:\n  selector: {matchLabels: {app: w}}\n  jobs: [a]\n  jobsFrom:\n  - configMapRef: {name: more}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: more}\ndata:\n  jobs: |\n    # more jobs\n    b\n    c\n";
        let manifest = parse_pool(text, "pool.yaml").unwrap();
        let config_maps = config_maps_in(text, "pool.yaml").unwrap();
        assert_eq!(pool_jobs(&manifest, &config_maps).unwrap(), ["a", "b", "c"]);
        let missing = pool_jobs(&manifest, &[]).unwrap_err().to_string();
        assert!(
            missing.contains("ConfigMap more") && missing.contains("--jobs-from"),
            "{missing}"
        );
    }

    fn outcome(jobs: &[&str], replicas: usize, previous: Option<&WorkerConfig>) -> NextConfig {
        let jobs: Vec<String> = jobs.iter().map(|job| job.to_string()).collect();
        swarm_assign::next_config(&ConfigRequest {
            statefulset: "w",
            replicas,
            jobs: &jobs,
            strategy: Strategy::Sticky,
            previous,
            qos: None,
        })
        .expect("valid jobs")
    }

    fn steps(
        mode: Handoff,
        jobs: &[&str],
        replicas: usize,
        previous: Option<&WorkerConfig>,
    ) -> Vec<HandoffWrite> {
        let jobs: Vec<String> = jobs.iter().map(|job| job.to_string()).collect();
        handoff_writes(spec(jobs, &Qos::default(), mode), "w", replicas, previous)
            .expect("the pool settles")
    }

    fn spec(jobs: Vec<String>, qos: &Qos, handoff: Handoff) -> crate::api::crd::SwarmPoolSpec {
        pool_spec(jobs, Strategy::Sticky, qos.clone(), handoff)
    }

    #[test]
    fn explain_lists_loads_movement_per_worker_counts_and_the_handoff_writes() {
        let jobs = ["a", "b", "c"];
        let first = outcome(&jobs, 1, None);
        let second = outcome(&jobs, 2, Some(&first.config));
        let exclusive = steps(Handoff::Exclusive, &jobs, 2, Some(&first.config));
        let text = explain(
            Strategy::Sticky,
            &Qos::default(),
            &second,
            Handoff::Exclusive,
            &exclusive,
            Some(&first.config),
        );
        assert_eq!(
            text,
            "strategy: Sticky\nversion: 3 (changed)\njobs: 3\nworkers: 2\nmin load: 1\nmax load: 2\n\
             jobs moved: 1\nworkers touched: 2 (w-0, w-1)\njobs per worker:\n  w-0: 2\n  w-1: 1\n\
             handoff: Exclusive, 2 writes\n  version 2: revokes 1 jobs from w-0, 1 in transit\n\
             \x20 version 3: grants 1 jobs\n"
        );
        let overlap = steps(Handoff::Overlap, &jobs, 2, Some(&first.config));
        assert_eq!(overlap.len(), 1);
        assert_eq!(
            overlap[0].config, second.config,
            "Overlap writes the target at once"
        );
    }

    #[test]
    fn explain_shows_each_workers_weight_and_marks_dedicated_workers_and_unmet_jobs() {
        let jobs: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let qos = Qos {
            dedicated: vec!["a".into(), "e".into()],
            weights: [("b".to_owned(), 3)].into(),
        };
        let planned = |replicas| {
            let outcome = swarm_assign::next_config(&ConfigRequest {
                statefulset: "w",
                replicas,
                jobs: &jobs,
                strategy: Strategy::Sticky,
                previous: None,
                qos: Some(&qos),
            })
            .expect("valid pool");
            let steps = handoff_writes(
                spec(jobs.clone(), &qos, Handoff::Exclusive),
                "w",
                replicas,
                None,
            )
            .expect("the pool settles");
            explain(
                Strategy::Sticky,
                &qos,
                &outcome,
                Handoff::Exclusive,
                &steps,
                None,
            )
        };
        let roomy = planned(3);
        assert!(
            roomy.contains(
                "jobs per worker:\n  w-0: 1 (weight 1) dedicated\n  w-1: 1 (weight 1) dedicated\n  w-2: 3 (weight 5)\n"
            ),
            "{roomy}"
        );
        assert!(!roomy.contains("without a worker"), "{roomy}");
        let short = planned(2);
        assert!(
            short.contains("  w-0: 1 (weight 1) dedicated\n  w-1: 4 (weight 6)\n"),
            "{short}"
        );
        assert!(
            short.contains(
                "dedicated jobs without a worker of their own: 1 (too few workers)\n  e\n"
            ),
            "{short}"
        );
    }

    #[test]
    fn explain_with_no_workers_lists_every_job_as_unassigned() {
        let none = outcome(&["a", "b"], 0, None);
        let written = steps(Handoff::Exclusive, &["a", "b"], 0, None);
        let text = explain(
            Strategy::Sticky,
            &Qos::default(),
            &none,
            Handoff::Exclusive,
            &written,
            None,
        );
        assert!(text.contains("workers: 0\n"), "{text}");
        assert!(text.contains("max load: 0\njobs moved: 0\nworkers touched: 0\nunassigned jobs: 2 (no workers)\n  a\n  b\n"), "{text}");
    }

    #[test]
    fn the_swarmpool_document_of_a_bundle_is_used() {
        let text = "kind: Service\nspec: {}\n---\nkind: SwarmPool\nspec:\n  jobs: [a]\n  strategy: Contiguous\n---\n";
        let manifest = parse_pool(text, "bundle.yaml").expect("one pool");
        assert_eq!(manifest.spec.jobs, ["a"]);
        assert_eq!(manifest.spec.strategy, Strategy::Contiguous);
        let manifest = parse_pool("spec:\n  jobs: []\n", "bare.yaml").expect("no kind is fine");
        assert_eq!(manifest.spec.strategy, Strategy::Sticky);
    }

    #[test]
    fn manifests_without_exactly_one_swarmpool_are_refused_naming_what_they_hold() {
        let error = |text| format!("{:#}", parse_pool(text, "f.yaml").err().expect("refused"));
        assert_eq!(
            error("kind: Service\n---\nkind: StatefulSet\n"),
            "f.yaml holds no SwarmPool, only Service, StatefulSet"
        );
        assert_eq!(
            error("kind: SwarmPool\nspec: {jobs: []}\n---\nkind: SwarmPool\nspec: {jobs: []}\n"),
            "f.yaml holds 2 SwarmPools; pass one"
        );
        assert_eq!(error(""), "f.yaml is empty");
        assert!(error("kind: SwarmPool\nspec: {}\n").contains("missing field `jobs`"));
        assert!(
            error("spec: {jobs: [a], strategy: sticky}")
                .contains("spec.strategy: unknown variant `sticky`")
        );
        assert!(error("spec: [").starts_with("f.yaml is not YAML"));
    }
}
