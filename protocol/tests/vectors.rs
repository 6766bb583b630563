//! The protocol's test vectors (`protocol/vectors/`), read by this crate as by every worker's
//! tests: what the operator and the Rust worker write and read is exactly what they say.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;
use swarm_protocol::config::{CONFIG_KEY, WorkerConfig};
use swarm_protocol::lease::{Holder, renewed};
use swarm_protocol::report::{ReportLine, timestamp};
use swarm_protocol::slices::{INDEX_KEY, Index, slice_name};
use swarm_protocol::{fence, names};

/// The cases of one vector file.
fn vectors<T: for<'de> Deserialize<'de>>(file: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vectors")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

#[test]
fn every_name_is_the_vectors() {
    let expected: BTreeMap<String, String> = vectors("names.json");
    let ours = BTreeMap::from([
        ("VERSION_ANNOTATION", names::VERSION_ANNOTATION),
        (
            "PENDING_REFRESH_ANNOTATION",
            names::PENDING_REFRESH_ANNOTATION,
        ),
        ("HANDOFF_ANNOTATION", names::HANDOFF_ANNOTATION),
        ("SLOTS_ANNOTATION", names::SLOTS_ANNOTATION),
        ("AWAITING_ACK_ANNOTATION", names::AWAITING_ACK_ANNOTATION),
        ("ACKED_VERSION_ANNOTATION", names::ACKED_VERSION_ANNOTATION),
        ("POOL_LABEL", names::POOL_LABEL),
        ("MANAGED_BY_LABEL", names::MANAGED_BY_LABEL),
        ("MANAGER", names::MANAGER),
        ("STATEFULSET_POD_LABEL", names::STATEFULSET_POD_LABEL),
        ("DEPLOYMENT_POD_LABEL", names::DEPLOYMENT_POD_LABEL),
        ("JOBS_SOURCE_LABEL", names::JOBS_SOURCE_LABEL),
        ("WORKER_LABEL", names::WORKER_LABEL),
        ("FENCED_AT_ANNOTATION", names::FENCED_AT_ANNOTATION),
        ("CONFIG_KEY", CONFIG_KEY),
        ("INDEX_KEY", INDEX_KEY),
    ]);
    let ours: BTreeMap<String, String> = ours
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    assert_eq!(ours, expected);
}

#[derive(Deserialize)]
struct ConfigCase {
    name: String,
    text: String,
    pod: String,
    expect: Option<Entry>,
    /// What a refusal's message must name.
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Entry {
    version: u64,
    jobs: Vec<String>,
}

#[test]
fn a_worker_reads_its_entry_of_config_yml() {
    for case in vectors::<Vec<ConfigCase>>("config.json") {
        let parsed = WorkerConfig::parse(&case.text);
        if let (Err(error), Some(refusal)) = (&parsed, &case.refusal) {
            assert!(
                error.to_string().contains(refusal),
                "{}: {error}",
                case.name
            );
        }
        let read = parsed.ok().map(|config| Entry {
            version: config.version,
            jobs: config
                .workload(&case.pod)
                .map(|workload| workload.jobs.clone())
                .unwrap_or_default(),
        });
        assert_eq!(read, case.expect, "{}", case.name);
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Slices {
    names: Vec<SliceName>,
    indexes: Vec<IndexCase>,
    /// Index texts the operator refuses, each with what the refusal must name.
    unusable: Vec<Unusable>,
}

#[derive(Deserialize)]
struct Unusable {
    name: String,
    text: String,
    refusal: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SliceName {
    config_map: String,
    pod: String,
    expect: String,
}

#[derive(Deserialize)]
struct IndexCase {
    name: String,
    text: String,
    expect: Index,
}

#[test]
fn a_worker_reads_its_own_config_map_and_the_operator_its_index() {
    let slices: Slices = vectors("slices.json");
    for case in slices.names {
        assert_eq!(slice_name(&case.config_map, &case.pod), case.expect);
    }
    for case in slices.indexes {
        assert_eq!(
            Index::parse(&case.text).unwrap(),
            case.expect,
            "{}",
            case.name
        );
        let again = Index::parse(&case.expect.render()).unwrap();
        assert_eq!(again, case.expect, "{}: rendered and read back", case.name);
    }
    for case in slices.unusable {
        let error = Index::parse(&case.text).expect_err(&case.name);
        assert!(
            error.to_string().contains(&case.refusal),
            "{}: {error}",
            case.name
        );
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeaseCase {
    name: String,
    current: Option<Lease>,
    holder: HolderCase,
    acked: Option<u64>,
    duration_seconds: u64,
    now: Timestamp,
    expect: Value,
}

#[derive(Deserialize)]
struct HolderCase {
    pod: String,
    namespace: String,
    uid: String,
    pool: String,
}

#[test]
fn the_lease_a_worker_writes() {
    for case in vectors::<Vec<LeaseCase>>("lease.json") {
        let holder = Holder {
            pod: case.holder.pod,
            namespace: case.holder.namespace,
            uid: case.holder.uid,
            pool: case.holder.pool,
        };
        let lease = renewed(
            case.current.as_ref(),
            &holder,
            case.acked,
            Duration::from_secs(case.duration_seconds),
            case.now,
        );
        let written = serde_json::to_value(&lease).unwrap();
        assert_eq!(written, case.expect, "{}", case.name);
    }
}

#[derive(Deserialize)]
struct ReportCase {
    name: String,
    fields: ReportFields,
    line: String,
}

#[derive(Deserialize)]
struct ReportFields {
    pod: String,
    uid: String,
    version: Option<u64>,
    running: Vec<String>,
    at: Timestamp,
    until: Option<Timestamp>,
}

#[test]
fn a_report_line_byte_for_byte() {
    for case in vectors::<Vec<ReportCase>>("report.json") {
        let fields = case.fields;
        let line = ReportLine {
            pod: &fields.pod,
            uid: &fields.uid,
            version: fields.version,
            running: &fields.running,
            at: timestamp(fields.at),
            until: fields.until.map(timestamp),
        };
        assert_eq!(line.render(), case.line, "{}", case.name);
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FenceVectors {
    default_permit_seconds: u64,
    clock_rate_bound: f64,
    timing: Vec<TimingCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TimingCase {
    permit_seconds: u64,
    read_every_seconds: f64,
    read_timeout_seconds: f64,
    ready_within_seconds: f64,
    retry_seconds: Vec<f64>,
    /// The shortest and the longest wait after a shed read.
    shed_retry_seconds: (f64, f64),
    grace_seconds: u64,
    revoke_wait_seconds: f64,
}

/// Whether `got` is `expect` seconds, to the microsecond the vectors are written to.
fn seconds(got: Duration, expect: f64) -> bool {
    (got.as_secs_f64() - expect).abs() < 1e-6
}

#[test]
fn the_fence_timing() {
    let vectors: FenceVectors = vectors("fence.json");
    assert_eq!(
        fence::DEFAULT_PERMIT,
        Duration::from_secs(vectors.default_permit_seconds)
    );
    assert!((fence::CLOCK_RATE_BOUND - vectors.clock_rate_bound).abs() < f64::EPSILON);
    for case in vectors.timing {
        let permit = Duration::from_secs(case.permit_seconds);
        let name = format!("permit {permit:?}");
        assert!(
            seconds(fence::read_interval(permit), case.read_every_seconds),
            "{name}"
        );
        assert!(
            seconds(fence::read_timeout(permit), case.read_timeout_seconds),
            "{name}"
        );
        assert!(
            seconds(fence::ready_within(permit), case.ready_within_seconds),
            "{name}"
        );
        for (failures, expect) in (1..).zip(&case.retry_seconds) {
            let delay = fence::retry_delay(failures, permit);
            assert!(
                seconds(delay, *expect),
                "{name}, {failures} failures: {delay:?}"
            );
        }
        let (shortest, longest) = case.shed_retry_seconds;
        assert!(
            seconds(fence::shed_retry_delay(permit, 0.0), shortest)
                && seconds(fence::shed_retry_delay(permit, 1.0), longest),
            "{name}: a shed read's wait"
        );
        let grace = Duration::from_secs(case.grace_seconds);
        let wait = fence::revoke_wait(permit, grace);
        assert!(
            seconds(wait, case.revoke_wait_seconds),
            "{name}: wait {wait:?}"
        );
    }
}
