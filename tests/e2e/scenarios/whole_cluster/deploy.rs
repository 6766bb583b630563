//! Scenario 9: the install manifests apply with kustomize, and the RBAC they grant covers every
//! request the operator makes: checked against the request log (the simulation's, or a real
//! cluster's audit log), and on a real cluster enforced, with the operator running as the
//! install's ServiceAccount.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::manifests::{parse_yaml_stream, str_at};
use crate::harness::observe::{balanced, wait_for};
use crate::harness::scenario;
use crate::harness::sim_inspect::RequestRecord;
use crate::harness::{Env, repo_path};
use crate::scenarios::scale;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_deploy_installs_every_object_with_a_restricted_operator_pod() {
    scenario!("deploy-base")
        .run(async |env| {
            let objects = apply_kustomization(env, "deploy/").await;
            let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
            for kind in [
                "CustomResourceDefinition",
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment",
            ] {
                assert!(
                    kinds.contains(&kind),
                    "deploy/ installs a {kind}: {kinds:?}"
                );
            }
            env.kubectl
                .ok(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/swarmpools.swarm.io",
                ])
                .await;
            let deployment = only(&objects, "Deployment");
            let namespace = str_at(deployment, "/metadata/namespace");
            assert_eq!(namespace, "swarm-system");
            assert_restricted(deployment);
            // Its pod runs no process here (no image, no kubelet): leave no stand-in operator
            // behind on a cluster the next scenarios share.
            env.kubectl
                .ok(&["-n", &namespace, "delete", "deployment", "swarm-operator"])
                .await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_grants_every_request_the_operator_makes() {
    scenario!("deploy-rbac")
        .run(async |env| {
            // Only this scenario's: on a real cluster the audit log also holds the requests of
            // earlier operators of the same account (real_node's, in a pod, hold leader election's
            // Role too).
            let mark = env.request_mark().await;
            // Exercise the paths of a healthy pool: first write, refreshes, a scale-up.
            env.install_example().await;
            scale(env, 3).await;
            let sts = env.example.statefulset_name();
            wait_for(env, "Balanced over 3 workers", |o| balanced(o, 3, &sts)).await;
            let Some(requests) = env.operator_requests_since(mark).await else {
                env.note_skipped("the operator's requests (no audit log)");
                return;
            };
            let rendered = env.kubectl.ok(&["kustomize", "deploy/"]).await;
            let objects = parse_yaml_stream(&rendered, "kubectl kustomize deploy/");
            assert_rules_allow(
                &requests,
                operator_cluster_role(&objects)["rules"].as_array(),
                "ClusterRole",
            );
        })
        .await;
}

/// The ClusterRole that deploy/'s ClusterRoleBinding grants the operator's ServiceAccount
/// (deploy/ also ships the users' aggregated roles, which the operator does not hold, and the
/// metrics reviews' role and binding).
fn operator_cluster_role(objects: &[Value]) -> &Value {
    let bindings: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" && o["metadata"]["name"] == "swarm-operator")
        .collect();
    assert_eq!(
        bindings.len(),
        1,
        "exactly one ClusterRoleBinding swarm-operator"
    );
    let binding = bindings[0];
    let bound_to_operator = binding["subjects"].as_array().is_some_and(|subjects| {
        subjects
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "swarm-operator")
    });
    assert!(
        bound_to_operator,
        "the ClusterRoleBinding names the operator: {binding}"
    );
    let name = str_at(binding, "/roleRef/name");
    objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name.as_str())
        .unwrap_or_else(|| panic!("deploy/ renders no ClusterRole {name}"))
}

/// Asserts that RBAC `rules` (of a `role_kind`) allow every request in `requests`.
pub(crate) fn assert_rules_allow(
    requests: &[RequestRecord],
    rules: Option<&Vec<Value>>,
    role_kind: &str,
) {
    assert!(!requests.is_empty(), "the operator made requests");
    let rules = rules.unwrap_or_else(|| panic!("{role_kind} rules"));
    let mut denied = Vec::new();
    for request in requests {
        let Some(target) = request.target() else {
            continue;
        };
        let verb = request.verb();
        let allowed = rules.iter().any(|rule| {
            let has = |field: &str, value: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|v| v == value || v == "*"))
            };
            let names_ok = match rule["resourceNames"].as_array() {
                Some(names) if !names.is_empty() => target
                    .name
                    .as_deref()
                    .is_some_and(|n| names.iter().any(|v| v == n)),
                _ => true,
            };
            has("apiGroups", &target.group)
                && has("resources", &target.rbac_resource())
                && has("verbs", &verb)
                && names_ok
        });
        if !allowed {
            denied.push(format!(
                "{verb} {}/{} ({})",
                target.group,
                target.rbac_resource(),
                request.describe()
            ));
        }
    }
    denied.sort();
    denied.dedup();
    assert!(
        denied.is_empty(),
        "the {role_kind} of deploy/ does not allow: {denied:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_monitoring_overlay_passes_the_prometheus_operator_schemas() {
    scenario!("deploy-monitoring")
        .run(async |env| {
            // The Prometheus Operator's own CRDs, so the API server validates the ServiceMonitor
            // and the PrometheusRule against their schemas (kubectl asks for strict field
            // validation: an unknown or misspelt field is an error, not silently dropped).
            let crds = prometheus_operator_crds();
            let crd = |kind: &str| {
                crds.join(format!("monitoring.coreos.com_{kind}.yaml"))
                    .to_string_lossy()
                    .into_owned()
            };
            let (service_monitors, prometheus_rules) =
                (crd("servicemonitors"), crd("prometheusrules"));
            env.kubectl
                .ok(&[
                    "apply",
                    "--server-side",
                    "-f",
                    &service_monitors,
                    "-f",
                    &prometheus_rules,
                ])
                .await;
            env.kubectl
                .ok(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/servicemonitors.monitoring.coreos.com",
                    "crd/prometheusrules.monitoring.coreos.com",
                ])
                .await;
            let objects = apply_kustomization(env, "deploy/overlays/monitoring").await;
            let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
            for kind in ["ServiceMonitor", "PrometheusRule", "Service", "ConfigMap"] {
                assert!(
                    kinds.contains(&kind),
                    "the overlay installs a {kind}: {kinds:?}"
                );
            }
            // What the API server stored is what the manifests say: no field was pruned as unknown.
            for kind in ["ServiceMonitor", "PrometheusRule"] {
                let manifest = only(&objects, kind);
                let name = str_at(manifest, "/metadata/name");
                let namespace = str_at(manifest, "/metadata/namespace");
                let stored = env
                    .kubectl
                    .ok(&[
                        "-n",
                        &namespace,
                        "get",
                        &kind.to_lowercase(),
                        &name,
                        "-o",
                        "json",
                    ])
                    .await;
                let stored: Value = serde_json::from_str(&stored).expect("kubectl get -o json");
                assert_eq!(stored["spec"], manifest["spec"], "{kind} {name} as stored");
            }
            // A field the schema does not know is refused, so the check above has teeth.
            let mut bad = only(&objects, "ServiceMonitor").clone();
            bad["metadata"]["name"] = "swarm-operator-misspelt".into();
            bad["spec"]["endpoints"][0]["intervall"] = "30s".into();
            let refused = env
                .apply_output("misspelt-service-monitor.yaml", &[bad])
                .await;
            assert!(
                !refused.success && refused.stderr.contains("intervall"),
                "an unknown ServiceMonitor field is refused: {refused:?}"
            );
            let deployment = only(&objects, "Deployment");
            let namespace = str_at(deployment, "/metadata/namespace");
            env.kubectl
                .ok(&["-n", &namespace, "delete", "deployment", "swarm-operator"])
                .await;
        })
        .await;
}

/// The directory holding the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs:
/// `PROMETHEUS_OPERATOR_CRDS`, else `<repo>/.tools/prometheus-operator-crds` (where
/// `scripts/install-prometheus-operator-crds.sh` puts them).
fn prometheus_operator_crds() -> PathBuf {
    let dir = std::env::var_os("PROMETHEUS_OPERATOR_CRDS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&repo_path(".tools/prometheus-operator-crds")).to_path_buf());
    assert!(
        dir.join("monitoring.coreos.com_servicemonitors.yaml")
            .is_file(),
        "no Prometheus Operator CRDs in {}; run scripts/install-prometheus-operator-crds.sh \
         or scripts/test.sh",
        dir.display()
    );
    dir
}

/// `kubectl apply -k <dir>`, then checks every object `kubectl kustomize <dir>` renders now
/// exists; returns the rendered objects.
pub(crate) async fn apply_kustomization(env: &Env, dir: &str) -> Vec<Value> {
    assert!(Path::new(&repo_path(dir)).is_dir(), "{dir} exists");
    env.kubectl.ok(&["apply", "-k", dir]).await;
    let rendered = env.kubectl.ok(&["kustomize", dir]).await;
    let objects = parse_yaml_stream(&rendered, &format!("kubectl kustomize {dir}"));
    assert!(!objects.is_empty(), "{dir} renders objects");
    for object in &objects {
        assert!(
            env.exists(object).await,
            "{} {} from {dir} was not created",
            object["kind"],
            object["metadata"]["name"]
        );
    }
    objects
}

pub(crate) fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

pub(crate) fn container(deployment: &Value) -> &Value {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .expect("Deployment containers");
    assert_eq!(containers.len(), 1, "one operator container");
    &containers[0]
}

/// The restricted Pod Security profile plus a read-only root file system, and probes.
pub(crate) fn assert_restricted(deployment: &Value) {
    let pod = deployment.pointer("/spec/template/spec").expect("pod spec");
    let c = container(deployment);
    let either = |pointer: &str| c.pointer(pointer).or_else(|| pod.pointer(pointer)).cloned();
    assert_eq!(
        either("/securityContext/runAsNonRoot"),
        Some(Value::Bool(true))
    );
    assert_eq!(
        c.pointer("/securityContext/allowPrivilegeEscalation"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        c.pointer("/securityContext/readOnlyRootFilesystem"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        c.pointer("/securityContext/capabilities/drop"),
        Some(&Value::from(vec!["ALL"]))
    );
    assert_eq!(
        either("/securityContext/seccompProfile/type"),
        Some(Value::from("RuntimeDefault"))
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert!(
            c.get(probe).is_some(),
            "the operator container has a {probe}"
        );
    }
}
