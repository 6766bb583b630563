//! The shipped manifests agree with the operator: the example pool selects the example
//! StatefulSet and names the ConfigMap its pods mount, and the install grants what the
//! controller uses under the restricted pod security profile.

use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use swarm_operator::api::crd::SwarmPool;
use swarm_operator::planner;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The document of `kind` in a multi-document YAML file.
fn document<T: DeserializeOwned>(path: &str, kind: &str) -> T {
    let text = read(path);
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc).unwrap();
        if value["kind"].as_str() == Some(kind) {
            return serde_yaml::from_value(value).unwrap();
        }
    }
    panic!("no {kind} in {path}");
}

#[test]
fn the_qos_example_is_the_example_pool_with_a_valid_qos() {
    let plain: SwarmPool = document("examples/swarmpool.yaml", "SwarmPool");
    let qos: SwarmPool = document("examples/qos/swarmpool.yaml", "SwarmPool");
    assert_eq!(qos.metadata, plain.metadata, "it replaces the example pool");
    let settings = qos.spec.qos.clone().expect("spec.qos");
    swarm_assign::validate_qos(&qos.spec.jobs, &settings).unwrap();
    assert_eq!(settings.dedicated.len(), 2);
    assert!(settings.is_weighted());
    let mut without = qos.spec.clone();
    without.qos = None;
    assert_eq!(without, plain.spec, "nothing else differs");
}

#[test]
fn the_example_pool_selects_the_example_statefulset_and_names_the_configmap_its_pods_mount() {
    let pool: SwarmPool = document("examples/swarmpool.yaml", "SwarmPool");
    let sts: StatefulSet = document("examples/worker-statefulset.yaml", "StatefulSet");
    assert_eq!(pool.metadata.namespace.as_deref(), Some("swarm"));
    assert_eq!(sts.metadata.namespace.as_deref(), Some("swarm"));
    assert_eq!(pool.spec.jobs.len(), 27);
    swarm_assign::validate_jobs(&pool.spec.jobs).unwrap();
    assert!(planner::selects(&pool.spec.selector, &sts));

    let spec = sts.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let template = spec.template;
    let pod_labels = template.metadata.unwrap().labels.unwrap();
    for (k, v) in spec.selector.match_labels.unwrap() {
        assert_eq!(
            pod_labels.get(&k),
            Some(&v),
            "the pod template carries the selector labels"
        );
    }
    let pod = template.spec.unwrap();
    let volume = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.config_map.is_some())
        .unwrap();
    let config_map = volume.config_map.unwrap();
    assert_eq!(config_map.name, pool.config_map_name());
    assert_eq!(config_map.optional, Some(true));
    let container = &pod.containers[0];
    let mount = container
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == volume.name)
        .unwrap();
    assert_eq!(mount.mount_path, "/app/config");
    let pod_name = container
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "POD_NAME")
        .unwrap();
    let field = pod_name
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(field.field_path, "metadata.name");
}

#[test]
fn the_examples_namespace_is_applied_before_the_objects_in_it() {
    let mut files: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".yaml"))
            .collect();
    files.sort();
    assert_eq!(
        files[0], "namespace.yaml",
        "kubectl apply -f examples/ goes in name order"
    );
}

fn sorted(mut rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    for rule in &mut rules {
        rule.verbs.sort();
    }
    rules.sort_by(|a, b| {
        format!("{:?}{:?}", a.api_groups, a.resources)
            .cmp(&format!("{:?}{:?}", b.api_groups, b.resources))
    });
    rules
}

#[test]
fn cluster_and_namespaced_installs_grant_the_same_rules() {
    let cluster: ClusterRole = document("deploy/rbac/cluster_role.yaml", "ClusterRole");
    let leader_election: Role = document("deploy/rbac/leader_election_role.yaml", "Role");
    let namespaced: Role = document("deploy/overlays/namespaced/role.yaml", "Role");
    let mut expected = cluster.rules.unwrap();
    expected.extend(leader_election.rules.unwrap());
    assert_eq!(sorted(expected), sorted(namespaced.rules.unwrap()));
}

#[test]
fn rbac_grants_no_write_beyond_what_the_controller_does() {
    let cluster: ClusterRole = document("deploy/rbac/cluster_role.yaml", "ClusterRole");
    for rule in cluster.rules.unwrap() {
        let resources = rule.resources.unwrap_or_default().join(",");
        let allowed: &[&str] = match resources.as_str() {
            "swarmpools" => &["get", "list", "watch"],
            "statefulsets,deployments,replicasets" => &["list", "watch"],
            "swarmpools/status" => &["patch"],
            "pods" => &["list", "watch", "delete"],
            // Delete: the workers' own ConfigMaps of a worker with nothing left.
            "configmaps" => &["get", "list", "watch", "create", "patch", "delete"],
            "events" => &["create", "patch"],
            // The workers' Leases, read only; leader election's Lease has a Role of its own.
            "leases" => &["list", "watch"],
            other => panic!("unexpected resource {other}"),
        };
        let mut verbs = rule.verbs.clone();
        verbs.sort();
        let mut want: Vec<String> = allowed.iter().map(|v| (*v).to_owned()).collect();
        want.sort();
        assert_eq!(verbs, want, "{resources}");
    }
}

#[test]
fn the_operator_may_review_metrics_tokens_and_scrapers_get_a_role_for_metrics() {
    let reviews: ClusterRole =
        document("deploy/rbac/metrics/metrics_auth_role.yaml", "ClusterRole");
    let granted: Vec<(String, Vec<String>)> = reviews
        .rules
        .unwrap()
        .into_iter()
        .map(|rule| {
            let group = rule.api_groups.unwrap_or_default().join(",");
            let resources = rule.resources.unwrap_or_default().join(",");
            (format!("{group}/{resources}"), rule.verbs)
        })
        .collect();
    assert_eq!(
        granted,
        [
            (
                "authentication.k8s.io/tokenreviews".to_owned(),
                vec!["create".to_owned()]
            ),
            (
                "authorization.k8s.io/subjectaccessreviews".to_owned(),
                vec!["create".to_owned()]
            ),
        ]
    );
    let binding: ClusterRoleBinding = document(
        "deploy/rbac/metrics/metrics_auth_role_binding.yaml",
        "ClusterRoleBinding",
    );
    assert_eq!(binding.role_ref.name, "swarm-operator-metrics-auth");
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("ServiceAccount", "swarm-operator")
    );
    assert_eq!(subject.namespace.as_deref(), Some("swarm-system"));

    let reader: ClusterRole = document(
        "deploy/rbac/metrics/metrics_reader_role.yaml",
        "ClusterRole",
    );
    assert_eq!(
        reader.metadata.name.as_deref(),
        Some("swarm-operator-metrics-reader")
    );
    let rule = &reader.rules.unwrap()[0];
    assert_eq!(
        rule.non_resource_urls.as_deref(),
        Some(&["/metrics".to_owned()][..])
    );
    assert_eq!(rule.verbs, ["get"]);
}

#[test]
fn the_operator_serves_metrics_on_their_own_port_and_probes_in_plain_http() {
    let deployment: Deployment = document("deploy/manager/deployment.yaml", "Deployment");
    let container = &deployment.spec.unwrap().template.spec.unwrap().containers[0];
    let ports: Vec<(Option<&str>, i32)> = container
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| (p.name.as_deref(), p.container_port))
        .collect();
    assert_eq!(ports, [(Some("http"), 8080), (Some("metrics"), 8443)]);
    let args = container.args.as_ref().unwrap();
    assert!(
        !args.iter().any(|a| a.starts_with("--metrics-insecure")),
        "{args:?}"
    );
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.scheme, None, "plain HTTP");
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into())
        );
    }
}

#[test]
fn the_operator_runs_under_the_restricted_pod_security_profile_with_probes() {
    let deployment: Deployment = document("deploy/manager/deployment.yaml", "Deployment");
    let spec = deployment.spec.unwrap();
    // Highly available: two replicas, one leading, never both down on an upgrade.
    assert_eq!(spec.replicas, Some(2));
    let strategy = spec.strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        strategy.rolling_update.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    let pod = spec.template.spec.unwrap();
    assert!(
        pod.containers[0]
            .args
            .as_ref()
            .unwrap()
            .contains(&"--leader-elect".to_owned()),
        "the replicas elect a leader"
    );
    let budget: k8s_openapi::api::policy::v1::PodDisruptionBudget = document(
        "deploy/manager/pod_disruption_budget.yaml",
        "PodDisruptionBudget",
    );
    let budget = budget.spec.unwrap();
    assert_eq!(
        budget.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        budget.selector.unwrap().match_labels,
        spec.selector.match_labels,
        "the budget covers the operator's pods"
    );
    let pod_security = pod.security_context.unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.run_as_user, Some(65532));
    assert_eq!(
        pod_security.seccomp_profile.unwrap().type_,
        "RuntimeDefault"
    );
    let container = &pod.containers[0];
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(
        security.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&container.liveness_probe), "/healthz");
    assert_eq!(path(&container.readiness_probe), "/readyz");
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);
    assert!(container.resources.as_ref().unwrap().limits.is_some());
}

/// `.krew.yaml` as krew-release-bot renders it for `tag`: each `addURIAndSha` becomes the
/// archive's uri and a sha256.
fn render_krew_template(template: &str, tag: &str) -> String {
    let mut out = String::new();
    for line in template.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(rest) = trimmed.strip_prefix("{{addURIAndSha \"") {
            let uri = rest.split('"').next().expect("a quoted uri");
            out.push_str(&format!(
                "{indent}uri: {}\n",
                uri.replace("{{ .TagName }}", tag)
            ));
            out.push_str(&format!("{indent}sha256: {}\n", "0".repeat(64)));
        } else {
            out.push_str(&line.replace("{{ .TagName }}", tag));
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_krew_manifest_installs_the_kubectl_swarm_binary_on_linux_and_macos() {
    let rendered = render_krew_template(&read(".krew.yaml"), "v0.1.0");
    let manifest: serde_yaml::Value = serde_yaml::from_str(&rendered).unwrap();
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(
        manifest["metadata"]["name"], "swarm",
        "kubectl swarm runs kubectl-swarm"
    );
    assert_eq!(manifest["spec"]["version"], "v0.1.0");
    let platforms = manifest["spec"]["platforms"].as_sequence().unwrap();
    let mut seen = Vec::new();
    for platform in platforms {
        let labels = &platform["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap(),
        );
        seen.push(format!("{os}/{arch}"));
        let uri = platform["uri"].as_str().unwrap();
        assert!(
            uri.ends_with(&format!("/v0.1.0/kubectl-swarm_{os}_{arch}.tar.gz")),
            "the archive scripts/package-plugin.sh names: {uri}"
        );
        assert_eq!(platform["sha256"].as_str().map(str::len), Some(64));
        assert_eq!(platform["bin"], "kubectl-swarm");
        let files: Vec<&str> = platform["files"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|file| file["from"].as_str().unwrap())
            .collect();
        assert_eq!(
            files,
            ["kubectl-swarm", "LICENSE"],
            "krew-index wants the licence"
        );
    }
    assert_eq!(
        seen,
        ["linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"]
    );
    let script = read("scripts/package-plugin.sh");
    assert!(
        script.contains("archive=\"dist/kubectl-swarm_${os}_${arch}.tar.gz\"")
            && script.contains("-czf \"${archive}\" kubectl-swarm LICENSE"),
        "the script packages what the manifest downloads"
    );
    assert!(
        read("LICENSE").contains("Apache License"),
        "Cargo.toml's licence"
    );
}

#[test]
fn a_worker_may_only_get_and_watch_config_maps_and_keep_only_leases() {
    let role: Role = document("deploy/worker-rbac/role.yaml", "Role");
    let rules = sorted(role.rules.unwrap());
    assert_eq!(rules.len(), 2, "{rules:?}");
    let config_maps = &rules[0];
    assert_eq!(
        config_maps.resources.as_deref(),
        Some(&["configmaps".to_owned()][..])
    );
    // Its own, `<pool's ConfigMap>.<pod>`, which RBAC cannot name per pod; never a list.
    assert_eq!(config_maps.resource_names, None);
    assert_eq!(config_maps.verbs, ["get", "watch"]);
    let leases = &rules[1];
    assert_eq!(
        leases.api_groups.as_deref(),
        Some(&["coordination.k8s.io".to_owned()][..])
    );
    assert_eq!(
        leases.resources.as_deref(),
        Some(&["leases".to_owned()][..])
    );
    assert_eq!(leases.verbs, ["create", "get", "update"]);
    let kustomization = read("deploy/worker-rbac/kustomization.yaml");
    for file in ["service_account.yaml", "role.yaml", "role_binding.yaml"] {
        assert!(
            kustomization.contains(file),
            "{file} is in the kustomization"
        );
    }
}

#[test]
fn the_worker_lease_policy_guards_only_labelled_leases_and_denies() {
    let policy: ValidatingAdmissionPolicy = document(
        "deploy/worker-lease-policy/policy.yaml",
        "ValidatingAdmissionPolicy",
    );
    let name = policy.metadata.name.clone().unwrap();
    let spec = policy.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = &rules[0];
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["coordination.k8s.io".to_owned()][..])
    );
    assert_eq!(rule.resources.as_deref(), Some(&["leases".to_owned()][..]));
    let mut operations = rule.operations.clone().unwrap();
    operations.sort();
    assert_eq!(operations, ["CREATE", "DELETE", "UPDATE"]);
    // Unlabelled Leases (leader election, nodes) are never evaluated; the label counts on the
    // old object too, so removing it does not escape the policy.
    let conditions = spec.match_conditions.unwrap();
    assert_eq!(conditions.len(), 1);
    let condition = &conditions[0].expression;
    for part in [
        "'swarm.io/pool' in object.metadata.labels",
        "'swarm.io/pool' in oldObject.metadata.labels",
    ] {
        assert!(condition.contains(part), "{part} in {condition}");
    }
    let variables = spec.variables.unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("variable {name}"))
            .expression
            .clone()
    };
    assert!(variable("podName").contains("'authentication.kubernetes.io/pod-name'"));
    assert!(variable("podUid").contains("'authentication.kubernetes.io/pod-uid'"));
    let trusted = variable("trusted");
    // The operator's ServiceAccount as deploy/rbac names it.
    let account: k8s_openapi::api::core::v1::ServiceAccount =
        document("deploy/rbac/service_account.yaml", "ServiceAccount");
    let operator = format!(
        "system:serviceaccount:{}:{}",
        account.metadata.namespace.unwrap(),
        account.metadata.name.unwrap()
    );
    for user in [
        operator.as_str(),
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:kube-system:namespace-controller",
    ] {
        assert!(trusted.contains(&format!("'{user}'")), "{user} is trusted");
    }
    let validations = spec.validations.unwrap();
    assert!(
        validations[0]
            .expression
            .contains("variables.podName == [variables.leaseName]")
    );
    for validation in &validations {
        assert!(validation.message_expression.is_some(), "{validation:?}");
        assert_eq!(validation.reason.as_deref(), Some("Forbidden"));
    }

    let binding: ValidatingAdmissionPolicyBinding = document(
        "deploy/worker-lease-policy/binding.yaml",
        "ValidatingAdmissionPolicyBinding",
    );
    let binding = binding.spec;
    assert_eq!(binding.policy_name, name);
    assert_eq!(binding.validation_actions, ["Deny"]);
    let kustomization = read("deploy/worker-lease-policy/kustomization.yaml");
    for file in ["policy.yaml", "binding.yaml"] {
        assert!(
            kustomization.contains(file),
            "{file} is in the kustomization"
        );
    }
    // Opt-in: it refuses workers that run outside a pod, so the default install leaves it out.
    assert!(!read("deploy/kustomization.yaml").contains("worker-lease-policy"));
}

#[test]
fn the_jobs_from_example_is_the_example_pool_with_most_jobs_in_a_labelled_config_map() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use swarm_operator::state::jobs_source::{self, Found};

    let plain: SwarmPool = document("examples/swarmpool.yaml", "SwarmPool");
    let pool: SwarmPool = document("examples/jobs-from/swarmpool.yaml", "SwarmPool");
    let source: ConfigMap = document("examples/jobs-from/swarmpool.yaml", "ConfigMap");
    assert_eq!(
        pool.metadata, plain.metadata,
        "it replaces the example pool"
    );
    assert!(jobs_source::is_labelled(&source), "the operator watches it");
    let (resolved, unresolved) = jobs_source::resolve(&pool, |name| {
        assert_eq!(Some(name), source.metadata.name.as_deref());
        Found::ConfigMap(&source)
    });
    assert_eq!(unresolved, None);
    assert_eq!(
        resolved.spec.jobs, plain.spec.jobs,
        "the same jobs, in the same order"
    );
    let mut without = resolved.spec.clone();
    without.jobs_from.clear();
    assert_eq!(without, plain.spec, "nothing else differs");
}
