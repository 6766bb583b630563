//! The Helm chart (`charts/swarm-operator`) installs what `deploy/` does and cannot drift from
//! it: `helm template` of the chart, with its default values and with the values of each
//! overlay, is compared object by object (apiVersion, kind, namespace, name) and field by field
//! with `kubectl kustomize` of `deploy/`, `deploy/overlays/namespaced`,
//! `deploy/overlays/monitoring`, `deploy/worker-rbac` and `deploy/worker-lease-policy`. They
//! may differ in three ways only, all checked here rather than ignored: the chart adds Helm's
//! own labels (`helm.sh/chart`, `app.kubernetes.io/managed-by: Helm`, `app.kubernetes.io/instance`
//! on every object, `app.kubernetes.io/instance` on the operator's pods), it annotates the CRD
//! `helm.sh/resource-policy: keep` (`crds.keep`: `helm uninstall` leaves the CRD, and so every
//! pool), and it renders no Namespace: Helm installs into the release namespace, which
//! `helm install --create-namespace` creates (a chart that owned its namespace would delete it,
//! and every pool in it, on `helm uninstall`). The files the chart copies from the repository
//! (the CRD, the alerts, the dashboard) are byte-identical to theirs; `values.schema.json`,
//! `values.yaml` and the README's table (written by helm-docs) list the same values, and the
//! schema rejects a wrong type naming the field; `helm lint --strict` passes.
//!
//! helm is the binary `SWARM_HELM` names, else the one `scripts/install-helm.sh` builds once
//! from the Go module pinned in `hack/helm/go.mod` (several minutes the first time); helm-docs,
//! likewise, `SWARM_HELM_DOCS` or `scripts/install-helm-docs.sh` (`hack/helm-docs/go.mod`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_yaml::Value;

use crate::{cargo_env, kubectl};

const CHART: &str = "charts/swarm-operator";
/// The release name of every rendering: names do not depend on it, the instance label does.
const RELEASE: &str = "swarm-operator";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A pinned Go tool: the binary `env_var` names, else the one `script` builds (once) and prints.
pub(crate) fn pinned_tool(env_var: &str, script: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{env_var}={} does not name a file; unset it to build the pinned one with \
                 {script}",
                path.display()
            ))
        };
    }
    eprintln!("{env_var} is unset: building or reusing the pinned one ({script})");
    let mut command = Command::new(repo(script));
    cargo_env::without_test_env(&mut command);
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().next_back().map(PathBuf::from) {
        Some(path) if output.status.success() && path.is_file() => Ok(path),
        _ => Err(format!(
            "{script} failed ({}; its output is above, stdout: {stdout:?}). It needs Go the \
             first time; or set {env_var} to a binary",
            output.status
        )),
    }
}

/// helm: `SWARM_HELM`, else built (once for all the tests of this module) by
/// `scripts/install-helm.sh`.
fn helm() -> &'static Path {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match HELM.get_or_init(|| pinned_tool("SWARM_HELM", "scripts/install-helm.sh")) {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// What one helm run printed, and whether it succeeded.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

/// `helm <args>` from the repository root, with a private home (no repositories, no plugins).
fn run_helm(args: &[&str]) -> Run {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let output = Command::new(helm())
        .args(args)
        .current_dir(repo(""))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm().display()));
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn documents(text: &str, what: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// `helm template swarm-operator charts/swarm-operator --namespace <namespace> --include-crds
/// --skip-tests <values>`, as documents. The CRD is a template; `--include-crds` would add a CRD
/// put back in `crds/` (which Helm never upgrades), and `by_key` refuses the CRD twice. The
/// `helm test` hook is `test_hook`'s.
fn render(namespace: &str, values: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        RELEASE,
        CHART,
        "--namespace",
        namespace,
        "--include-crds",
        "--skip-tests",
    ];
    args.extend_from_slice(values);
    let run = run_helm(&args);
    assert!(
        run.success,
        "helm {} failed: {}",
        args.join(" "),
        run.stderr
    );
    documents(&run.stdout, &format!("helm {}", args.join(" ")))
}

/// `kubectl kustomize <dir>`, as documents (the monitoring tests read them too).
pub(crate) fn kustomize(dir: &str) -> Vec<Value> {
    let output = Command::new(kubectl::locate())
        .args(["kustomize", dir])
        .current_dir(repo(""))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(
        &String::from_utf8(output.stdout).expect("UTF-8"),
        &format!("kubectl kustomize {dir}"),
    )
}

/// An object's identity: apiVersion, kind, namespace (empty when cluster-scoped), name.
type Key = (String, String, String, String);

fn key(doc: &Value) -> Key {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    (
        text(&doc["apiVersion"]),
        text(&doc["kind"]),
        text(&doc["metadata"]["namespace"]),
        text(&doc["metadata"]["name"]),
    )
}

fn show_key((api_version, kind, namespace, name): &Key) -> String {
    if namespace.is_empty() {
        format!("{api_version} {kind} {name}")
    } else {
        format!("{api_version} {kind} {namespace}/{name}")
    }
}

fn by_key(docs: Vec<Value>, what: &str) -> BTreeMap<Key, Value> {
    let mut objects = BTreeMap::new();
    for doc in docs {
        let key = key(&doc);
        assert!(
            !key.1.is_empty() && !key.3.is_empty(),
            "{what}: an object without kind or name: {doc:?}"
        );
        if objects.insert(key.clone(), doc).is_some() {
            panic!("{what} renders {} twice", show_key(&key));
        }
    }
    objects
}

/// One line for a value in a failure message.
fn show(value: Option<&Value>) -> String {
    match value {
        None => "(absent)".to_owned(),
        Some(value) => serde_json::to_string(value).unwrap_or_else(|_| format!("{value:?}")),
    }
}

/// Every field where `helm` differs from `kustomize`, as `<path>: kustomize <v>, helm <v>`.
fn diff(path: &str, kustomize: Option<&Value>, helm: Option<&Value>, out: &mut Vec<String>) {
    match (kustomize, helm) {
        (Some(Value::Mapping(k)), Some(Value::Mapping(h))) => {
            let mut keys: Vec<&Value> = k.keys().chain(h.keys()).collect();
            keys.sort_by_key(|key| show(Some(key)));
            keys.dedup();
            for field in keys {
                let name = field
                    .as_str()
                    .map_or_else(|| show(Some(field)), str::to_owned);
                diff(&format!("{path}.{name}"), k.get(field), h.get(field), out);
            }
        }
        (Some(Value::Sequence(k)), Some(Value::Sequence(h))) => {
            for i in 0..k.len().max(h.len()) {
                diff(&format!("{path}[{i}]"), k.get(i), h.get(i), out);
            }
        }
        // kustomize writes the CRD's `minimum: 1.0` as `1`: the same JSON number to the API
        // server.
        (Some(Value::Number(k)), Some(Value::Number(h))) if k.as_f64() == h.as_f64() => {}
        (k, h) if k != h => out.push(format!("{path}: kustomize {}, helm {}", show(k), show(h))),
        _ => {}
    }
}

/// The chart's version, from Chart.yaml (the value of `helm.sh/chart` is `swarm-operator-<it>`).
fn chart_yaml() -> Value {
    serde_yaml::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml")
}

/// Removes from `entries` (the labels or annotations at `path` of `object`) Helm's, named in
/// `expected`, checking that each is there with its value.
fn take_entries(
    object: &str,
    path: &str,
    entries: Option<&mut Value>,
    expected: &[(&str, String)],
    problems: &mut Vec<String>,
) {
    let Some(Value::Mapping(entries)) = entries else {
        problems.push(format!("{object}: {path}: none, where Helm's should be"));
        return;
    };
    for (name, value) in expected {
        match entries.remove(*name) {
            Some(Value::String(got)) if got == *value => {}
            got => problems.push(format!(
                "{object}: {path}.{name}: should be {value:?} (Helm's), is {}",
                show(got.as_ref())
            )),
        }
    }
}

/// The chart's object without what only a Helm release has: the labels `helm.sh/chart`,
/// `app.kubernetes.io/managed-by` and `app.kubernetes.io/instance` on every object (the CRD,
/// which has no other, loses its `labels` with them), `app.kubernetes.io/instance` on the
/// operator's pods, and the CRD's annotation `helm.sh/resource-policy: keep` (`crds.keep`,
/// on by default).
fn without_helm_metadata(mut doc: Value, problems: &mut Vec<String>) -> Value {
    let object = show_key(&key(&doc));
    let chart = format!(
        "swarm-operator-{}",
        chart_yaml()["version"]
            .as_str()
            .expect("Chart.yaml version")
    );
    let instance = ("app.kubernetes.io/instance", RELEASE.to_owned());
    take_entries(
        &object,
        "metadata.labels",
        doc.get_mut("metadata").and_then(|m| m.get_mut("labels")),
        &[
            ("helm.sh/chart", chart),
            ("app.kubernetes.io/managed-by", "Helm".to_owned()),
            instance.clone(),
        ],
        problems,
    );
    if doc["kind"] == "Deployment" {
        take_entries(
            &object,
            "spec.template.metadata.labels",
            doc.get_mut("spec")
                .and_then(|s| s.get_mut("template"))
                .and_then(|t| t.get_mut("metadata"))
                .and_then(|m| m.get_mut("labels")),
            &[instance],
            problems,
        );
    }
    if doc["kind"] == "CustomResourceDefinition" {
        let metadata = doc.get_mut("metadata").expect("metadata");
        take_entries(
            &object,
            "metadata.annotations",
            metadata.get_mut("annotations"),
            &[("helm.sh/resource-policy", "keep".to_owned())],
            problems,
        );
        let metadata = metadata.as_mapping_mut().expect("a mapping");
        for field in ["labels", "annotations"] {
            if metadata
                .get(field)
                .and_then(Value::as_mapping)
                .is_some_and(serde_yaml::Mapping::is_empty)
            {
                metadata.remove(field);
            }
        }
    }
    doc
}

/// Takes from `kustomized` the one Namespace, `namespace`: Helm's release namespace, which the
/// chart does not render (`helm install --create-namespace` creates it).
fn without_the_release_namespace(kustomized: Vec<Value>, namespace: &str) -> Vec<Value> {
    let (namespaces, rest): (Vec<Value>, Vec<Value>) = kustomized
        .into_iter()
        .partition(|doc| doc["kind"] == "Namespace");
    let names: Vec<&str> = namespaces
        .iter()
        .map(|doc| doc["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [namespace],
        "kustomize installs exactly one Namespace, the one the chart is installed into"
    );
    rest
}

/// Compares the chart rendered with `values` in `namespace` with `kustomized` (less its
/// Namespace, which must be `namespace`): the same objects, field by field, but Helm's labels.
fn assert_renders(kustomized: Vec<Value>, namespace: &str, values: &[&str], what: &str) {
    let expected = by_key(
        without_the_release_namespace(kustomized, namespace),
        "kubectl kustomize",
    );
    let rendered = render(namespace, values);
    let mut problems = Vec::new();
    for doc in &rendered {
        if doc["kind"] == "Namespace" {
            problems.push(format!(
                "the chart renders {}: it should install into the release namespace only",
                show_key(&key(doc))
            ));
        }
    }
    let rendered = by_key(
        rendered
            .into_iter()
            .filter(|doc| doc["kind"] != "Namespace")
            .map(|doc| without_helm_metadata(doc, &mut problems))
            .collect(),
        "helm template",
    );
    for (key, object) in &expected {
        match rendered.get(key) {
            None => problems.push(format!(
                "{}: in kustomize's output, not rendered by the chart",
                show_key(key)
            )),
            Some(chart) => {
                let mut fields = Vec::new();
                diff("", Some(object), Some(chart), &mut fields);
                problems.extend(
                    fields
                        .into_iter()
                        .map(|field| format!("{}: {field}", show_key(key))),
                );
            }
        }
    }
    for key in rendered.keys().filter(|key| !expected.contains_key(*key)) {
        problems.push(format!(
            "{}: rendered by the chart, not in kustomize's output",
            show_key(key)
        ));
    }
    assert!(
        problems.is_empty(),
        "helm template {RELEASE} {CHART} --namespace {namespace}{} differs from {what} \
         (beyond Helm's labels, the CRD's keep annotation and the release Namespace):\n  {}",
        values.iter().map(|v| format!(" {v}")).collect::<String>(),
        problems.join("\n  ")
    );
}

#[test]
fn the_default_values_render_deploy() {
    assert_renders(
        kustomize("deploy"),
        "swarm-system",
        &[],
        "kubectl kustomize deploy",
    );
}

#[test]
fn a_watched_namespace_renders_the_namespaced_overlay() {
    assert_renders(
        kustomize("deploy/overlays/namespaced"),
        "swarm",
        &["--set", "watchNamespace=swarm"],
        "kubectl kustomize deploy/overlays/namespaced",
    );
}

#[test]
fn monitoring_renders_the_monitoring_overlay() {
    assert_renders(
        kustomize("deploy/overlays/monitoring"),
        "swarm-system",
        &["--set", "monitoring.enabled=true"],
        "kubectl kustomize deploy/overlays/monitoring",
    );
}

#[test]
fn worker_rbac_and_the_lease_policy_render_their_kustomizations() {
    let mut expected = kustomize("deploy");
    expected.extend(kustomize("deploy/worker-rbac"));
    expected.extend(kustomize("deploy/worker-lease-policy"));
    assert_renders(
        expected,
        "swarm-system",
        &[
            "--set",
            "workerRbac.enabled=true",
            "--set",
            "workerRbac.namespaces={swarm}",
            "--set",
            "workerLeasePolicy.enabled=true",
        ],
        "kubectl kustomize of deploy, deploy/worker-rbac and deploy/worker-lease-policy",
    );
}

#[test]
fn the_files_the_chart_copies_are_the_repositorys() {
    for (copy, original) in [
        (
            "charts/swarm-operator/files/crds/swarmpool.yaml",
            "crds/swarmpool.yaml",
        ),
        (
            "charts/swarm-operator/files/prometheus_rule.yaml",
            "deploy/monitoring/prometheus_rule.yaml",
        ),
        (
            "charts/swarm-operator/files/dashboards/swarm-operator.json",
            "deploy/monitoring/dashboards/swarm-operator.json",
        ),
    ] {
        let (copied, source) = (read(copy), read(original));
        if copied != source {
            let line = copied
                .lines()
                .zip(source.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| copied.lines().count().min(source.lines().count()));
            panic!(
                "{copy} differs from {original} from line {}: {:?} there, {:?} in the \
                 original; run `cp {original} {copy}`",
                line + 1,
                copied.lines().nth(line).unwrap_or("(end of file)"),
                source.lines().nth(line).unwrap_or("(end of file)"),
            );
        }
    }
}

#[test]
fn the_charts_app_version_is_the_operators() {
    assert_eq!(
        chart_yaml()["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "{CHART}/Chart.yaml appVersion is the version of the swarm-operator package"
    );
}

#[test]
fn the_artifact_hub_annotations_name_the_crd_and_the_licence() {
    let chart = chart_yaml();
    let annotations = &chart["annotations"];
    assert_eq!(
        annotations["artifacthub.io/license"].as_str(),
        Some(env!("CARGO_PKG_LICENSE")),
        "{CHART}/Chart.yaml's licence is the workspace's"
    );
    let listed: Vec<Value> =
        serde_yaml::from_str(annotations["artifacthub.io/crds"].as_str().expect("crds")).unwrap();
    let crd: Value = serde_yaml::from_str(&read("crds/swarmpool.yaml")).unwrap();
    let served: Vec<&Value> = crd["spec"]["versions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|version| &version["name"])
        .collect();
    assert_eq!(listed.len(), 1, "one CRD: {listed:?}");
    assert_eq!(listed[0]["name"], crd["metadata"]["name"]);
    assert_eq!(listed[0]["kind"], crd["spec"]["names"]["kind"]);
    assert!(
        served.contains(&&listed[0]["version"]),
        "{:?} is a version crds/swarmpool.yaml serves ({served:?})",
        listed[0]["version"]
    );
}

/// The values: the schema, the README's table and helm-docs, lint, and each value reaching what
/// it sets.
mod test_hook;
mod values;
