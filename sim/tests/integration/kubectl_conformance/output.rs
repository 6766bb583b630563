//! The tables `kubectl get` prints from the server's printer columns.

use kube_sim::{Sim, SimConfig};

use super::{Kubectl, statefulset, table};

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
