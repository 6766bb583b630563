//! `spec.jobsFrom`: jobs a pool reads from ConfigMaps, parsed and combined with `spec.jobs`
//! into the one list the planner assigns.
//!
//! Pure: the caller looks each ConfigMap up (the controller in its watch cache, `kubectl swarm`
//! from the API server, `swarm-operator plan` from files) and [`resolve`] does the rest, so
//! every command reads a source the same way. A source that is missing or unreadable, or jobs
//! listed twice, make the pool [`Unresolved`]: it then decides nothing and keeps its config.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;

use k8s_openapi::api::core::v1::ConfigMap;

use crate::api::crd::{JobsFromSource, SwarmPool};
use crate::api::failure::FailureReason;
use swarm_protocol::names::JOBS_SOURCE_LABEL;

/// A source's ConfigMap, as the caller found it.
#[derive(Clone, Copy, Debug)]
pub enum Found<'a> {
    /// The ConfigMap.
    ConfigMap(&'a ConfigMap),
    /// No ConfigMap of that name in the pool's namespace.
    Missing,
    /// The ConfigMap exists but lacks [`JOBS_SOURCE_LABEL`], so the operator does not watch it.
    Unlabelled,
    /// The ConfigMap could not be read (the API server refused): why.
    Unreadable(&'a str),
}

/// The jobs listed in a source's value: one per line, surrounding whitespace trimmed; blank
/// lines and lines starting with `#` are skipped. Each with its line number (from 1).
pub fn parse(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

/// Where a job of the combined list comes from, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `spec.jobs[index]`.
    Inline {
        /// Index in `spec.jobs`.
        index: usize,
    },
    /// A line of a source.
    Source {
        /// The ConfigMap.
        config_map: String,
        /// Its key.
        key: String,
        /// Line number, from 1.
        line: usize,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Inline { index } => write!(f, "spec.jobs[{index}]"),
            Origin::Source {
                config_map,
                key,
                line,
            } => write!(f, "ConfigMap {config_map} key {key} line {line}"),
        }
    }
}

/// Why a pool's jobs cannot be resolved. Each message names the source and says what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// The ConfigMap does not exist.
    #[error(
        "ConfigMap {config_map} (spec.jobsFrom[{index}]) does not exist in namespace {namespace}: create it, for example with `kubectl create configmap {config_map} -n {namespace} --from-file={key}=jobs.txt` and `kubectl label configmap {config_map} -n {namespace} {label}=true`; until then the pool keeps its current assignment",
        label = JOBS_SOURCE_LABEL
    )]
    NotFound {
        /// Position in `spec.jobsFrom`.
        index: usize,
        /// The ConfigMap.
        config_map: String,
        /// The key it should hold.
        key: String,
        /// The pool's namespace.
        namespace: String,
    },
    /// The ConfigMap exists but is not watched.
    #[error(
        "ConfigMap {config_map} (spec.jobsFrom[{index}]) lacks the label {label}, so the operator does not watch it: `kubectl label configmap {config_map} -n {namespace} {label}=true`; until then the pool keeps its current assignment",
        label = JOBS_SOURCE_LABEL
    )]
    NotLabelled {
        /// Position in `spec.jobsFrom`.
        index: usize,
        /// The ConfigMap.
        config_map: String,
        /// The pool's namespace.
        namespace: String,
    },
    /// The ConfigMap has no such key (in `data`).
    #[error(
        "ConfigMap {config_map} (spec.jobsFrom[{index}]) has no key {key} in its data (keys: {keys}): add the jobs under {key}, one per line, or set spec.jobsFrom[{index}].key; until then the pool keeps its current assignment",
        keys = if keys.is_empty() { "none".to_owned() } else { keys.join(", ") }
    )]
    KeyNotFound {
        /// Position in `spec.jobsFrom`.
        index: usize,
        /// The ConfigMap.
        config_map: String,
        /// The key asked for.
        key: String,
        /// The keys it has, in `data` and `binaryData`.
        keys: Vec<String>,
    },
    /// The ConfigMap could not be read.
    #[error(
        "ConfigMap {config_map} (spec.jobsFrom[{index}]) cannot be read: {detail}; the operator needs get, list and watch on configmaps in namespace {namespace}; until then the pool keeps its current assignment"
    )]
    Unreadable {
        /// Position in `spec.jobsFrom`.
        index: usize,
        /// The ConfigMap.
        config_map: String,
        /// The pool's namespace.
        namespace: String,
        /// What the API server said.
        detail: String,
    },
    /// A job is listed twice over `spec.jobs` and the sources.
    #[error("job {job:?} is listed twice, in {first} and in {second}: remove one")]
    Duplicate {
        /// The job.
        job: String,
        /// Where it is listed first.
        first: Box<Origin>,
        /// Where it is listed again.
        second: Box<Origin>,
    },
}

impl Unresolved {
    /// The failure reason of unresolvable `spec.jobsFrom`: a job listed twice is invalid jobs, as in
    /// `spec.jobs`.
    pub fn failure_reason(&self) -> FailureReason {
        match self {
            Self::NotFound { .. } | Self::KeyNotFound { .. } => FailureReason::JobsSourceNotFound,
            Self::NotLabelled { .. } => FailureReason::JobsSourceNotLabelled,
            Self::Unreadable { .. } => FailureReason::JobsSourceUnreadable,
            Self::Duplicate { .. } => FailureReason::InvalidJobs,
        }
    }
}

/// The pool's jobs: `inline` (its `spec.jobs`) followed by each source's, in order. `find`
/// looks a source's ConfigMap up by name in `namespace`.
pub fn combine<'a>(
    namespace: &str,
    inline: &[String],
    sources: &[JobsFromSource],
    mut find: impl FnMut(&str) -> Found<'a>,
) -> Result<Vec<String>, Unresolved> {
    let mut jobs = inline.to_vec();
    if sources.is_empty() {
        return Ok(jobs);
    }
    let mut texts = Vec::with_capacity(sources.len());
    for (index, source) in sources.iter().enumerate() {
        texts.push(source_text(
            namespace,
            index,
            source,
            find(&source.config_map_ref.name),
        )?);
    }
    // Where each job was first seen, as indexes: a pool of 100,000 jobs would otherwise copy
    // its source's name and key for each. Sized up front, as the table would double twice.
    let listed = inline.len() + texts.iter().map(|text| parse(text).count()).sum::<usize>();
    let mut seen: HashMap<&str, Position> = HashMap::with_capacity(listed);
    jobs.reserve_exact(listed - inline.len());
    for (index, job) in inline.iter().enumerate() {
        see(&mut seen, job, Position::Inline { index }, sources)?;
    }
    for (source, text) in texts.iter().enumerate() {
        for (line, job) in parse(text) {
            see(&mut seen, job, Position::Source { source, line }, sources)?;
            jobs.push(job.to_owned());
        }
    }
    Ok(jobs)
}

/// Records where `job` is listed, or says where it was listed first.
fn see<'a>(
    seen: &mut HashMap<&'a str, Position>,
    job: &'a str,
    position: Position,
    sources: &[JobsFromSource],
) -> Result<(), Unresolved> {
    match seen.entry(job) {
        Entry::Occupied(first) => Err(Unresolved::Duplicate {
            job: job.to_owned(),
            first: Box::new(first.get().origin(sources)),
            second: Box::new(position.origin(sources)),
        }),
        Entry::Vacant(slot) => {
            slot.insert(position);
            Ok(())
        }
    }
}

/// An [`Origin`] by index: `sources[source]` rather than its names.
#[derive(Clone, Copy)]
enum Position {
    Inline { index: usize },
    Source { source: usize, line: usize },
}

impl Position {
    fn origin(self, sources: &[JobsFromSource]) -> Origin {
        match self {
            Position::Inline { index } => Origin::Inline { index },
            Position::Source { source, line } => Origin::Source {
                config_map: sources[source].config_map_ref.name.clone(),
                key: sources[source].key.clone(),
                line,
            },
        }
    }
}

/// The value of `source`'s key in its ConfigMap.
fn source_text<'a>(
    namespace: &str,
    index: usize,
    source: &JobsFromSource,
    found: Found<'a>,
) -> Result<&'a str, Unresolved> {
    let config_map = source.config_map_ref.name.clone();
    let cm = match found {
        Found::ConfigMap(cm) => cm,
        Found::Missing => {
            return Err(Unresolved::NotFound {
                index,
                config_map,
                key: source.key.clone(),
                namespace: namespace.to_owned(),
            });
        }
        Found::Unlabelled => {
            return Err(Unresolved::NotLabelled {
                index,
                config_map,
                namespace: namespace.to_owned(),
            });
        }
        Found::Unreadable(detail) => {
            return Err(Unresolved::Unreadable {
                index,
                config_map,
                namespace: namespace.to_owned(),
                detail: detail.to_owned(),
            });
        }
    };
    cm.data
        .as_ref()
        .and_then(|data| data.get(&source.key))
        .map(String::as_str)
        .ok_or_else(|| {
            let mut keys: Vec<String> = cm.data.iter().flat_map(|d| d.keys().cloned()).collect();
            keys.extend(cm.binary_data.iter().flat_map(|d| d.keys().cloned()));
            keys.sort();
            Unresolved::KeyNotFound {
                index,
                config_map,
                key: source.key.clone(),
                keys,
            }
        })
}

/// `pool` as the planner reads it: its `spec.jobs` the combined jobs (see [`combine`]). When
/// they cannot be resolved, the pool unchanged and why.
pub fn resolve<'a, 'p>(
    pool: &'p SwarmPool,
    find: impl FnMut(&str) -> Found<'a>,
) -> (Cow<'p, SwarmPool>, Option<Unresolved>) {
    if pool.spec.jobs_from.is_empty() {
        return (Cow::Borrowed(pool), None);
    }
    let namespace = pool.metadata.namespace.as_deref().unwrap_or_default();
    match combine(namespace, &pool.spec.jobs, &pool.spec.jobs_from, find) {
        Ok(jobs) => {
            let mut resolved = pool.clone();
            resolved.spec.jobs = jobs;
            (Cow::Owned(resolved), None)
        }
        Err(why) => (Cow::Borrowed(pool), Some(why)),
    }
}

/// A source as read from the API server (`None`: it does not exist): only a ConfigMap with
/// [`JOBS_SOURCE_LABEL`] is one the operator watches.
pub fn found(read: Option<&ConfigMap>) -> Found<'_> {
    match read {
        None => Found::Missing,
        Some(cm) if !is_labelled(cm) => Found::Unlabelled,
        Some(cm) => Found::ConfigMap(cm),
    }
}

/// Whether the ConfigMap carries [`JOBS_SOURCE_LABEL`].
pub fn is_labelled(cm: &ConfigMap) -> bool {
    cm.metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(JOBS_SOURCE_LABEL))
}

/// Whether `pool` reads jobs from the ConfigMap `name` (in the pool's namespace).
pub fn reads_from(pool: &SwarmPool, name: &str) -> bool {
    pool.spec
        .jobs_from
        .iter()
        .any(|source| source.config_map_ref.name == name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::crd::ConfigMapRef;

    fn source(name: &str, key: &str) -> JobsFromSource {
        JobsFromSource {
            config_map_ref: ConfigMapRef { name: name.into() },
            key: key.into(),
        }
    }

    fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    fn strings(jobs: &[&str]) -> Vec<String> {
        jobs.iter().map(|j| (*j).to_owned()).collect()
    }

    #[test]
    fn a_source_lists_one_job_per_trimmed_line_skipping_blank_lines_and_comments() {
        let text = "# shard list\n a \n\nb\t\n  # indented comment\nc d\r\n#e\n";
        let jobs: Vec<(usize, &str)> = parse(text).collect();
        assert_eq!(jobs, [(2, "a"), (4, "b"), (6, "c d")]);
        assert_eq!(parse("").count(), 0);
    }

    #[test]
    fn the_jobs_are_the_inline_ones_then_each_source_in_list_order() {
        let first = cm("first", &[("jobs", "c\nd\n")]);
        let second = cm("second", &[("list", "e\n"), ("jobs", "not read")]);
        let jobs = combine(
            "ns",
            &strings(&["a", "b"]),
            &[source("first", "jobs"), source("second", "list")],
            |name| match name {
                "first" => Found::ConfigMap(&first),
                "second" => Found::ConfigMap(&second),
                _ => Found::Missing,
            },
        );
        assert_eq!(jobs.unwrap(), strings(&["a", "b", "c", "d", "e"]));
    }

    #[test]
    fn a_job_listed_twice_across_sources_names_both_places() {
        let first = cm("first", &[("jobs", "c\n")]);
        let second = cm("second", &[("jobs", "# header\nd\nc\n")]);
        let err = combine(
            "ns",
            &strings(&["a"]),
            &[source("first", "jobs"), source("second", "jobs")],
            |name| match name {
                "first" => Found::ConfigMap(&first),
                _ => Found::ConfigMap(&second),
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "job \"c\" is listed twice, in ConfigMap first key jobs line 1 and in ConfigMap second key jobs line 3: remove one"
        );
        let inline = combine("ns", &strings(&["c"]), &[source("first", "jobs")], |_| {
            Found::ConfigMap(&first)
        })
        .unwrap_err();
        assert!(
            inline
                .to_string()
                .contains("in spec.jobs[0] and in ConfigMap first"),
            "{inline}"
        );
    }

    #[test]
    fn a_missing_source_key_or_label_says_what_to_fix_and_names_the_config_map() {
        let sources = [source("pool-jobs", "jobs")];
        let missing = combine("ns", &[], &sources, |_| Found::Missing).unwrap_err();
        let text = missing.to_string();
        assert!(
            text.starts_with(
                "ConfigMap pool-jobs (spec.jobsFrom[0]) does not exist in namespace ns"
            )
        );
        assert!(text.contains("--from-file=jobs=jobs.txt"), "{text}");
        assert!(text.contains(JOBS_SOURCE_LABEL), "{text}");

        let unlabelled = combine("ns", &[], &sources, |_| Found::Unlabelled).unwrap_err();
        assert!(
            unlabelled
                .to_string()
                .contains("kubectl label configmap pool-jobs -n ns swarm.io/jobs-source=true"),
            "{unlabelled}"
        );

        let other_key = cm("pool-jobs", &[("jobs.txt", "a\n")]);
        let no_key = combine("ns", &[], &sources, |_| Found::ConfigMap(&other_key)).unwrap_err();
        assert!(
            no_key
                .to_string()
                .starts_with("ConfigMap pool-jobs (spec.jobsFrom[0]) has no key jobs in its data (keys: jobs.txt)"),
            "{no_key}"
        );

        let refused = combine("ns", &[], &sources, |_| Found::Unreadable("forbidden")).unwrap_err();
        assert!(
            refused.to_string().contains("cannot be read: forbidden"),
            "{refused}"
        );
    }

    #[test]
    fn a_pool_without_sources_resolves_to_itself_and_one_with_a_bad_source_keeps_its_inline_jobs() {
        let mut pool = SwarmPool::new(
            "p",
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "w"}},
                "jobs": ["a"],
            }))
            .unwrap(),
        );
        pool.metadata.namespace = Some("ns".into());
        let (same, why) = resolve(&pool, |_| Found::Missing);
        assert!(matches!(same, Cow::Borrowed(_)) && why.is_none());

        pool.spec.jobs_from = vec![source("more", "jobs")];
        let (unchanged, why) = resolve(&pool, |_| Found::Missing);
        assert_eq!(unchanged.spec.jobs, strings(&["a"]));
        assert!(matches!(why, Some(Unresolved::NotFound { .. })));

        let more = cm("more", &[("jobs", "b\n")]);
        let (resolved, why) = resolve(&pool, |_| Found::ConfigMap(&more));
        assert_eq!(
            (resolved.spec.jobs.clone(), why),
            (strings(&["a", "b"]), None)
        );
        assert!(reads_from(&pool, "more") && !reads_from(&pool, "other"));
    }

    #[test]
    fn only_config_maps_with_the_label_are_sources() {
        let mut labelled = cm("x", &[]);
        assert!(!is_labelled(&labelled));
        assert!(matches!(found(Some(&labelled)), Found::Unlabelled));
        assert!(matches!(found(None), Found::Missing));
        labelled.metadata.labels = Some(BTreeMap::from([(
            JOBS_SOURCE_LABEL.to_owned(),
            "any".to_owned(),
        )]));
        assert!(is_labelled(&labelled));
        assert!(matches!(found(Some(&labelled)), Found::ConfigMap(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any text in a source: its jobs are its lines trimmed, blank lines and comments
        /// skipped, after `spec.jobs`; or the one job listed twice, named with both places.
        #[test]
        fn any_source_text_gives_its_lines_as_jobs_or_names_the_job_listed_twice(
            inline in proptest::collection::vec("[a-c]{1,2}", 0..4),
            texts in proptest::collection::vec("[a-c# \\t\\r\\n\\PC]{0,60}", 1..3),
        ) {
            let sources: Vec<_> = (0..texts.len()).map(|i| source(&format!("jobs-{i}"), "jobs.txt")).collect();
            let maps: Vec<_> = texts.iter().enumerate().map(|(i, text)| cm(&format!("jobs-{i}"), &[("jobs.txt", text.as_str())])).collect();
            let find = |name: &str| maps.iter().find(|cm| cm.metadata.name.as_deref() == Some(name)).map_or(Found::Missing, Found::ConfigMap);
            let listed: Vec<String> = inline.iter().cloned().chain(texts.iter().flat_map(|text| {
                text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned)
            })).collect();
            let unique = listed.iter().collect::<std::collections::HashSet<_>>().len() == listed.len();
            match combine("ns", &inline, &sources, find) {
                Ok(jobs) => {
                    proptest::prop_assert!(unique);
                    proptest::prop_assert_eq!(jobs, listed);
                }
                Err(Unresolved::Duplicate { job, first, second }) => {
                    proptest::prop_assert!(!unique);
                    proptest::prop_assert!(listed.iter().filter(|j| **j == job).count() >= 2);
                    proptest::prop_assert_ne!(first, second);
                }
                Err(other) => proptest::prop_assert!(false, "{other}"),
            }
        }
    }
}
