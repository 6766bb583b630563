//! The chart's `helm test` hook (`templates/tests/check.yaml`): a pod of the operator's image
//! runs `swarm-operator check` where the operator runs, as an account that may only list pods
//! and SwarmPools and read the leader Lease; it is no operator pod to the selectors that count
//! them. The real node's Helm scenario runs it (`helm test`).

use super::*;

/// The hook's documents, rendered with `values`.
fn hook(values: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        RELEASE,
        CHART,
        "--namespace",
        "swarm-system",
        "--show-only",
        "templates/tests/check.yaml",
    ];
    args.extend_from_slice(values);
    let run = run_helm(&args);
    assert!(run.success, "helm {}: {}", args.join(" "), run.stderr);
    documents(&run.stdout, "the helm test hook")
}

fn the<'a>(docs: &'a [Value], kind: &str, namespace: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["namespace"] == namespace)
        .unwrap_or_else(|| panic!("no {kind} in {namespace}: {docs:?}"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_test_pod_checks_the_release_with_the_operators_image_placement_and_lease() {
    let docs = hook(&[
        "--set",
        "image.repository=registry.example/swarm-operator,image.tag=v9",
        "--set",
        "nodeSelector.pool=system,leaderElection.leaseName=ops-lease",
    ]);
    let pod = the(&docs, "Pod", "swarm-system");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
        "before-hook-creation,hook-succeeded",
        "a passed check leaves nothing behind; a failed one's pod stays for its log"
    );
    assert_ne!(
        pod["metadata"]["labels"]["app.kubernetes.io/name"], "swarm-operator",
        "the operator's selector must not count the test pod"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(
        spec["nodeSelector"]["pool"], "system",
        "it runs where the operator runs"
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "registry.example/swarm-operator:v9");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        strings(&container["args"]),
        [
            "check",
            "--namespace=swarm-system",
            "--selector=app.kubernetes.io/name=swarm-operator",
            "--lease=ops-lease",
            "--lease-namespace=swarm-system",
            "--timeout=60",
        ]
    );
    let account = spec["serviceAccountName"]
        .as_str()
        .expect("its own account");
    assert_ne!(account, "swarm-operator", "not the operator's account");
    let role = the(&docs, "Role", "swarm-system");
    let verbs: Vec<String> = role["rules"]
        .as_sequence()
        .expect("rules")
        .iter()
        .flat_map(|rule| strings(&rule["verbs"]))
        .collect();
    assert!(
        verbs.iter().all(|verb| verb == "list" || verb == "get"),
        "it only reads: {verbs:?}"
    );
    let binding = the(&docs, "RoleBinding", "swarm-system");
    assert_eq!(binding["subjects"][0]["name"], account);
}

#[test]
fn a_lease_in_another_namespace_is_read_there_and_no_lease_without_leader_election() {
    let docs = hook(&["--set", "leaderElection.namespace=leases"]);
    let role = the(&docs, "Role", "leases");
    assert_eq!(role["rules"][0]["resources"][0], "leases");
    let pod = the(&docs, "Pod", "swarm-system");
    assert!(
        strings(&pod["spec"]["containers"][0]["args"])
            .contains(&"--lease-namespace=leases".to_owned())
    );

    let docs = hook(&["--set", "leaderElection.enabled=false,replicas=1"]);
    let pod = the(&docs, "Pod", "swarm-system");
    let args = strings(&pod["spec"]["containers"][0]["args"]);
    assert!(
        !args.iter().any(|arg| arg.starts_with("--lease")),
        "{args:?}"
    );
    assert!(!serde_yaml::to_string(&docs).unwrap().contains("leases"));
}
