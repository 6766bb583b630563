//! The user's own overlay of an install (`deploy/` or `deploy/overlays/namespaced`): the image
//! built for this run, and the operator's pods on the real node (its label and a toleration of
//! its taint), as a user with a tainted node pool writes one instead of editing a copy of the
//! manifests; applied with `kubectl apply -k`, and removed again.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::kubectl::Kubectl;
use crate::harness::manifests::str_at;
use crate::harness::{Env, repo_path};
use crate::scenarios::whole_cluster::deploy::{apply_kustomization, only};

use super::replicas::{LEASE, SELECTOR};

/// The real node's label and the key of its taint (scripts/lib/real-node.sh).
pub(super) const REAL_NODE: &str = "swarm.io/real-node";

/// How long the removal waits for the operator's pods to go (their grace period is 30 s).
const GONE_WITHIN: Duration = Duration::from_secs(120);

/// An applied install. Dropped without [`Install::remove`] (a failed scenario), it prints the
/// operator pods' logs and removes itself, so no operator in the cluster outlives the scenario.
pub(super) struct Install {
    kubectl: Kubectl,
    /// The namespace the operator runs in.
    pub namespace: String,
    /// What `kubectl kustomize` renders of the overlay.
    pub objects: Vec<Value>,
    removed: bool,
}

/// Writes an overlay of `base` (a kustomization of the repository) into the scenario's scratch
/// directory and `kubectl apply -k`s it.
pub(super) async fn install(env: &Env, base: &str, image: &str) -> Install {
    let dir = write_overlay(&env.scratch("overlay"), &repo_path(base), Some(image));
    apply(env, &dir).await
}

/// Like [`install`], with the image set as a user pins a released one: `kustomize edit set
/// image swarm-operator=<image>` (`NAME@DIGEST`) run by `kustomize` in the overlay.
pub(super) async fn install_with_image_set_by(
    env: &Env,
    kustomize: &Path,
    base: &str,
    image: &str,
) -> Install {
    let dir = write_overlay(&env.scratch("overlay"), &repo_path(base), None);
    let set = format!("swarm-operator={image}");
    let output = std::process::Command::new(kustomize)
        .args(["edit", "set", "image", &set])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", kustomize.display()));
    assert!(
        output.status.success(),
        "kustomize edit set image {set} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    apply(env, &dir).await
}

/// `kubectl apply -k` of the overlay in `dir`.
async fn apply(env: &Env, dir: &Path) -> Install {
    let dir = dir.to_str().expect("UTF-8 scratch path");
    let objects = apply_kustomization(env, dir).await;
    let namespace = str_at(only(&objects, "Deployment"), "/metadata/namespace");
    Install {
        kubectl: env.kubectl.clone(),
        namespace,
        objects,
        removed: false,
    }
}

/// The overlay in `dir`: `kustomization.yaml` (the base, and the image if given) and
/// `placement.yaml`.
fn write_overlay(dir: &Path, base: &Path, image: Option<&str>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    // kustomize takes no absolute path for a base.
    let base = relative(dir, base);
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base.to_str().expect("UTF-8 path")],
        "images": image.map(image_entry).into_iter().collect::<Vec<_>>(),
        "patches": [{
            "path": "placement.yaml",
            "target": {"kind": "Deployment", "name": "swarm-operator"},
        }],
    });
    let placement = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "swarm-operator"},
        "spec": {"template": {"spec": {
            "nodeSelector": {REAL_NODE: "true"},
            // Whatever the taint's value: the node pool's taint is its key.
            "tolerations": [{
                "key": REAL_NODE,
                "operator": "Exists",
                "effect": "NoSchedule",
            }],
        }}},
    });
    for (file, document) in [
        ("kustomization.yaml", kustomization),
        ("placement.yaml", placement),
    ] {
        let yaml = serde_yaml::to_string(&document).expect("overlay as YAML");
        let path = dir.join(file);
        std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
    dir.to_path_buf()
}

/// kustomize's `images:` entry giving the install's `swarm-operator` image the reference
/// `image` (`NAME`, `NAME:TAG` or `NAME@DIGEST`; a registry's port is not a tag).
fn image_entry(image: &str) -> Value {
    if let Some((name, digest)) = image.split_once('@') {
        return json!({"name": "swarm-operator", "newName": name, "digest": digest});
    }
    let last = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[last..].rsplit_once(':') {
        Some((_, tag)) => json!({
            "name": "swarm-operator",
            "newName": &image[..image.len() - tag.len() - 1],
            "newTag": tag,
        }),
        None => json!({"name": "swarm-operator", "newName": image}),
    }
}

/// `to` relative to the directory `from` (both existing).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let canonical = |path: &Path| {
        path.canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (from, to) = (canonical(from), canonical(to));
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let up = from.components().count() - common;
    (0..up)
        .map(|_| Component::ParentDir.as_os_str())
        .chain(to.components().skip(common).map(|c| c.as_os_str()))
        .collect()
}

impl Install {
    /// Deletes the operator's Deployment and waits until its pods are gone, then its other
    /// namespaced objects and the leader-election Lease it made. The cluster-scoped ones stay
    /// (the CRD, the namespace, cluster roles): later scenarios share them.
    pub async fn remove(mut self) {
        let (kubectl, namespace, objects) = (
            self.kubectl.clone(),
            self.namespace.clone(),
            self.objects.clone(),
        );
        self.removed = true;
        tokio::task::spawn_blocking(move || remove(&kubectl, &namespace, &objects))
            .await
            .expect("the removal ran")
            .unwrap_or_else(|why| panic!("removing the install: {why}"));
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        print_logs(&self.kubectl, &self.namespace);
        if let Err(why) = remove(&self.kubectl, &self.namespace, &self.objects) {
            eprintln!("note: removing the install: {why}");
        }
    }
}

/// What [`Install::remove`] does, blocking (it also runs while a failed test unwinds).
fn remove(kubectl: &Kubectl, namespace: &str, objects: &[Value]) -> Result<(), String> {
    // `kubectl -n <namespace> <args>`, which must succeed.
    let run = |args: &[&str]| {
        let mut full = vec!["-n", namespace];
        full.extend_from_slice(args);
        let out = kubectl.run_blocking(&full);
        if out.success {
            Ok(out.stdout)
        } else {
            Err(format!("kubectl {}: {}", full.join(" "), out.stderr.trim()))
        }
    };
    run(&[
        "delete",
        "deployment",
        "swarm-operator",
        "--ignore-not-found",
    ])?;
    let started = Instant::now();
    loop {
        let left = run(&["get", "pods", "-l", SELECTOR, "-o", "name"])?;
        if left.trim().is_empty() {
            break;
        }
        if started.elapsed() > GONE_WITHIN {
            return Err(format!("operator pods left after {GONE_WITHIN:?}: {left}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let namespaced = objects
        .iter()
        .filter(|o| o["kind"] != "Deployment" && o["metadata"]["namespace"].is_string());
    for object in namespaced {
        run(&["delete", &qualified(object), "--ignore-not-found"])?;
    }
    run(&["delete", "lease", LEASE, "--ignore-not-found"])?;
    Ok(())
}

/// `<kind>.<group>/<name>` of a manifest, as `kubectl delete` takes it.
fn qualified(object: &Value) -> String {
    let kind = str_at(object, "/kind").to_lowercase();
    let name = str_at(object, "/metadata/name");
    match str_at(object, "/apiVersion").split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Prints the logs of the operator's pods, and of their previous containers, for a look at a
/// failure before the pods go.
fn print_logs(kubectl: &Kubectl, namespace: &str) {
    let pods =
        kubectl.run_blocking(&["-n", namespace, "get", "pods", "-l", SELECTOR, "-o", "name"]);
    for pod in pods.stdout.lines().filter(|l| !l.is_empty()) {
        for previous in [true, false] {
            let mut args = vec!["-n", namespace, "logs", pod, "--tail=-1"];
            if previous {
                args.push("--previous");
            }
            let out = kubectl.run_blocking(&args);
            if out.success {
                let which = if previous {
                    "previous container"
                } else {
                    "container"
                };
                eprintln!("==== {pod}, {which}:\n{}", out.stdout);
            }
        }
    }
}
