//! kubectl commands that rely on server APIs beyond reads and writes of JSON: the protobuf
//! bodies of `kubectl create <generator>`, authorization reviews, and the OpenAPI v3 document
//! `kubectl explain` reads.

use std::path::Path;

use kube_sim::{Sim, SimConfig};

use super::Kubectl;

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
    config_map_keeps_literal_and_binary_data(&k).await;
    secret_data_is_base64(&k).await;
    role_binding_names_its_service_account(&k).await;
    service_target_port_is_the_given_one(&k).await;

    // A kind the simulation does not decode from protobuf is refused by name.
    let err = k
        .fails(&["-n", "demo", "create", "job", "once", "--image=busybox"])
        .await;
    assert!(err.contains("Job (batch/v1)"), "{err}");
    sim.shutdown().await;
}

/// A ConfigMap from a literal and a file that is not UTF-8 (`binaryData`).
async fn config_map_keeps_literal_and_binary_data(k: &Kubectl) {
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
}

/// A generic Secret: its literal is stored base64-encoded.
async fn secret_data_is_base64(k: &Kubectl) {
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
}

/// A ServiceAccount, a Role and a RoleBinding granting it to the account.
async fn role_binding_names_its_service_account(k: &Kubectl) {
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
}

/// A ClusterIP Service: `--tcp=80:8080` makes 8080 the target port of port 80.
async fn service_target_port_is_the_given_one(k: &Kubectl) {
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
