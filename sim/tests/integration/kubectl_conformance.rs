//! kubectl 1.37 driving the simulation (case 24 of the sim spec): `apply` (client-side and
//! server-side), `scale`, `get` with a CRD's printer columns, `get -w`, `wait` and `delete`.
//!
//! kubectl is found through `$KUBECTL`, then `<workspace>/.tools/bin/kubectl`, then `PATH`,
//! and must be 1.37 or newer; `scripts/install-kubectl.sh` installs the pinned version into
//! `.tools`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube_sim::{Sim, SimConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Upper bound for one kubectl invocation; never a performance goal.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// The oldest kubectl whose behaviour (aggregated discovery, `sendInitialEvents` watches)
/// these checks are about.
const MIN_KUBECTL_MINOR: u32 = 37;

fn find_kubectl() -> PathBuf {
    let install_hint = "run scripts/install-kubectl.sh to install the pinned kubectl into \
                        .tools/bin/kubectl, or set KUBECTL";
    let found = if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "KUBECTL names {}, which does not exist; {install_hint}",
            path.display()
        );
        path
    } else {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the sim crate lives inside the workspace");
        let local = workspace.join(".tools/bin/kubectl");
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("kubectl"))
                .find(|candidate| candidate.is_file())
        });
        match (local.is_file(), on_path) {
            (true, _) => local,
            (false, Some(path)) => path,
            (false, None) => panic!("kubectl not found; {install_hint}"),
        }
    };
    let minor = client_minor_version(&found);
    assert!(
        minor.is_some_and(|m| m >= MIN_KUBECTL_MINOR),
        "{} is kubectl 1.{}, older than 1.{MIN_KUBECTL_MINOR}; {install_hint}",
        found.display(),
        minor.map_or_else(|| "?".to_string(), |m| m.to_string()),
    );
    found
}

/// The client's minor version from `kubectl version --client -o json`.
fn client_minor_version(kubectl: &Path) -> Option<u32> {
    let output = std::process::Command::new(kubectl)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()?;
    let version: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let minor = version["clientVersion"]["minor"].as_str()?;
    // Some builds report "37+".
    minor.trim_end_matches('+').parse().ok()
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// kubectl bound to one simulation's kubeconfig and a private discovery cache.
struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(sim: &Sim) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig is written");
        Self {
            binary: find_kubectl(),
            dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        let future = self.command(args).output();
        let output = tokio::time::timeout(COMMAND_TIMEOUT, future)
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
            .expect("kubectl runs");
        Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl and returns stdout, failing the test when kubectl fails.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.success,
            "kubectl {args:?} failed\nstdout: {}\nstderr: {}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// Runs kubectl expecting failure and returns stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            !out.success,
            "kubectl {args:?} should have failed\nstdout: {}",
            out.stdout
        );
        out.stderr
    }

    fn manifest(&self, name: &str, yaml: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).expect("manifest is written");
        path.to_string_lossy().into_owned()
    }
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.kube-sim.io
spec:
  group: example.kube-sim.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      additionalPrinterColumns:
        - {name: Size, type: integer, jsonPath: .spec.size}
        - {name: Color, type: string, jsonPath: .spec.color}
        - {name: Phase, type: string, jsonPath: .status.phase}
        - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer, minimum: 1}
                color: {type: string}
            status:
              type: object
              properties:
                phase: {type: string}
"#;

const WIDGET: &str = r#"
apiVersion: example.kube-sim.io/v1
kind: Widget
metadata: {name: small, namespace: default}
spec: {size: 3, color: blue}
"#;

fn statefulset(annotation: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
  annotations: {{note: "{annotation}"}}
spec:
  replicas: 1
  serviceName: web
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: worker
          image: busybox:1.36
          env: [{{name: MODE, value: test}}]
"#
    )
}

fn config_map(mode: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: default}}\ndata: {{mode: {mode}}}\n"
    )
}

/// Splits kubectl's table output into rows of cells, cutting each line at the columns where
/// the header's titles start, so an empty cell stays an empty string.
fn table(stdout: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    std::iter::once(header)
        .chain(lines)
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(n, &start)| {
                    let end = starts
                        .get(n + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    line.get(start.min(end)..end)
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_scales_gets_watches_waits_and_deletes_against_the_simulation() {
    let config = SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await.expect("simulation starts");
    let k = Kubectl::new(&sim);

    // Client and server versions agree closely enough for kubectl not to warn about skew.
    let version = k.ok(&["version", "-o", "json"]).await;
    let version: serde_json::Value = serde_json::from_str(&version).expect("version is JSON");
    assert!(
        version["serverVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.36")),
        "{version}"
    );

    // A CRD: apply, wait for Established, then a custom resource printed with its columns.
    let crd = k.manifest("crd.yaml", CRD);
    let out = k.ok(&["apply", "-f", &crd]).await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/widgets.example.kube-sim.io created"
        ),
        "{out}"
    );
    let out = k
        .ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.kube-sim.io",
            "--timeout=30s",
        ])
        .await;
    assert!(out.contains("condition met"), "{out}");
    let widget = k.manifest("widget.yaml", WIDGET);
    let out = k.ok(&["apply", "-f", &widget]).await;
    assert!(
        out.contains("widget.example.kube-sim.io/small created"),
        "{out}"
    );
    let rows = table(&k.ok(&["get", "widgets"]).await);
    assert_eq!(rows[0], ["NAME", "SIZE", "COLOR", "PHASE", "AGE"]);
    // A printer column whose path is missing is a null cell, which kubectl leaves blank.
    assert_eq!(rows[1][..4], ["small", "3", "blue", ""], "{rows:?}");
    let out = k.ok(&["apply", "-f", &widget]).await;
    assert!(
        out.contains("widget.example.kube-sim.io/small unchanged"),
        "{out}"
    );

    // Server-side apply: a second manager conflicts on the same field unless it forces.
    let alice = k.manifest("cm-alice.yaml", &config_map("fast"));
    let bob = k.manifest("cm-bob.yaml", &config_map("safe"));
    let out = k
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=alice",
            "-f",
            &alice,
        ])
        .await;
    assert!(
        out.contains("configmap/settings serverside-applied"),
        "{out}"
    );
    let err = k
        .fails(&["apply", "--server-side", "--field-manager=bob", "-f", &bob])
        .await;
    assert!(err.contains("conflict"), "{err}");
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=bob",
        "--force-conflicts",
        "-f",
        &bob,
    ])
    .await;
    let mode = k
        .ok(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode}",
        ])
        .await;
    assert_eq!(mode, "safe");

    // A StatefulSet: client-side apply, readiness, re-apply (strategic merge), scale.
    let sts = k.manifest("sts.yaml", &statefulset("one"));
    let out = k.ok(&["apply", "-f", &sts]).await;
    assert!(out.contains("statefulset.apps/web created"), "{out}");
    let out = k
        .ok(&[
            "wait",
            "--for=condition=Ready",
            "pod/web-0",
            "--timeout=60s",
        ])
        .await;
    assert!(out.contains("pod/web-0 condition met"), "{out}");
    let sts = k.manifest("sts.yaml", &statefulset("two"));
    let out = k.ok(&["apply", "-f", &sts]).await;
    assert!(out.contains("statefulset.apps/web configured"), "{out}");
    let note = k
        .ok(&[
            "get",
            "sts",
            "web",
            "-o",
            "jsonpath={.metadata.annotations.note}",
        ])
        .await;
    assert_eq!(note, "two");
    let out = k.ok(&["scale", "statefulset", "web", "--replicas=3"]).await;
    assert!(out.contains("statefulset.apps/web scaled"), "{out}");
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.readyReplicas}=3",
        "statefulset/web",
        "--timeout=60s",
    ])
    .await;
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(
        pods.lines().collect::<Vec<_>>(),
        ["pod/web-0", "pod/web-1", "pod/web-2"]
    );
    let rows = table(&k.ok(&["get", "pods", "-l", "app=web"]).await);
    assert_eq!(rows[0][0], "NAME");
    assert_eq!(rows.len(), 4, "{rows:?}");

    // `get -w` prints the current row, then a row per change.
    let mut watch = k
        .command(&["get", "widgets", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl get -w starts");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout is piped")).lines();
    let mut next_line = async || {
        tokio::time::timeout(COMMAND_TIMEOUT, lines.next_line())
            .await
            .expect("kubectl get -w prints in time")
            .expect("stdout is readable")
            .expect("kubectl get -w keeps running")
    };
    let header = next_line().await;
    assert!(header.starts_with("NAME"), "{header}");
    let first = next_line().await;
    assert!(
        first.starts_with("small") && first.contains(" 3 "),
        "{first}"
    );
    k.ok(&[
        "patch",
        "widget",
        "small",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":5}}"#,
    ])
    .await;
    let changed = next_line().await;
    let cells: Vec<&str> = changed.split_whitespace().collect();
    assert_eq!(cells[..3], ["small", "5", "blue"], "{changed}");
    watch.kill().await.expect("kubectl get -w stops");

    // Delete: a custom resource, then the set in the foreground (kubectl waits for it).
    let out = k.ok(&["delete", "widget", "small"]).await;
    assert!(
        out.contains(r#"widget.example.kube-sim.io "small" deleted"#),
        "{out}"
    );
    let out = k
        .ok(&[
            "delete",
            "statefulset",
            "web",
            "--cascade=foreground",
            "--timeout=60s",
        ])
        .await;
    assert!(out.contains(r#"statefulset.apps "web" deleted"#), "{out}");
    let err = k.fails(&["get", "statefulset", "web"]).await;
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(
        pods.trim(),
        "",
        "foreground deletion removed the pods before the set"
    );
    let out = k.ok(&["delete", "-f", &crd]).await;
    assert!(out.contains("deleted"), "{out}");

    sim.shutdown().await;
}

const POD_COLUMN_FIXTURES: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: unowned, namespace: default, ownerReferences: [], finalizers: []}
data: {mode: test}
---
apiVersion: v1
kind: Pod
metadata: {name: held, namespace: default, finalizers: [example.kube-sim.io/hold]}
spec:
  containers: [{name: worker, image: busybox:1.36}]
---
apiVersion: v1
kind: Pod
metadata: {name: pending, namespace: default}
spec:
  containers: [{name: worker, image: busybox:1.36}]
  volumes: [{name: config, configMap: {name: missing}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_server_side_pod_and_statefulset_columns_and_none_for_an_absent_owner() {
    let config = SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await.expect("simulation starts");
    let k = Kubectl::new(&sim);
    let sts = k.manifest("sts.yaml", &statefulset("one"));
    k.ok(&["apply", "-f", &sts]).await;
    k.ok(&["scale", "statefulset", "web", "--replicas=2"]).await;
    let fixtures = k.manifest("fixtures.yaml", POD_COLUMN_FIXTURES);
    k.ok(&["create", "-f", &fixtures]).await;
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.readyReplicas}=2",
        "statefulset/web",
        "--timeout=60s",
    ])
    .await;
    k.ok(&["wait", "--for=condition=Ready", "pod/held", "--timeout=60s"])
        .await;
    k.ok(&[
        "wait",
        "--for=condition=PodScheduled",
        "pod/pending",
        "--timeout=60s",
    ])
    .await;

    // An empty ownerReferences list is not stored, so indexing it prints <none>.
    let rows = table(
        &k.ok(&[
            "get",
            "configmap",
            "unowned",
            "-o",
            "custom-columns=OWNER:.metadata.ownerReferences[0].uid,FIN:.metadata.finalizers[0]",
        ])
        .await,
    );
    assert_eq!(rows, [["OWNER", "FIN"], ["<none>", "<none>"]]);

    let rows = table(&k.ok(&["get", "statefulsets"]).await);
    assert_eq!(rows[0], ["NAME", "READY", "AGE"]);
    assert_eq!(rows[1][..2], ["web", "2/2"], "{rows:?}");

    // The finalizer keeps the deleted pod Terminating after its grace period.
    k.ok(&["delete", "pod", "held", "--wait=false"]).await;
    let rows = table(&k.ok(&["get", "pods"]).await);
    assert_eq!(rows[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let cells: Vec<&[String]> = rows[1..].iter().map(|r| &r[..4]).collect();
    assert_eq!(cells.len(), 4, "{rows:?}");
    assert_eq!(cells[0][0], "held");
    assert_eq!(cells[0][2], "Terminating", "{rows:?}");
    assert_eq!(cells[1], ["pending", "0/1", "Pending", "0"], "{rows:?}");
    assert_eq!(cells[2], ["web-0", "1/1", "Running", "0"], "{rows:?}");
    assert_eq!(cells[3], ["web-1", "1/1", "Running", "0"], "{rows:?}");

    k.ok(&[
        "patch",
        "pod",
        "held",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .await;
    sim.shutdown().await;
}

/// `kubectl create <generator>` sends its objects as protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf_that_the_simulation_decodes() {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("simulation starts");
    let k = Kubectl::new(&sim);

    let out = k.ok(&["create", "namespace", "demo"]).await;
    assert!(out.contains("namespace/demo created"), "{out}");
    let phase = k
        .ok(&["get", "namespace", "demo", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(phase, "Active");

    let binary = k.manifest("blob.bin", "");
    std::fs::write(&binary, [0u8, 159, 255]).expect("binary file is written");
    let out = k
        .ok(&[
            "-n",
            "demo",
            "create",
            "configmap",
            "foo",
            "--from-literal=a=b",
            &format!("--from-file=blob={binary}"),
        ])
        .await;
    assert!(out.contains("configmap/foo created"), "{out}");
    let cm = k
        .ok(&["-n", "demo", "get", "configmap", "foo", "-o", "json"])
        .await;
    let cm: serde_json::Value = serde_json::from_str(&cm).expect("JSON");
    assert_eq!(cm["data"], serde_json::json!({"a": "b"}), "{cm}");
    assert_eq!(
        cm["binaryData"],
        serde_json::json!({"blob": "AJ//"}),
        "{cm}"
    );

    k.ok(&[
        "-n",
        "demo",
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=token=s3cret",
    ])
    .await;
    let token = k
        .ok(&[
            "-n",
            "demo",
            "get",
            "secret",
            "creds",
            "-o",
            "jsonpath={.data.token}",
        ])
        .await;
    assert_eq!(token, "czNjcmV0");
    k.ok(&["-n", "demo", "create", "serviceaccount", "robot"])
        .await;
    k.ok(&[
        "-n",
        "demo",
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods",
    ])
    .await;
    k.ok(&[
        "-n",
        "demo",
        "create",
        "rolebinding",
        "robot-reads",
        "--role=reader",
        "--serviceaccount=demo:robot",
    ])
    .await;
    let subject = k
        .ok(&[
            "-n",
            "demo",
            "get",
            "rolebinding",
            "robot-reads",
            "-o",
            "jsonpath={.subjects[0].name}",
        ])
        .await;
    assert_eq!(subject, "robot");
    k.ok(&[
        "-n",
        "demo",
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
    ])
    .await;
    let target = k
        .ok(&[
            "-n",
            "demo",
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.ports[0].targetPort}",
        ])
        .await;
    assert_eq!(target, "8080");

    // A kind the simulation does not decode from protobuf is refused by name.
    let err = k
        .fails(&["-n", "demo", "create", "job", "once", "--image=busybox"])
        .await;
    assert!(err.contains("Job (batch/v1)"), "{err}");
    sim.shutdown().await;
}

/// kube-sim authorizes everything, and answers access and rules reviews that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_is_always_yes() {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("simulation starts");
    let k = Kubectl::new(&sim);

    let out = k.ok(&["auth", "can-i", "create", "pods"]).await;
    assert_eq!(out.trim(), "yes");
    let out = k
        .ok(&[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "kube-system",
            "--as=bob",
        ])
        .await;
    assert_eq!(out.trim(), "yes");
    let out = k.ok(&["auth", "can-i", "get", "/healthz"]).await;
    assert_eq!(out.trim(), "yes");

    // One rule allows every verb on every resource, one every non-resource URL.
    let out = k.ok(&["auth", "can-i", "--list"]).await;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[1], ["*.*", "[]", "[]", "[*]"], "{out}");
    assert_eq!(rows[2], ["[*]", "[]", "[*]"], "{out}");

    let out = k
        .ok(&[
            "api-resources",
            "--api-group=authorization.k8s.io",
            "-o",
            "name",
        ])
        .await;
    assert!(
        out.lines()
            .any(|l| l == "selfsubjectaccessreviews.authorization.k8s.io"),
        "{out}"
    );
    sim.shutdown().await;
}

/// `kubectl explain` reads a custom resource's schema from `/openapi/v3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explains_a_custom_resource_from_its_crd_schema() {
    let sim = Sim::start(SimConfig::default())
        .await
        .expect("simulation starts");
    let k = Kubectl::new(&sim);
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/swarmpool.yaml");
    k.ok(&["apply", "-f", &crd.to_string_lossy()]).await;
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/swarmpools.swarm.io",
        "--timeout=30s",
    ])
    .await;

    let out = k.ok(&["explain", "swarmpool"]).await;
    assert!(out.contains("KIND:       SwarmPool"), "{out}");
    assert!(
        out.contains("SwarmPool shares a list of jobs over the workers"),
        "{out}"
    );
    assert!(out.contains("metadata\t<ObjectMeta>"), "{out}");
    assert!(out.contains("spec\t<Object> -required-"), "{out}");

    let out = k.ok(&["explain", "swarmpool.spec.rollout"]).await;
    assert!(out.contains("FIELD: rollout <Object>"), "{out}");
    assert!(
        out.contains("How workers whose job set changed pick up their new jobs."),
        "{out}"
    );
    assert!(out.contains("handoff\t<string>"), "{out}");
    assert!(out.contains("enum: Exclusive, Overlap"), "{out}");

    let out = k.ok(&["explain", "swarmpools.spec", "--recursive"]).await;
    for field in [
        "jobs\t<[]string> -required-",
        "rollout\t<Object>",
        "    policy\t<string>",
        "matchLabels\t<map[string]string>",
    ] {
        assert!(out.contains(field), "{field:?} in {out}");
    }

    // The metadata the schema refers to is in the document too.
    let out = k.ok(&["explain", "swarmpool.metadata.labels"]).await;
    assert!(out.contains("FIELD: labels <map[string]string>"), "{out}");

    // Objects are still applied with server-side field validation.
    let pool = k.manifest(
        "pool.yaml",
        "apiVersion: swarm.io/v1alpha1\nkind: SwarmPool\nmetadata: {name: p, namespace: default}\nspec: {jobs: [a], selector: {matchLabels: {app: w}}, colour: red}\n",
    );
    let err = k.fails(&["apply", "-f", &pool]).await;
    assert!(err.contains("unknown field \"spec.colour\""), "{err}");
    sim.shutdown().await;
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: busybox:1.36}]
"#;

/// The commands a user runs on a Deployment: apply, scale, `rollout restart` (a strategic
/// merge patch of the template's `restartedAt` annotation) and `rollout status`, which waits on
/// the Deployment controller's status and conditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_scales_restarts_and_waits_for_a_deployment_rollout() {
    let sim = Sim::start(SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    })
    .await
    .expect("simulation starts");
    let k = Kubectl::new(&sim);
    let manifest = k.manifest("deployment.yaml", DEPLOYMENT);
    let out = k.ok(&["apply", "-f", &manifest]).await;
    assert_eq!(out.trim(), "deployment.apps/web created");
    let status = ["rollout", "status", "deployment/web", "--timeout=60s"];
    let out = k.ok(&status).await;
    assert!(out.contains("successfully rolled out"), "{out}");

    k.ok(&["scale", "deployment", "web", "--replicas=3"]).await;
    k.ok(&status).await;
    let list_replica_sets = [
        "get",
        "replicasets",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ];
    let rs_before = k.ok(&list_replica_sets).await;

    let out = k.ok(&["rollout", "restart", "deployment/web"]).await;
    assert_eq!(out.trim(), "deployment.apps/web restarted");
    let out = k.ok(&status).await;
    assert!(out.contains("successfully rolled out"), "{out}");
    let rs_after = k.ok(&list_replica_sets).await;
    assert_eq!(rs_after.split_whitespace().count(), 2, "{rs_after}");
    let new_rs = rs_after
        .split_whitespace()
        .find(|rs| !rs_before.contains(rs))
        .expect("a new ReplicaSet");
    let pods = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await;
    let live: Vec<&str> = pods.split_whitespace().collect();
    // Terminating pods of the old ReplicaSet may still be listed for their grace period.
    assert!(
        live.iter().filter(|p| p.starts_with(new_rs)).count() == 3,
        "three pods of {new_rs}: {live:?}"
    );
    let out = k.ok(&["get", "deployment", "web"]).await;
    let row = table(&out).remove(1);
    assert_eq!(row[..4], ["web", "3/3", "3", "3"], "{out}");
    sim.shutdown().await;
}
