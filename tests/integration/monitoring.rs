//! The monitoring component (`deploy/monitoring`): it installs on top of `deploy/`, scrapes the
//! operator's `/metrics` port over HTTPS with Prometheus' token, its alerts pass `promtool check
//! rules` and their unit tests, each has a runbook on the runbook page (`docs/runbooks.md`), and
//! the alerts and the dashboard query only metrics the operator exports.

use std::collections::BTreeSet;
use std::path::Path;

use prometheus_client::registry::Registry;
use serde_json::Value as Json;
use serde_yaml::Value;
use swarm_operator::runtime::metrics::{self, Metrics};

// promtool.rs finds promtool with `super::tools`.
use crate::helm_chart::kustomize;
use crate::tools;

#[allow(dead_code)]
#[path = "../e2e/harness/promtool.rs"]
mod promtool;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

const MONITORING: [(&str, &str); 4] = [
    ("Service", "swarm-operator-metrics"),
    ("ServiceMonitor", "swarm-operator"),
    ("PrometheusRule", "swarm-operator"),
    ("ConfigMap", "swarm-operator-dashboard"),
];

#[test]
fn the_monitoring_overlay_is_deploy_plus_a_service_monitor_that_scrapes_the_operator() {
    let base = kustomize("deploy");
    let overlay = kustomize("deploy/overlays/monitoring");
    let rest: Vec<&Value> = overlay
        .iter()
        .filter(|d| {
            !MONITORING
                .iter()
                .any(|(kind, name)| d["kind"] == *kind && d["metadata"]["name"] == *name)
        })
        .collect();
    assert_eq!(rest, base.iter().collect::<Vec<_>>(), "deploy/, unchanged");

    let deployment = find(&overlay, "Deployment", "swarm-operator");
    let service = find(&overlay, "Service", "swarm-operator-metrics");
    let monitor = find(&overlay, "ServiceMonitor", "swarm-operator");
    for doc in [
        service,
        monitor,
        find(&overlay, "PrometheusRule", "swarm-operator"),
    ] {
        assert_eq!(doc["metadata"]["namespace"], "swarm-system");
    }
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_mapping()
        .unwrap();
    for (key, value) in service["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(
            pod_labels.get(key),
            Some(value),
            "the Service selects the operator"
        );
    }
    let port = &service["spec"]["ports"][0];
    let container_ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        container_ports
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port["targetPort"] && p["containerPort"] == port["port"]),
        "the Service targets the port serving /metrics"
    );
    let service_labels = service["metadata"]["labels"].as_mapping().unwrap();
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(
            service_labels.get(key),
            Some(value),
            "it selects the Service"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], port["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(port["targetPort"], "metrics", "not the probes' port");
    // As Prometheus scrapes an API server: HTTPS with its own ServiceAccount's token, which
    // the operator has the API server review.
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
    assert_eq!(
        endpoint["honorLabels"], true,
        "the pools' namespace label is kept"
    );
    let job = &service["metadata"]["labels"][monitor["spec"]["jobLabel"].as_str().unwrap()];
    assert_eq!(job, "swarm-operator", "the job label the alerts select");

    let dashboard = find(&overlay, "ConfigMap", "swarm-operator-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        dashboard["data"]["swarm-operator.json"].as_str(),
        Some(read("deploy/monitoring/dashboards/swarm-operator.json").as_str())
    );
}

fn rule_groups() -> Value {
    let rule: Value =
        serde_yaml::from_str(&read("deploy/monitoring/prometheus_rule.yaml")).unwrap();
    rule["spec"].clone()
}

fn alerts() -> Vec<Value> {
    rule_groups()["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

#[test]
fn the_alert_rules_pass_promtool_check_rules_and_their_unit_tests() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml::to_string(&rule_groups()).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        repo("deploy/monitoring/tests/alerts.test.yaml"),
        dir.path().join("alerts.test.yaml"),
    )
    .unwrap();
    let checked = promtool::run(&["check", "rules", "rules.yaml"], dir.path())
        .unwrap_or_else(|why| panic!("{why}"));
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{checked}"
    );
    promtool::run(&["test", "rules", "alerts.test.yaml"], dir.path())
        .unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn every_alert_has_a_severity_a_runbook_on_the_runbook_page_and_a_unit_test() {
    let runbooks = read("docs/runbooks.md");
    let tests = read("deploy/monitoring/tests/alerts.test.yaml");
    let names: Vec<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().expect("alerting rules only").to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "SwarmPoolJobsUnassigned",
            "SwarmPoolFailed",
            "SwarmPoolDegraded",
            "SwarmPoolHandoffStuck",
            "SwarmPoolRolloutStuck",
            "SwarmPoolWorkerUnavailable",
            "SwarmOperatorAbsent",
            "SwarmOperatorReconcileErrors",
        ]
    );
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        let severity = alert["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{name}: {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                alert["annotations"][annotation]
                    .as_str()
                    .is_some_and(|t| !t.is_empty()),
                "{name} has a {annotation}"
            );
        }
        let runbook = alert["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = name.to_lowercase();
        assert!(
            runbook.ends_with(&format!("docs/runbooks.md#{anchor}")),
            "{runbook}"
        );
        assert!(
            runbooks.contains(&format!("\n#### {name}\n")),
            "docs/runbooks.md has a runbook section for {name}"
        );
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "{name} has a unit test"
        );
    }
}

/// The metric names a query may use: every family the operator registers, with the sample
/// suffixes of its type, and Prometheus' own `up`.
fn exported_names() -> BTreeSet<String> {
    let mut registry = Registry::default();
    let metrics = Metrics::default().register(&mut registry);
    // A labelled family is exported from its first series on.
    metrics.reconcile_failed(&swarm_operator::Error::MissingNamespace);
    metrics.warned("ConfigMapConflict");
    metrics.refreshed("swarm", "pool");
    metrics.count(
        swarm_operator::runtime::pool_metrics::PoolCounter::Unavailable,
        "swarm",
        "pool",
    );
    metrics
        .api_requests
        .get_or_create(&swarm_operator::runtime::api_requests::RequestLabels {
            verb: "get",
            resource: "pods".into(),
        })
        .inc();
    let text = metrics::encode(&registry);
    let mut names = BTreeSet::from(["up".to_owned()]);
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    assert!(
        names.contains("swarm_operator_pool_unassigned_jobs"),
        "{names:?}"
    );
    names
}

/// The `swarm_operator_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("swarm_operator_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_alerts_and_the_dashboard_query_only_metrics_the_operator_exports() {
    let exported = exported_names();
    let mut exprs: Vec<String> = alerts()
        .iter()
        .map(|a| a["expr"].as_str().unwrap().to_owned())
        .collect();
    let dashboard: Json =
        serde_json::from_str(&read("deploy/monitoring/dashboards/swarm-operator.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "panel ids are unique"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}");
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "namespace", "pool"]);
    let mut used = BTreeSet::new();
    for expr in &exprs {
        for name in metric_names(expr) {
            assert!(
                exported.contains(&name),
                "{name} (in {expr}) is not exported: {exported:?}"
            );
            used.insert(name);
        }
    }
    for name in [
        "swarm_operator_pool_phase",
        "swarm_operator_pool_jobs_in_transit",
        "swarm_operator_pool_stale_workers",
        "swarm_operator_reconcile_duration_seconds_bucket",
        "swarm_operator_reconcile_failures_total",
        "swarm_operator_handoff_unheld_seconds_bucket",
        "swarm_operator_worker_refreshes_total",
        "swarm_operator_worker_unavailable_total",
    ] {
        assert!(used.contains(name), "{name} is charted or alerted on");
    }
}
