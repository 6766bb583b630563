//! The `config.yml` format: rendering, reading back, and the assignment it encodes.

use crate::common;

use common::*;
use proptest::prelude::*;
use swarm_assign::{Assignment, ConfigAssignment};
use swarm_protocol::config::{ParseError, WorkerConfig, Workload};

fn workload(version: u64, jobs: &[&str]) -> Workload {
    Workload {
        version,
        jobs: jobs.iter().map(|job| job.to_string()).collect(),
    }
}

#[test]
fn renders_the_documented_format() {
    let config = WorkerConfig::new(
        3,
        [
            ("swarm-worker-1".to_string(), workload(1, &[])),
            (
                "swarm-worker-0".to_string(),
                workload(3, &["stream:xxrtve1"]),
            ),
        ],
    );
    assert_eq!(
        config.render(),
        "version: 3
workloads:
  swarm-worker-0:
    version: 3
    jobs:
    - stream:xxrtve1
  swarm-worker-1:
    version: 1
    jobs: []
"
    );
}

#[test]
fn workers_appear_in_ordinal_order_not_text_order() {
    let config = WorkerConfig::new(
        1,
        (0..12)
            .rev()
            .map(|i| (format!("swarm-worker-{i}"), workload(1, &[]))),
    );
    let pods: Vec<&str> = config.workloads().map(|(pod, _)| pod).collect();
    let expected: Vec<String> = (0..12).map(|i| format!("swarm-worker-{i}")).collect();
    assert_eq!(pods, expected);
    let text = config.render();
    assert!(text.find("swarm-worker-9:").unwrap() < text.find("swarm-worker-10:").unwrap());
    // Reading it back keeps that order.
    let parsed = WorkerConfig::parse(&text).unwrap();
    assert_eq!(
        parsed.workloads().map(|(pod, _)| pod).collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn no_workers_render_as_an_empty_map() {
    let config = WorkerConfig::new(4, []);
    assert_eq!(config.render(), "version: 4\nworkloads: {}\n");
    assert_eq!(WorkerConfig::parse(&config.render()).unwrap(), config);
}

#[test]
fn reading_ignores_unknown_fields_and_fills_missing_ones() {
    let text = "
version: 7
writtenBy: someone
workloads:
  w-0:
    version: 7
    jobs: [a, b]
    note: hello
  w-1:
    jobs:
  w-2:
";
    let config = WorkerConfig::parse(text).unwrap();
    assert_eq!(config.version, 7);
    assert_eq!(config.workload("w-0"), Some(&workload(7, &["a", "b"])));
    assert_eq!(config.workload("w-1"), Some(&workload(0, &[])));
    assert_eq!(config.workload("w-2"), Some(&workload(0, &[])));
    assert_eq!(config.workload("w-3"), None);
}

#[test]
fn reads_the_predecessors_config_which_has_no_top_level_version() {
    let text = "workloads:\n  swarm-worker-0:\n    jobs:\n      - stream:xxrtve1\n    version: 0\n";
    let config = WorkerConfig::parse(text).unwrap();
    assert_eq!(config.version, 0);
    assert_eq!(
        config.workload("swarm-worker-0"),
        Some(&workload(0, &["stream:xxrtve1"]))
    );
}

#[test]
fn unreadable_text_is_an_error_not_a_crash() {
    assert!(matches!(WorkerConfig::parse(""), Err(ParseError::Empty)));
    assert!(matches!(
        WorkerConfig::parse("  \n"),
        Err(ParseError::Empty)
    ));
    for text in [
        "version: [1",
        "version: -3",
        "workloads: 12",
        "- a\n- b",
        "version: x",
        "\t:",
    ] {
        let error = WorkerConfig::parse(text).expect_err(text);
        assert!(
            error
                .to_string()
                .starts_with("config.yml is not a worker config"),
            "{error}"
        );
    }
}

#[test]
fn assignment_reads_the_pods_of_one_statefulset() {
    let config = WorkerConfig::new(
        2,
        [
            ("swarm-worker-0".to_string(), workload(1, &["a"])),
            ("swarm-worker-1".to_string(), workload(2, &["b", "c"])),
            ("other-0".to_string(), workload(1, &["d"])),
            ("swarm-worker-01".to_string(), workload(1, &["e"])),
        ],
    );
    let assignment = config.assignment("swarm-worker").unwrap();
    assert_eq!(assignment.workers(), [vec!["a"], vec!["b", "c"]]);
    assert_eq!(config.assignment("other").unwrap().workers(), [vec!["d"]]);
    assert_eq!(config.assignment("swarm"), None);
    assert_eq!(config.assignment("missing"), None);
}

#[test]
fn assignment_ignores_a_pod_beyond_a_gap_instead_of_growing_n() {
    let config = WorkerConfig::new(
        2,
        [
            ("w-0".to_string(), workload(1, &["a"])),
            ("w-4000000000".to_string(), workload(1, &["b"])),
        ],
    );
    let assignment = config.assignment("w").unwrap();
    assert_eq!(assignment, Assignment::new(vec![vec!["a".into()], vec![]]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rendering_then_reading_gives_the_same_config(
        jobs in jobs(0..100),
        replicas in 0_usize..20,
        version in 1_u64..u64::MAX,
        picks in prop::collection::vec(any::<usize>(), 0..100),
    ) {
        let workers = if replicas == 0 { Vec::new() } else { arbitrary_assignment(&jobs, replicas, &picks).into_workers() };
        let config = WorkerConfig::new(
            version,
            workers.into_iter().enumerate().map(|(i, jobs)| {
                (format!("pool-{i}"), Workload { version: version - (i as u64 % version), jobs })
            }),
        );
        let text = config.render();
        prop_assert_eq!(&text, &config.render(), "byte-identical");
        prop_assert_eq!(WorkerConfig::parse(&text).unwrap(), config);
    }

    #[test]
    fn reading_arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = WorkerConfig::parse(&text);
    }

    #[test]
    fn reading_mangled_configs_never_panics(
        jobs in jobs(0..30),
        cut in any::<usize>(),
        noise in "[\\[\\]{}:, \\-\\n a-z0-9]{0,20}",
    ) {
        let config = WorkerConfig::new(1, [("w-0".to_string(), Workload { version: 1, jobs })]);
        let text = config.render();
        let cut = (0..=cut % (text.len() + 1)).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let mangled = format!("{}{noise}", &text[..cut]);
        if let Ok(parsed) = WorkerConfig::parse(&mangled) {
            let _ = parsed.assignment("w");
        }
    }
}
