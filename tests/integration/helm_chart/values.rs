//! The chart's values: `values.schema.json` and the chart's README (its table written by
//! helm-docs from `values.yaml`) describe every value and the schema rejects a wrong type naming
//! it, `helm lint --strict` passes, each value reaches the object it sets, and the CRD is
//! rendered, and kept on uninstall, as `crds.*` say.

use super::*;

/// The values' paths the schema describes, `a.b` for a property of an object it describes.
fn schema_paths(schema: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    for (name, property) in properties {
        let path = format!("{prefix}{name}");
        if property["properties"].is_object() {
            schema_paths(property, &format!("{path}."), out);
        } else {
            out.insert(path);
        }
    }
}

/// values.yaml's paths, descending into the objects the schema describes property by property.
fn value_paths(values: &Value, schema: &serde_json::Value, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, value) in values.as_mapping().expect("a mapping") {
        let name = name.as_str().expect("string keys");
        let path = format!("{prefix}{name}");
        let property = &schema["properties"][name];
        if property["properties"].is_object() {
            out.extend(value_paths(value, property, &format!("{path}.")));
        } else {
            out.insert(path);
        }
    }
    out
}

/// The descriptions of the README's table of values (helm-docs': `| key | type | default |
/// description |`), by key.
fn readme_rows(readme: &str) -> BTreeMap<String, String> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in readme.lines() {
        if line.starts_with("|-----|") {
            in_table = true;
            continue;
        }
        if !in_table || !line.starts_with("| ") {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        let [key, _, _, description] = cells[..] else {
            panic!("{CHART}/README.md: a row of four cells: {line}");
        };
        rows.insert(key.to_owned(), description.to_owned());
    }
    rows
}

#[test]
fn the_schema_values_yaml_and_the_readmes_table_list_the_same_values() {
    let schema: serde_json::Value =
        serde_json::from_str(&read(&format!("{CHART}/values.schema.json"))).expect("JSON");
    let values: Value = serde_yaml::from_str(&read(&format!("{CHART}/values.yaml"))).unwrap();
    let mut described = BTreeSet::new();
    schema_paths(&schema, "", &mut described);
    // Helm's own, for subcharts; not a value of this chart.
    described.remove("global");
    let given = value_paths(&values, &schema, "");
    assert_eq!(
        given, described,
        "values.yaml's values (left) are those values.schema.json describes (right)"
    );
    let rows = readme_rows(&read(&format!("{CHART}/README.md")));
    let listed: BTreeSet<String> = rows.keys().cloned().collect();
    assert!(
        listed == given,
        "{CHART}/README.md's table has a row for each value of values.yaml, and no other: rows \
         of no value {:?}, values without a row {:?}. Give an object that values.schema.json \
         describes as a whole one `# --` comment, and each value of one it describes property \
         by property its own, then write the table again ({CHART}/README.md says how)",
        listed.difference(&given).collect::<Vec<_>>(),
        given.difference(&listed).collect::<Vec<_>>(),
    );
    for (key, description) in &rows {
        assert!(
            !description.is_empty(),
            "{CHART}/README.md: `{key}` has no description: give it a `# -- ` comment in \
             values.yaml (helm-docs reads ` --` later in it as a key: write it otherwise)"
        );
    }
}

/// helm-docs' arguments, as README.md.gotmpl gives them to write the table.
const HELM_DOCS_ARGS: &[&str] = &["--sort-values-order", "file", "--skip-version-footer"];

/// helm-docs: `SWARM_HELM_DOCS`, else built (once) by `scripts/install-helm-docs.sh`.
fn helm_docs() -> PathBuf {
    pinned_tool("SWARM_HELM_DOCS", "scripts/install-helm-docs.sh").unwrap_or_else(|e| panic!("{e}"))
}

/// Copies directory `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        }
    }
}

#[test]
fn the_readmes_table_is_what_helm_docs_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let chart = dir.path().join("swarm-operator");
    copy_dir(&repo(CHART), &chart);
    let output = Command::new(helm_docs())
        .arg("--chart-search-root")
        .arg(&chart)
        .args(HELM_DOCS_ARGS)
        .output()
        .expect("run helm-docs");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "helm-docs failed: {said}");
    let written = std::fs::read_to_string(chart.join("README.md")).expect("README.md");
    let committed = read(&format!("{CHART}/README.md"));
    let command = format!(
        "\"$(scripts/install-helm-docs.sh)\" --chart-search-root {CHART} {}",
        HELM_DOCS_ARGS.join(" ")
    );
    assert!(
        committed.contains(&command),
        "{CHART}/README.md.gotmpl gives the command that writes the table: {command}"
    );
    if written != committed {
        let line = written
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| written.lines().count().min(committed.lines().count()));
        panic!(
            "{CHART}/README.md is not what helm-docs writes from values.yaml and \
             README.md.gotmpl, from line {}: {:?} committed, {:?} written. Edit values.yaml's \
             `# --` comments or README.md.gotmpl, never README.md, then run: {command}",
            line + 1,
            committed.lines().nth(line).unwrap_or("(end of file)"),
            written.lines().nth(line).unwrap_or("(end of file)"),
        );
    }
}

#[test]
fn the_schema_rejects_a_wrong_type_naming_the_value() {
    for (value, field) in [
        ("replicas=two", "replicas"),
        ("logFormat=yaml", "logFormat"),
        ("monitoring.enabled=maybe", "monitoring"),
        (
            "leaderElection.leaseDurationSeconds=1",
            "leaseDurationSeconds",
        ),
        ("watchNamespace=Not_A_Namespace", "watchNamespace"),
        ("replica=3", "replica"),
    ] {
        for args in [
            ["template", RELEASE, CHART, "--set", value].as_slice(),
            ["lint", CHART, "--set", value].as_slice(),
        ] {
            let command = args.join(" ");
            let run = run_helm(args);
            let said = format!("{}{}", run.stdout, run.stderr);
            assert!(
                !run.success,
                "helm {command} should fail on values.schema.json: {said}"
            );
            assert!(
                said.contains("schema") && said.contains(field),
                "helm {command} names {field} in a schema error: {said}"
            );
        }
    }
}

#[test]
fn helm_lint_passes_with_the_default_and_the_namespaced_values() {
    for values in [&[][..], &["--set", "watchNamespace=swarm"][..]] {
        let mut args = vec!["lint", CHART, "--strict"];
        args.extend_from_slice(values);
        let run = run_helm(&args);
        assert!(
            run.success,
            "helm {} failed:\n{}{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
    }
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Every value of the operator's Deployment set to something other than its default.
const OPERATOR_VALUES: &[&str] = &[
    "--set",
    "image.repository=registry.example/swarm-operator,image.tag=v9,image.pullPolicy=Always",
    "--set",
    "replicas=3,logFormat=text,logLevel=debug,maxConcurrentReconciles=4",
    "--set",
    "leaderElection.namespace=leases,leaderElection.leaseName=ops-lease",
    "--set",
    "leaderElection.leaseDurationSeconds=30",
    "--set",
    "nodeSelector.pool=system,priorityClassName=system-cluster-critical",
    "--set",
    "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
    "--set",
    "commonLabels.team=platform,commonAnnotations.owner=platform",
    "--set",
    "podLabels.tier=control,podAnnotations.scrape=yes",
    "--set",
    "podDisruptionBudget.enabled=false",
];

#[test]
fn the_values_reach_the_operator() {
    let docs = render("ops", OPERATOR_VALUES);
    let deployment = find(&docs, "Deployment", "swarm-operator");
    let pod = &deployment["spec"]["template"];
    the_container_has_the_values(&pod["spec"]["containers"][0]);
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(pod["spec"]["nodeSelector"]["pool"], "system");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "dedicated");
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["metadata"]["labels"]["tier"], "control");
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(pod["metadata"]["annotations"]["scrape"], "yes");
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        serde_yaml::from_str::<Value>("app.kubernetes.io/name: swarm-operator").unwrap(),
        "selectors never change"
    );
    for doc in &docs {
        let object = show_key(&key(doc));
        assert_eq!(doc["metadata"]["labels"]["team"], "platform", "{object}");
        assert_eq!(
            doc["metadata"]["annotations"]["owner"], "platform",
            "{object}"
        );
    }
    assert!(
        !docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"),
        "podDisruptionBudget.enabled=false"
    );
    // The leader-election Role goes where the Lease is.
    let role = find(&docs, "Role", "swarm-operator-leader-election");
    assert_eq!(role["metadata"]["namespace"], "leases");
    let binding = find(&docs, "RoleBinding", "swarm-operator-leader-election");
    assert_eq!(binding["metadata"]["namespace"], "leases");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
}

/// The operator's container as [`OPERATOR_VALUES`] render it: its image, its arguments and its
/// log level.
fn the_container_has_the_values(container: &Value) {
    assert_eq!(container["image"], "registry.example/swarm-operator:v9");
    assert_eq!(container["imagePullPolicy"], "Always");
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "--log-format=text",
            "--leader-elect",
            "--leader-elect-namespace=leases",
            "--leader-elect-lease-name=ops-lease",
            "--leader-elect-lease-duration=30",
            "--max-concurrent-reconciles=4",
        ]
    );
    assert_eq!(container["env"][1]["name"], "RUST_LOG");
    assert_eq!(container["env"][1]["value"], "debug");
}

#[test]
fn a_watched_namespace_apart_from_the_release_namespace_gets_the_rules_there() {
    let docs = render("ops", &["--set", "watchNamespace=team-a"]);
    // Cluster-wide, only the reviews of /metrics scrapers' tokens (cluster-scoped APIs) and the
    // scrapers' role.
    let cluster_wide: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "ClusterRoleBinding")
        .map(|d| {
            format!(
                "{} {}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let expected = [
        "ClusterRole swarm-operator-metrics-auth",
        "ClusterRole swarm-operator-metrics-reader",
        "ClusterRoleBinding swarm-operator-metrics-auth",
    ];
    assert_eq!(
        cluster_wide,
        expected.map(str::to_owned).into(),
        "no cluster-wide grant but the metrics reviews"
    );
    let reviews = find(&docs, "ClusterRole", "swarm-operator-metrics-auth");
    for rule in reviews["rules"].as_sequence().unwrap() {
        assert_eq!(rule["verbs"].as_sequence().unwrap(), &["create"]);
    }
    let role = find(&docs, "Role", "swarm-operator");
    assert_eq!(role["metadata"]["namespace"], "team-a");
    let binding = find(&docs, "RoleBinding", "swarm-operator");
    assert_eq!(binding["metadata"]["namespace"], "team-a");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    let lease_role = find(&docs, "Role", "swarm-operator-leader-election");
    assert_eq!(lease_role["metadata"]["namespace"], "ops");
    let rules = role["rules"].as_sequence().unwrap();
    assert!(
        !rules.iter().any(|r| r["verbs"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|v| v == "create")
            && r["resources"][0] == "leases"),
        "the leader-election grant stays in the Lease's namespace: {rules:?}"
    );
}

#[test]
fn the_lease_policy_trusts_this_releases_operator_and_worker_rbac_needs_namespaces() {
    let docs = render("ops", &["--set", "workerLeasePolicy.enabled=true"]);
    let policy = find(&docs, "ValidatingAdmissionPolicy", "swarm-worker-lease");
    let trusted = policy["spec"]["variables"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "trusted")
        .unwrap()["expression"]
        .as_str()
        .unwrap();
    assert!(
        trusted.contains("'system:serviceaccount:ops:swarm-operator'"),
        "{trusted}"
    );

    // Worker RBAC without a namespace to grant it in.
    assert_refused_naming("workerRbac.enabled=true", "workerRbac.namespaces");
}

/// `helm template --set <set>` must fail, its error naming `value`, the value to set.
fn assert_refused_naming(set: &str, value: &str) {
    let run = run_helm(&["template", RELEASE, CHART, "--set", set]);
    assert!(!run.success, "helm template --set {set} rendered");
    assert!(
        run.stderr.contains(value),
        "the error names the value to set, {value}: {}",
        run.stderr
    );
}

/// The operator's arguments as the chart renders them.
fn args_of(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment", "swarm-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_metrics_certificate_secret_is_mounted_reloaded_and_verified_by_the_service_monitor() {
    let docs = render(
        "ops",
        &[
            "--set",
            "monitoring.enabled=true",
            "--set",
            "metrics.port=9443",
            "--set",
            "metrics.certSecret=operator-metrics-tls",
            "--set",
            "monitoring.tlsServerName=swarm-operator-metrics.ops.svc",
        ],
    );
    let args = args_of(&docs);
    assert!(
        args.contains(&"--metrics-addr=0.0.0.0:9443".to_owned()),
        "{args:?}"
    );
    let mount_dir = "/var/run/secrets/swarm-operator/metrics-cert";
    assert!(
        args.contains(&format!("--metrics-cert-dir={mount_dir}")),
        "{args:?}"
    );
    let pod = &find(&docs, "Deployment", "swarm-operator")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["volumeMounts"][0]["mountPath"], mount_dir);
    assert_eq!(
        container["volumeMounts"][0]["name"],
        pod["volumes"][0]["name"]
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "operator-metrics-tls"
    );
    assert!(
        container["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics" && p["containerPort"] == 9443)
    );
    let service = find(&docs, "Service", "swarm-operator-metrics");
    assert_eq!(service["spec"]["ports"][0]["port"], 9443);
    let endpoint = &find(&docs, "ServiceMonitor", "swarm-operator")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    let tls = &endpoint["tlsConfig"];
    assert_eq!(tls["serverName"], "swarm-operator-metrics.ops.svc");
    assert_eq!(tls["ca"]["secret"]["name"], "operator-metrics-tls");
    assert_eq!(tls["ca"]["secret"]["key"], "ca.crt");
    assert!(tls.get("insecureSkipVerify").is_none(), "{tls:?}");
}

#[test]
fn insecure_metrics_are_plain_http_scraped_without_a_token() {
    let docs = render(
        "ops",
        &[
            "--set",
            "monitoring.enabled=true",
            "--set",
            "metrics.insecure=true",
        ],
    );
    assert!(args_of(&docs).contains(&"--metrics-insecure".to_owned()));
    let endpoint = &find(&docs, "ServiceMonitor", "swarm-operator")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "http");
    assert_eq!(endpoint["port"], "http");
    assert!(endpoint.get("bearerTokenFile").is_none());
    assert!(endpoint.get("tlsConfig").is_none());
    let service = find(&docs, "Service", "swarm-operator-metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "http");
}

/// An existing ServiceAccount, a pinned digest, and the platform's own security contexts,
/// arguments and environment.
const PLATFORM_VALUES: &[&str] = &[
    "--set",
    "serviceAccount.create=false,serviceAccount.name=ops-operator",
    "--set",
    "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "--set",
    "podSecurityContext.runAsUser=1000,podSecurityContext.fsGroup=2000",
    "--set",
    "securityContext.runAsUser=1000,securityContext.readOnlyRootFilesystem=true",
    "--set",
    "extraArgs[0]=--metrics-addr=0.0.0.0:9443",
    "--set",
    "extraEnv[0].name=HTTPS_PROXY,extraEnv[0].value=http://proxy:3128",
];

#[test]
fn a_platform_teams_service_account_digest_contexts_args_and_env_reach_every_reference() {
    let docs = render("ops", PLATFORM_VALUES);
    assert!(
        !docs.iter().any(|d| d["kind"] == "ServiceAccount"
            && d["metadata"]["namespace"] == "ops"
            && d["metadata"]["name"] == "swarm-operator"),
        "serviceAccount.create=false renders no ServiceAccount of the operator"
    );
    let pod = &find(&docs, "Deployment", "swarm-operator")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ops-operator");
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert_eq!(pod["securityContext"]["fsGroup"], 2000);
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "swarm-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "a digest replaces the tag"
    );
    assert_eq!(container["securityContext"]["runAsUser"], 1000);
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args.last(),
        Some(&"--metrics-addr=0.0.0.0:9443"),
        "{args:?}"
    );
    let env = container["env"].as_sequence().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "HTTPS_PROXY" && e["value"] == "http://proxy:3128"),
        "{env:?}"
    );
    assert!(
        env.iter().any(|e| e["name"] == "POD_NAME"),
        "the chart's own stay"
    );
    // Every binding of the operator names the account it runs as.
    for doc in docs.iter().filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some("RoleBinding" | "ClusterRoleBinding")
        ) && d["subjects"][0]["namespace"] == "ops"
    }) {
        assert_eq!(
            doc["subjects"][0]["name"],
            "ops-operator",
            "{}",
            show_key(&key(doc))
        );
    }
}

#[test]
fn the_worker_lease_policy_trusts_the_service_account_the_operator_runs_as() {
    let mut values = PLATFORM_VALUES.to_vec();
    values.extend(["--set", "workerLeasePolicy.enabled=true"]);
    let docs = render("ops", &values);
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the worker Lease policy");
    let text = serde_yaml::to_string(policy).unwrap();
    assert!(
        text.contains("system:serviceaccount:ops:ops-operator"),
        "{text}"
    );
}

#[test]
fn an_existing_service_account_must_be_named() {
    assert_refused_naming("serviceAccount.create=false", "serviceAccount.name");
}

/// The CRDs `helm template --set <values>` renders.
fn crds(values: &[&str]) -> Vec<Value> {
    render("ops", values)
        .into_iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect()
}

const KEEP: &str = "helm.sh/resource-policy";

#[test]
fn by_default_the_crd_is_rendered_and_kept_on_uninstall() {
    let crds = crds(&[]);
    assert_eq!(crds.len(), 1, "one CRD: {crds:?}");
    assert_eq!(crds[0]["metadata"]["name"], "swarmpools.swarm.io");
    assert_eq!(
        crds[0]["metadata"]["annotations"][KEEP], "keep",
        "crds.keep (the default) annotates the CRD {KEEP}: keep, or helm uninstall deletes it \
         and every SwarmPool"
    );
}

#[test]
fn crds_keep_false_renders_the_crd_without_the_keep_annotation() {
    let crds = crds(&["--set", "crds.keep=false"]);
    assert_eq!(crds.len(), 1, "one CRD: {crds:?}");
    assert!(
        crds[0]["metadata"].get("annotations").is_none(),
        "crds.keep=false: no annotation, {KEEP} least of all: {:?}",
        crds[0]["metadata"]
    );
    // Else, the CRD of crds/ with Helm's labels.
    let mut crd = crds[0].clone();
    crd["metadata"]
        .as_mapping_mut()
        .expect("metadata")
        .remove("labels");
    let source: Value = serde_yaml::from_str(&read("crds/swarmpool.yaml")).unwrap();
    let mut fields = Vec::new();
    diff("", Some(&source), Some(&crd), &mut fields);
    assert!(
        fields.is_empty(),
        "the chart's CRD is crds/swarmpool.yaml (the left, \"kustomize\", side): {fields:#?}"
    );
}

#[test]
fn crds_enabled_false_renders_no_crd() {
    let crds = crds(&["--set", "crds.enabled=false"]);
    assert!(
        crds.is_empty(),
        "crds.enabled=false renders no CRD: {:?}",
        crds.iter().map(|d| show_key(&key(d))).collect::<Vec<_>>()
    );
}
