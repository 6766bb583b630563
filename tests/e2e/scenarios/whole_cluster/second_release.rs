//! A second release of `charts/swarm-operator`, in the first one's namespace or in another, is
//! refused by Helm instead of running a second operator on the same pools: the chart names its
//! objects as `deploy/` does, whatever the release, so the second release would have to take
//! objects the first one owns. No operator process runs here (the Deployment's pods are kwok's):
//! what is checked is what Helm and the API server refuse. It needs helm (`SWARM_HELM`) and
//! skips with a note without it; it takes the cluster alone, as the chart's RBAC is
//! cluster-wide.

use crate::harness::helm::Helm;
use crate::harness::kubectl::Kubectl;
use crate::harness::real_cluster::{OPERATOR_NAMESPACE, RealCluster};
use crate::harness::{Env, repo_path, scenario};

const FIRST: &str = "swarm-operator";
const SECOND: &str = "swarm-operator-again";
/// Where the second release tries a cluster-wide install of its own.
const OTHER_NAMESPACE: &str = "swarm-again";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_release_of_the_chart_is_refused_instead_of_running_a_second_operator() {
    let Some(binary) = Helm::binary_from_env() else {
        eprintln!(
            "note: second-release skipped: SWARM_HELM is unset (scripts/install-helm.sh builds helm)"
        );
        return;
    };
    scenario!("second-release")
        .real_cluster_only("Helm installs into a real API server")
        .run(async |env| {
            let helm = Helm::new(
                binary,
                RealCluster::from_env().expect("a real cluster").kubeconfig,
                env.scratch("helm"),
            );
            // The harness applied deploy/rbac for an operator of its own (none runs here), and
            // an earlier install of deploy/ may have left its manager's objects: Helm adopts no
            // object it did not create, so they go first.
            for objects in ["deploy/rbac", "deploy/manager"] {
                let args = ["delete", "-k", objects, "--ignore-not-found", "--wait"];
                env.kubectl.ok(&args).await;
            }
            let _cleanup = Cleanup(&helm, env.kubectl.clone());
            let first = helm.run(&[
                "install",
                FIRST,
                &chart(),
                "--namespace",
                OPERATOR_NAMESPACE,
                // The CRD is in the cluster already (the harness applied crds/).
                "--take-ownership",
            ]);
            assert!(
                first.status.success(),
                "the first release installs: {first:?}"
            );

            for namespace in [OPERATOR_NAMESPACE, OTHER_NAMESPACE] {
                let second = helm.run(&[
                    "install",
                    SECOND,
                    &chart(),
                    "--namespace",
                    namespace,
                    "--create-namespace",
                ]);
                let stderr = String::from_utf8_lossy(&second.stderr);
                assert!(
                    !second.status.success()
                        && stderr.contains("cannot be imported into the current release")
                        && stderr.contains(&format!("\"{FIRST}\"")),
                    "a second release in {namespace} is refused naming the first one's object: \
                     {second:?}"
                );
            }
            assert_one_operator(env).await;
        })
        .await;
}

/// One operator Deployment in the cluster: the first release's.
async fn assert_one_operator(env: &Env) {
    let deployments = env
        .kubectl
        .ok(&[
            "get",
            "deployments",
            "--all-namespaces",
            "-l",
            "app.kubernetes.io/name=swarm-operator",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        ])
        .await;
    assert_eq!(
        deployments.trim(),
        format!("{OPERATOR_NAMESPACE}/swarm-operator"),
        "only the first release's operator"
    );
}

/// The chart's directory.
fn chart() -> String {
    repo_path("charts/swarm-operator")
        .to_str()
        .expect("UTF-8 repository path")
        .to_owned()
}

/// Uninstalls whatever release got in and removes the second namespace, passed or failed.
struct Cleanup<'a>(&'a Helm, Kubectl);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for (release, namespace) in [
            (FIRST, OPERATOR_NAMESPACE),
            (SECOND, OPERATOR_NAMESPACE),
            (SECOND, OTHER_NAMESPACE),
        ] {
            let namespace = format!("--namespace={namespace}");
            let args = [
                "uninstall",
                release,
                "--ignore-not-found",
                "--wait",
                &namespace,
            ];
            let out = self.0.run(&args);
            if !out.status.success() {
                eprintln!("note: helm uninstall {release}: {out:?}");
            }
        }
        let args = ["delete", "namespace", OTHER_NAMESPACE, "--ignore-not-found"];
        let out = self.1.run_blocking(&args);
        if !out.success {
            eprintln!(
                "note: could not delete namespace {OTHER_NAMESPACE}: {}",
                out.stderr
            );
        }
    }
}
