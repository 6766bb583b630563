//! What users do to objects with kubectl: apply (client-side and server-side), scale, wait,
//! `get -w`, `rollout restart` and `rollout status`, and delete.

use std::process::Stdio;

use kube_sim::{Sim, SimConfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{COMMAND_TIMEOUT, Kubectl, statefulset, table};

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

fn config_map(mode: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: default}}\ndata: {{mode: {mode}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_scales_gets_watches_waits_and_deletes_against_the_simulation() {
    let config = SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await.expect("simulation starts");
    let k = Kubectl::new(&sim);
    server_version_is_close_to_the_client(&k).await;
    let crd = custom_resource_is_served_with_its_printer_columns(&k).await;
    server_side_apply_conflicts_unless_forced(&k).await;
    statefulset_is_applied_reapplied_and_scaled(&k).await;
    get_watch_prints_the_current_row_then_a_row_per_change(&k).await;
    deletes_go_through_including_a_foreground_cascade(&k, &crd).await;
    sim.shutdown().await;
}

/// Client and server versions agree closely enough for kubectl not to warn about skew.
async fn server_version_is_close_to_the_client(k: &Kubectl) {
    let version = k.ok(&["version", "-o", "json"]).await;
    let version: serde_json::Value = serde_json::from_str(&version).expect("version is JSON");
    assert!(
        version["serverVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.36")),
        "{version}"
    );
}

/// A CRD: apply, wait for Established, then a custom resource printed with its columns.
/// Returns the CRD's manifest.
async fn custom_resource_is_served_with_its_printer_columns(k: &Kubectl) -> String {
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
    crd
}

/// Server-side apply: a second manager conflicts on the same field unless it forces.
async fn server_side_apply_conflicts_unless_forced(k: &Kubectl) {
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
}

/// A StatefulSet: client-side apply, readiness, re-apply (strategic merge), scale.
async fn statefulset_is_applied_reapplied_and_scaled(k: &Kubectl) {
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
}

/// `get -w` prints the current row, then a row per change.
async fn get_watch_prints_the_current_row_then_a_row_per_change(k: &Kubectl) {
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
}

/// Delete: a custom resource, then the set in the foreground (kubectl waits for it), then the
/// CRD.
async fn deletes_go_through_including_a_foreground_cascade(k: &Kubectl, crd: &str) {
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
    let out = k.ok(&["delete", "-f", crd]).await;
    assert!(out.contains("deleted"), "{out}");
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
