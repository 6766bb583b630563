//! The CRD: the committed YAML matches the Rust types, and the schema keeps the API contract.

use std::path::Path;

use serde_json::{Value, json};
use swarm_operator::api::crd::{SwarmPool, crd_yaml};

const REGENERATE: &str = "regenerate with: cargo run -q -- crd > crds/swarmpool.yaml && cp crds/swarmpool.yaml deploy/crd/swarmpool.yaml && cp crds/swarmpool.yaml charts/swarm-operator/files/crds/swarmpool.yaml";

#[test]
fn committed_crd_files_match_the_rust_types() {
    let generated = crd_yaml();
    for path in [
        "crds/swarmpool.yaml",
        "deploy/crd/swarmpool.yaml",
        "charts/swarm-operator/files/crds/swarmpool.yaml",
    ] {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            committed == generated,
            "{path} is stale or missing; {REGENERATE}"
        );
    }
}

#[test]
fn the_crd_subcommand_prints_the_generated_crd() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8(output.stdout).unwrap(), crd_yaml());
}

fn crd() -> Value {
    serde_json::to_value(<SwarmPool as kube::CustomResourceExt>::crd()).unwrap()
}

#[test]
fn names_scope_and_status_subresource_are_the_contract() {
    let crd = crd();
    assert_eq!(crd["metadata"]["name"], "swarmpools.swarm.io");
    assert_eq!(crd["spec"]["group"], "swarm.io");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["kind"], "SwarmPool");
    assert_eq!(crd["spec"]["names"]["plural"], "swarmpools");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["swp"]));
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert_eq!(version["subresources"]["status"], json!({}));
}

#[test]
fn printer_columns_are_name_statefulset_ready_jobs_version_phase_age_and_wide_unassigned_and_in_transit()
 {
    let crd = crd();
    let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = columns
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "StatefulSet",
            "Ready",
            "Jobs",
            "Version",
            "Phase",
            "Age",
            "Unassigned",
            "In-Transit"
        ]
    );
    let paths: Vec<&str> = columns
        .iter()
        .map(|c| c["jsonPath"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            ".status.workload",
            ".status.ready",
            ".status.jobs",
            ".status.version",
            ".status.phase",
            ".metadata.creationTimestamp",
            ".status.unassignedJobs",
            ".status.jobsInTransit"
        ]
    );
    assert_eq!(columns[6]["priority"], 1, "UNASSIGNED only with -o wide");
    assert_eq!(columns[7]["priority"], 1, "IN TRANSIT only with -o wide");
    assert!(columns[..6].iter().all(|c| c.get("priority").is_none()));
}

#[test]
fn spec_schema_enforces_non_empty_jobs_in_an_atomic_list_and_shows_defaults() {
    let crd = crd();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], json!(["jobs", "selector"]));
    let props = &spec["properties"];
    // Atomic: a `set` costs the API server field ownership per job on every write.
    assert_eq!(props["jobs"]["x-kubernetes-list-type"], "atomic");
    assert_eq!(props["jobs"]["items"]["minLength"], 1);
    assert_eq!(props["strategy"]["default"], "Sticky");
    assert_eq!(
        props["strategy"]["enum"],
        json!(["Sticky", "Consistent", "Contiguous"])
    );
    assert_eq!(props["paused"]["default"], false);
    assert_eq!(props["workloadKind"]["default"], "StatefulSet");
    assert_eq!(
        props["workloadKind"]["enum"],
        json!(["StatefulSet", "Deployment"])
    );
    let rollout = &props["rollout"]["properties"];
    assert_eq!(rollout["policy"]["default"], "DeletePods");
    assert_eq!(
        rollout["policy"]["enum"],
        json!(["DeletePods", "Acknowledge", "None"])
    );
    assert_eq!(rollout["ackTimeoutSeconds"]["default"], 60);
    assert_eq!(rollout["ackTimeoutSeconds"]["minimum"].as_f64(), Some(1.0));
    assert_eq!(rollout["maxUnavailable"]["default"], "25%");
    assert_eq!(rollout["handoff"]["default"], "Exclusive");
    assert_eq!(rollout["handoff"]["enum"], json!(["Exclusive", "Overlap"]));
    let rule = &props["rollout"]["x-kubernetes-validations"][0];
    assert!(
        rule["rule"].as_str().unwrap().contains("Overlap")
            && rule["message"].as_str().unwrap().contains("policy None"),
        "policy None with an Exclusive handoff is rejected with a message: {rule}"
    );
    assert_eq!(
        rollout["maxUnavailable"]["x-kubernetes-int-or-string"],
        true
    );
    for field in [
        "selector",
        "workloadKind",
        "jobs",
        "configMap",
        "strategy",
        "rollout",
        "paused",
    ] {
        let description = props[field]["description"].as_str().unwrap_or_default();
        assert!(!description.is_empty(), "spec.{field} is documented");
    }
}

#[test]
fn status_schema_has_every_contract_field_and_conditions_keyed_by_type() {
    let crd = crd();
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    for field in [
        "observedGeneration",
        "phase",
        "workload",
        "statefulSet",
        "workers",
        "readyWorkers",
        "ready",
        "jobs",
        "unassignedJobs",
        "jobsInTransit",
        "version",
        "staleWorkers",
        "conditions",
    ] {
        assert!(status[field].is_object(), "status.{field} exists");
        assert!(
            status[field]["description"].is_string(),
            "status.{field} is documented"
        );
    }
    assert_eq!(
        status["phase"]["enum"],
        json!(["Pending", "RollingOut", "Balanced", "Degraded", "Failed"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        json!(["type"])
    );
}
