//! Property tests of the readers of texts others write (`config.yml`, `index.yml`): any text
//! is read or refused, never a panic, and a refusal says what is wrong; texts built from the
//! forms the protocol allows (docs/worker-protocol.md, "Reading config.yml") read as it says.
//! The Go worker's fuzz targets and the Python worker's Hypothesis tests hold the same rules.

use std::collections::BTreeMap;

use proptest::prelude::*;
use swarm_protocol::config::{WorkerConfig, Workload};
use swarm_protocol::slices::Index;

/// Text made of YAML's punctuation, so that arbitrary input reaches the parser's corners.
fn yamlish() -> impl Strategy<Value = String> {
    "[-\\[\\]{}:,#&*!|>'\"%@ \\n\\tavw0-9~.+]{0,120}"
}

/// A version as written, and what it reads as (`None`: refused).
fn version() -> impl Strategy<Value = (Option<String>, Option<u64>)> {
    prop_oneof![
        Just((None, Some(0))),
        prop_oneof![Just("~"), Just("null"), Just("NULL"), Just("")]
            .prop_map(|null| (Some(null.to_owned()), Some(0))),
        any::<u64>().prop_map(|n| (Some(n.to_string()), Some(n))),
        any::<u64>().prop_map(|n| (Some(format!("+0x{n:x}")), Some(n))),
        any::<u64>().prop_map(|n| (Some(format!("0o{n:o}")), Some(n))),
        any::<u64>().prop_map(|n| (Some(format!("!!str 0b{n:b}")), Some(n))),
        any::<u64>().prop_map(|n| (Some(format!("\"{n}\"")), None)),
        (1_u64..).prop_map(|n| (Some(format!("-{n}")), None)),
        (1_u64..).prop_map(|n| (Some(format!("0{n}")), None)),
        any::<u64>().prop_map(|n| (Some(format!("{n}.5")), None)),
        any::<u64>().prop_map(|n| (Some(format!("[{n}]")), None)),
        (1_u64..=u64::MAX).prop_map(|n| (
            Some(format!("{}", u128::from(n) + u128::from(u64::MAX))),
            None
        )),
        Just((Some("true".to_owned()), None)),
    ]
}

/// A name as written in a block list item or a mapping key, and the name it reads as.
fn name() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        "[a-z]([a-z0-9:_.-]{0,10}[a-z0-9])?".prop_map(|n| (n.clone(), n)),
        "\\PC{0,12}".prop_map(|n| (serde_json::to_string(&n).unwrap(), n)),
        prop_oneof![
            Just("1"),
            Just("010"),
            Just("0x1f"),
            Just("1.5"),
            Just("yes"),
            Just("~"),
            Just("true")
        ]
        .prop_map(|n| (n.to_owned(), n.to_owned())),
        "[a-z]{1,8}".prop_map(|n| (format!("!!int {n}"), n)),
    ]
}

/// One entry of `workloads`: its pod and jobs as written and as read; a `bad` entry holds
/// what makes the text unusable.
#[derive(Clone, Debug)]
struct Entry {
    pod: (String, String),
    version: (Option<String>, Option<u64>),
    jobs: Vec<(String, String)>,
    bad: Option<&'static str>,
}

fn entry() -> impl Strategy<Value = Entry> {
    let bad = prop_oneof![
        8 => Just(None),
        1 => Just(Some("jobs: a")),
        1 => Just(Some("jobs: {a: b}")),
        1 => Just(Some("jobs: [[a]]")),
    ];
    (name(), version(), prop::collection::vec(name(), 0..5), bad).prop_map(
        |(pod, version, jobs, bad)| Entry {
            pod,
            version,
            jobs,
            bad,
        },
    )
}

fn text_of(version: &Option<String>, entries: &[Entry]) -> String {
    let mut text = String::new();
    if let Some(version) = version {
        text.push_str(&format!("version: {version}\n"));
    }
    text.push_str("workloads:\n");
    for entry in entries {
        text.push_str(&format!("  {}:\n", entry.pod.0));
        if let Some(version) = &entry.version.0 {
            text.push_str(&format!("    version: {version}\n"));
        }
        match entry.bad {
            Some(bad) => text.push_str(&format!("    {bad}\n")),
            None => {
                text.push_str("    jobs:\n");
                for job in &entry.jobs {
                    text.push_str(&format!("    - {}\n", job.0));
                }
            }
        }
    }
    text
}

/// What the text reads as: the version and each pod's jobs (the last entry of a pod counts),
/// or `None` when any part is refused.
fn expected(
    version: Option<u64>,
    entries: &[Entry],
) -> Option<(u64, BTreeMap<String, Vec<String>>)> {
    let mut read = BTreeMap::new();
    for entry in entries {
        entry.version.1?;
        if entry.bad.is_some() {
            return None;
        }
        let jobs = entry.jobs.iter().map(|(_, job)| job.clone()).collect();
        read.insert(entry.pod.1.clone(), jobs);
    }
    Some((version?, read))
}

fn read(config: &WorkerConfig) -> (u64, BTreeMap<String, Vec<String>>) {
    let jobs = config
        .workloads()
        .map(|(pod, w)| (pod.to_owned(), w.jobs.clone()));
    (config.version, jobs.collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_read_or_refused_naming_config_yml(text in prop_oneof![yamlish(), "\\PC{0,200}"]) {
        match WorkerConfig::parse(&text) {
            Ok(config) => prop_assert_eq!(WorkerConfig::parse(&config.render()).unwrap(), config),
            Err(error) => prop_assert!(error.to_string().starts_with("config.yml "), "{}", error),
        }
    }

    #[test]
    fn any_text_is_read_or_refused_as_an_index(text in prop_oneof![yamlish(), "\\PC{0,200}"]) {
        if let Ok(index) = Index::parse(&text) {
            prop_assert_eq!(Index::parse(&index.render()).unwrap(), index);
        }
    }

    #[test]
    fn a_config_of_the_protocols_forms_reads_as_it_says(
        version in version(),
        entries in prop::collection::vec(entry(), 0..4),
    ) {
        let text = text_of(&version.0, &entries);
        let parsed = WorkerConfig::parse(&text);
        let want = expected(version.1, &entries);
        prop_assert_eq!(parsed.as_ref().ok().map(read), want.clone(), "{}", text);
        if let Err(error) = parsed {
            // Every refusal names the field at fault.
            let message = error.to_string();
            prop_assert!(message.contains("version") || message.contains("workloads."), "{}", message);
        }
    }

    #[test]
    fn a_rendered_config_reads_back_whatever_its_names(
        // U+FEFF often: a config.yml may hold it only escaped, as serde_yaml writes it.
        pods in prop::collection::btree_map("(\\PC|\u{feff}){0,10}", prop::collection::vec("(\\PC|\u{feff}){0,10}", 0..4), 0..4),
        version in any::<u64>(),
    ) {
        let config = WorkerConfig::new(version, pods.into_iter().map(|(pod, jobs)| (pod, Workload { version, jobs })));
        prop_assert_eq!(WorkerConfig::parse(&config.render()).unwrap(), config);
    }
}

/// The one difference docs/worker-protocol.md names ("Reading config.yml"): serde_yaml gives an
/// anchor defined again the number of the next new anchor, whose node an alias then reads.
/// The rule says 2. When this fails, drop the exception from the document.
#[test]
fn serde_yaml_reads_an_alias_of_an_anchor_defined_again_as_the_docs_say() {
    let config = WorkerConfig::parse("a: &x 1\nb: &x 2\nc: &y 3\nversion: *x\n").unwrap();
    assert_eq!(config.version, 3);
}
