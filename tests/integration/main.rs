//! The operator's integration tests that need no cluster (planner and Deployment scenarios,
//! the deterministic handoff simulation, the CLIs, the CRD and manifests, the Helm chart against
//! them, monitoring rules, /metrics over HTTPS, the container images against the Dockerfile and
//! their SBOMs against what they hold, one version everywhere a release sets it), one module
//! each, linked into one binary. The end-to-end suite (`tests/e2e/main.rs`) and the fault soak
//! (`tests/soak/`) are binaries of their own.

mod assignment_plan_cli;
#[path = "../common/cargo_env.rs"]
mod cargo_env;
mod crd;
mod deployment_scenarios;
mod fenced_write;
mod fixtures;
mod handoff_simulation;
mod helm_chart;
mod images;
// The end-to-end harness's kubectl and the tool finder it uses (monitoring.rs, helm_chart/).
#[allow(dead_code)]
#[path = "../e2e/harness/kubectl.rs"]
mod kubectl;
mod layers;
mod manifests;
mod metrics_https;
mod monitoring;
mod planner_scenarios;
mod plugin_cluster_errors;
mod plugin_reports;
mod sbom;
#[path = "../e2e/harness/tools.rs"]
mod tools;
mod versions;
