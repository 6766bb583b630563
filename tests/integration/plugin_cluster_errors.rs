//! `kubectl-swarm` against clusters that cannot answer the question: the CRD not installed, a
//! pool the operator has not reconciled yet, no kubeconfig at all. Each is one line on stderr
//! that says what to do, with the exit code docs/operations.md gives.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client, Config, CustomResourceExt};
use swarm_operator::api::crd::SwarmPool;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs the plugin binary with `args`, with no kubeconfig but the one the arguments name.
async fn plugin(home: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-swarm"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .output()
        .await
        .expect("run kubectl-swarm")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The one line `output` printed on stderr, after checking its exit code.
fn one_line_error(output: &Output, code: i32) -> String {
    let text = stderr(output);
    assert_eq!(output.status.code(), Some(code), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    assert_eq!(text.lines().count(), 1, "one line: {text:?}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_says_what_is_missing_in_one_line_with_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let sim = kube_sim::Sim::start(kube_sim::SimConfig::default())
        .await
        .expect("start kube-sim");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig_arg = kubeconfig.to_str().unwrap();
    let run = |args: &'static [&'static str]| {
        let mut all = vec!["--kubeconfig", kubeconfig_arg];
        all.extend_from_slice(args);
        let home = dir.path().to_owned();
        async move { plugin(&home, &all).await }
    };

    // No CRD: the API server answers 404 for the resource, which is not "no such pool".
    for args in [
        &["status", "swarm-pool", "-n", "swarm"][..],
        &["plan", "swarm-pool", "-n", "swarm", "--replicas", "3"][..],
    ] {
        let text = one_line_error(&run(args).await, 3);
        assert!(
            text.starts_with("error: cannot read the SwarmPool: ")
                && text.contains(
                    "is the SwarmPool CRD installed? kubectl get crd swarmpools.swarm.io"
                ),
            "{text}"
        );
    }

    // The CRD and a pool, but no operator: no config yet.
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &SwarmPool::crd())
        .await
        .expect("install the CRD");
    let namespace: Namespace =
        serde_yaml::from_str(&std::fs::read_to_string(repo("examples/namespace.yaml")).unwrap())
            .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create the namespace");
    let pool: SwarmPool =
        serde_yaml::from_str(&std::fs::read_to_string(repo("examples/swarmpool.yaml")).unwrap())
            .unwrap();
    let pools = Api::<SwarmPool>::namespaced(client, "swarm");
    let mut attempts = 0;
    while let Err(e) = pools.create(&PostParams::default(), &pool).await {
        attempts += 1;
        assert!(attempts < 50, "the CRD is not served: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for args in [
        &["status", "swarm-pool", "-n", "swarm"][..],
        &["plan", "swarm-pool", "-n", "swarm", "--replicas", "3"][..],
    ] {
        let text = one_line_error(&run(args).await, 1);
        assert_eq!(
            text,
            "error: SwarmPool swarm/swarm-pool has no config yet (ConfigMap swarm-worker-config): \
             the operator has not reconciled it; check that it runs and \
             `kubectl describe swarmpool swarm-pool -n swarm`\n"
        );
    }
    let text = one_line_error(&run(&["status", "other-pool", "-n", "swarm"]).await, 1);
    assert_eq!(text, "error: no SwarmPool other-pool in namespace swarm\n");

    // No kubeconfig at all (none named, none in KUBECONFIG, none under HOME, not in a pod).
    let text = one_line_error(
        &plugin(dir.path(), &["status", "swarm-pool", "-n", "swarm"]).await,
        3,
    );
    assert!(
        text.starts_with("error: no usable kubeconfig (")
            && text.ends_with("; set KUBECONFIG or pass --kubeconfig\n"),
        "{text}"
    );
    sim.shutdown().await;
}
