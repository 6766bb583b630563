//! The control plane under test (`scripts/real-cluster.sh`'s directory) and what the soak
//! installs on it: the CRD, `deploy/`'s RBAC, one ServiceAccount per operator replica (so the
//! audit log tells their requests apart), and the replicas' kubeconfigs through toxiproxy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::harness::kubectl::{Kubectl, repo_root};
use crate::harness::manifests::write_manifest;
use crate::harness::real_cluster::RealCluster;
use crate::replicas::LEASE_NAMESPACE;

/// The identity the soak's own requests carry.
const USER_AGENT: &str = "swarm-soak";

/// The cluster of one soak.
pub struct Cluster {
    /// `scripts/real-cluster.sh`'s directory.
    pub dir: PathBuf,
    /// Where the soak writes its own files (manifests, kubeconfigs, operator logs).
    pub scratch: PathBuf,
    pub kubectl: Kubectl,
    /// The soak's own client (admin).
    pub client: kube::Client,
    pub real: RealCluster,
    pub http: reqwest::Client,
    etcd_url: String,
}

impl Cluster {
    /// The cluster in `dir`, with `SWARM_E2E_KUBECONFIG` naming its kubeconfig (the harness
    /// finds the audit log beside it).
    pub async fn open(dir: &Path) -> Result<Cluster, String> {
        let real = RealCluster::from_env()
            .ok_or("SWARM_E2E_KUBECONFIG must name the cluster's kubeconfig")?;
        let scratch = dir.join("soak");
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let kubeconfig = dir.join("kubeconfig");
        let kubectl = Kubectl::new(&kubeconfig, &scratch.join("kube-cache"));
        let client = client_for(&kubeconfig).await?;
        let etcd_url = std::fs::read_to_string(dir.join("etcd-url"))
            .map_err(|e| format!("read {}/etcd-url: {e}", dir.display()))?
            .trim()
            .to_owned();
        Ok(Cluster {
            dir: dir.to_path_buf(),
            scratch,
            kubectl,
            client,
            real,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| e.to_string())?,
            etcd_url,
        })
    }

    /// The API server's `host:port`, from the admin kubeconfig.
    pub fn apiserver(&self) -> Result<String, String> {
        let config =
            Kubeconfig::read_from(self.dir.join("kubeconfig")).map_err(|e| e.to_string())?;
        let server = config
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .ok_or("no server in the kubeconfig")?;
        Ok(server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_owned())
    }

    /// CRD, namespace `swarm`, `deploy/`'s namespace and RBAC, and a ServiceAccount per
    /// replica in `replicas`, bound to the operator's ClusterRole and leader-election Role.
    pub async fn install(&self, replicas: &[&str]) -> Result<(), String> {
        self.kubectl_ok(&["apply", "-f", "crds/"]).await?;
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/swarmpools.swarm.io",
        ])
        .await?;
        self.kubectl_ok(&["apply", "-f", "deploy/namespace.yaml"])
            .await?;
        self.kubectl_ok(&["apply", "-f", "examples/namespace.yaml"])
            .await?;
        self.kubectl_ok(&["apply", "-k", "deploy/rbac"]).await?;
        let subjects: Vec<Value> = replicas
            .iter()
            .map(|name| json!({"kind": "ServiceAccount", "name": name, "namespace": LEASE_NAMESPACE}))
            .collect();
        let mut documents: Vec<Value> = replicas
            .iter()
            .map(|name| {
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": name, "namespace": LEASE_NAMESPACE}})
            })
            .collect();
        documents.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "swarm-operator-soak"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "swarm-operator"},
            "subjects": subjects,
        }));
        documents.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "swarm-operator-soak-leader-election", "namespace": LEASE_NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "swarm-operator-leader-election"},
            "subjects": subjects,
        }));
        self.apply("identities.yaml", &documents).await
    }

    /// A kubeconfig at `<scratch>/<account>.kubeconfig` acting as ServiceAccount `account`
    /// (a fresh token), whose server is `server` (`host:port`, a toxiproxy proxy).
    pub async fn replica_kubeconfig(&self, account: &str, server: &str) -> Result<PathBuf, String> {
        let out = self.scratch.join(format!("{account}.kubeconfig"));
        self.real
            .service_account_kubeconfig(&self.kubectl, LEASE_NAMESPACE, account, &out)
            .await;
        let mut config = Kubeconfig::read_from(&out).map_err(|e| e.to_string())?;
        for cluster in config
            .clusters
            .iter_mut()
            .filter_map(|c| c.cluster.as_mut())
        {
            cluster.server = Some(format!("https://{server}"));
        }
        let yaml = serde_yaml::to_string(&config).map_err(|e| e.to_string())?;
        std::fs::write(&out, yaml).map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// `kubectl apply -f` of `documents`, written to `<scratch>/<file>`.
    pub async fn apply(&self, file: &str, documents: &[Value]) -> Result<(), String> {
        let path = write_manifest(&self.scratch.join(file), documents);
        self.kubectl_ok(&["apply", "-f", path.to_str().unwrap_or_default()])
            .await
            .map(drop)
    }

    /// kubectl, its output or why it failed.
    pub async fn kubectl_ok(&self, args: &[&str]) -> Result<String, String> {
        let out = self.kubectl.run(args).await;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), out.stderr.trim()))
        }
    }

    /// `scripts/real-cluster.sh <command> <DIR> <args...>` on this cluster's directory (the
    /// fault commands `restart` and `signal`).
    pub async fn script(&self, command: &str, args: &[&str]) -> Result<(), String> {
        let out = tokio::process::Command::new(repo_root().join("scripts/real-cluster.sh"))
            .arg(command)
            .arg(&self.dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| format!("run real-cluster.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "real-cluster.sh {command} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Compacts etcd's history up to its current revision (physical), through its gRPC
    /// gateway; returns the revision.
    pub async fn compact_etcd(&self) -> Result<u64, String> {
        let range: Value = self
            .http
            .post(format!("{}/v3/kv/range", self.etcd_url))
            .json(&json!({"key": "AA=="}))
            .send()
            .await
            .map_err(|e| format!("etcd range: {e}"))?
            .json()
            .await
            .map_err(|e| format!("etcd range: {e}"))?;
        let revision = range["header"]["revision"]
            .as_str()
            .ok_or_else(|| format!("etcd range: no header.revision in {range}"))?
            .to_owned();
        let response = self
            .http
            .post(format!("{}/v3/kv/compaction", self.etcd_url))
            .json(&json!({"revision": revision, "physical": true}))
            .send()
            .await
            .map_err(|e| format!("etcd compaction: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "etcd compaction at {revision}: {}",
                response.text().await.unwrap_or_default()
            ));
        }
        revision
            .parse()
            .map_err(|e| format!("revision {revision}: {e}"))
    }
}

/// A kube client for the kubeconfig at `path`, identifying itself as the soak.
pub async fn client_for(path: &Path) -> Result<kube::Client, String> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    config.headers.push((
        "user-agent".parse().expect("header name"),
        USER_AGENT.parse().expect("header value"),
    ));
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
