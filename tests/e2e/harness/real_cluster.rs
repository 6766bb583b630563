//! The suite against a real cluster (`SWARM_E2E_KUBECONFIG`): a clean namespace per scenario,
//! the operator's own ServiceAccount identity, and its requests from the API server's audit
//! log when one sits beside the kubeconfig (as `scripts/real-cluster.sh up` writes it).

use std::path::{Path, PathBuf};

use kube::config::{AuthInfo, Kubeconfig};
use serde::Deserialize;
use serde_json::json;

use super::kubectl::{Kubectl, repo_root};
use super::manifests::{Example, documents_at, write_manifest};
use super::sim_inspect::RequestRecord;

/// Names a kubeconfig of a real cluster to run the suite against instead of simulations.
pub const KUBECONFIG_ENV: &str = "SWARM_E2E_KUBECONFIG";

/// The cluster-wide install's ServiceAccount, bound by `deploy/`'s ClusterRole.
pub const OPERATOR_NAMESPACE: &str = "swarm-system";
/// The operator's ServiceAccount name, in every install.
pub const OPERATOR_ACCOUNT: &str = "swarm-operator";

/// Held while applying cluster-scoped manifests (CRDs, RBAC): scenarios running side by side
/// would otherwise race to create the same object on a fresh cluster, and one would fail
/// with AlreadyExists.
pub static CLUSTER_SCOPED_APPLY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A real cluster named by `SWARM_E2E_KUBECONFIG`.
#[derive(Clone, Debug)]
pub struct RealCluster {
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    audit_log: Option<PathBuf>,
}

impl RealCluster {
    /// The cluster of `SWARM_E2E_KUBECONFIG`, if set.
    pub fn from_env() -> Option<RealCluster> {
        let kubeconfig = std::env::var_os(KUBECONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)?;
        // scripts/real-cluster.sh keeps the audit log in <DIR>/logs beside <DIR>/kubeconfig.
        let audit_log = kubeconfig
            .parent()
            .map(|dir| dir.join("logs").join("audit.log"))
            .filter(|path| path.exists());
        Some(RealCluster {
            kubeconfig,
            audit_log,
        })
    }

    /// The directory `scripts/real-cluster.sh up` started the cluster in (beside its
    /// kubeconfig), whose components `scripts/real-cluster.sh restart` can restart; `None` for
    /// a cluster it did not start.
    pub fn dir(&self) -> Option<PathBuf> {
        let dir = self.kubeconfig.parent()?;
        dir.join("cmds").is_dir().then(|| dir.to_path_buf())
    }

    /// Deletes `namespace` and waits until it is gone, so a scenario starts clean.
    pub async fn reset_namespace(&self, kubectl: &Kubectl, namespace: &str) {
        // A scenario that failed half-way may have left a finalizer on a pool, which would
        // keep the namespace from ever going away.
        let pools = kubectl
            .run(&["-n", namespace, "get", "swarmpools", "-o", "name"])
            .await;
        for pool in pools.stdout.lines().filter(|l| !l.is_empty()) {
            kubectl
                .run(&[
                    "-n",
                    namespace,
                    "patch",
                    pool,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ])
                .await;
        }
        kubectl
            .ok(&[
                "delete",
                "namespace",
                namespace,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=180s",
            ])
            .await;
    }

    /// deploy/'s namespace, ServiceAccount and ClusterRole (applied, idempotently).
    pub async fn apply_operator_rbac(&self, kubectl: &Kubectl) {
        let _one_at_a_time = CLUSTER_SCOPED_APPLY.lock().await;
        kubectl.ok(&["apply", "-f", "deploy/namespace.yaml"]).await;
        kubectl.ok(&["apply", "-k", "deploy/rbac"]).await;
    }

    /// The identity of an operator that watches only the example's namespace: a ServiceAccount
    /// `swarm-operator` of that namespace, bound there to deploy/'s ClusterRole (applied,
    /// idempotently) by a RoleBinding and to a copy of deploy/'s leader-election Role, and a
    /// kubeconfig at `out` with a token of it. Creates the namespace.
    pub async fn namespaced_operator_identity(
        &self,
        kubectl: &Kubectl,
        example: &Example,
        out: &Path,
    ) -> PathBuf {
        self.apply_operator_rbac(kubectl).await;
        let namespace = example.namespace();
        let mut documents = vec![example.namespace_manifest().clone()];
        documents.push(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": OPERATOR_ACCOUNT, "namespace": namespace},
        }));
        documents.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": OPERATOR_ACCOUNT, "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": OPERATOR_ACCOUNT,
            },
            "subjects": [{
                "kind": "ServiceAccount",
                "name": OPERATOR_ACCOUNT,
                "namespace": namespace,
            }],
        }));
        // deploy/'s leader-election Role and its binding, moved to this namespace.
        for mut doc in documents_at(&[
            "deploy/rbac/leader_election_role.yaml",
            "deploy/rbac/leader_election_role_binding.yaml",
        ]) {
            doc["metadata"]["namespace"] = json!(namespace);
            if let Some(subjects) = doc["subjects"].as_array_mut() {
                for subject in subjects {
                    subject["namespace"] = json!(namespace);
                }
            }
            documents.push(doc);
        }
        let manifest = write_manifest(&out.with_extension("rbac.yaml"), &documents);
        let manifest = manifest.to_str().expect("UTF-8 scratch path");
        kubectl.ok(&["apply", "-f", manifest]).await;
        self.service_account_kubeconfig(kubectl, &namespace, OPERATOR_ACCOUNT, out)
            .await
    }

    /// A kubeconfig at `out` for ServiceAccount `namespace/account`: this cluster's server
    /// and CA, and a fresh token of the account (`kubectl create token`), so the operator
    /// has exactly what the account's RBAC grants.
    pub async fn service_account_kubeconfig(
        &self,
        kubectl: &Kubectl,
        namespace: &str,
        account: &str,
        out: &Path,
    ) -> PathBuf {
        self.token_kubeconfig(kubectl, namespace, account, &[], out)
            .await
    }

    /// Like [`RealCluster::service_account_kubeconfig`], with a token bound to pod `pod` of
    /// uid `uid` (as the projected token a pod of that account gets): its requests carry the
    /// pod's name and uid, and it is valid only while that pod instance exists.
    pub async fn pod_bound_kubeconfig(
        &self,
        kubectl: &Kubectl,
        namespace: &str,
        account: &str,
        (pod, uid): (&str, &str),
        out: &Path,
    ) -> PathBuf {
        let bound = [
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod}"),
            &format!("--bound-object-uid={uid}"),
        ];
        self.token_kubeconfig(kubectl, namespace, account, &bound, out)
            .await
    }

    /// A kubeconfig at `out` with a fresh token of `namespace/account`, `kubectl create token`
    /// given `token_args`.
    async fn token_kubeconfig(
        &self,
        kubectl: &Kubectl,
        namespace: &str,
        account: &str,
        token_args: &[&str],
        out: &Path,
    ) -> PathBuf {
        let mut args = vec!["-n", namespace, "create", "token", account, "--duration=2h"];
        args.extend_from_slice(token_args);
        let token = kubectl.ok(&args).await;
        let user = format!("system:serviceaccount:{namespace}:{account}");
        self.token_kubeconfig_of(token.trim(), &user, out)
    }

    /// A kubeconfig at `out` that presents `token` (as user `user`, a name for humans) to
    /// this cluster's server, trusting its CA.
    pub fn token_kubeconfig_of(&self, token: &str, user: &str, out: &Path) -> PathBuf {
        let mut config = Kubeconfig::read_from(&self.kubeconfig).unwrap_or_else(|e| {
            panic!("cannot read kubeconfig {}: {e}", self.kubeconfig.display())
        });
        let user = user.to_owned();
        let auth = AuthInfo {
            token: Some(token.to_string().into()),
            ..AuthInfo::default()
        };
        for named in &mut config.auth_infos {
            named.name = user.clone();
            named.auth_info = Some(auth.clone());
        }
        config.auth_infos.truncate(1);
        for context in config
            .contexts
            .iter_mut()
            .filter_map(|c| c.context.as_mut())
        {
            context.user = Some(user.clone());
        }
        let yaml = serde_yaml::to_string(&config).expect("kubeconfig as YAML");
        std::fs::write(out, yaml).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
        out.to_path_buf()
    }

    /// The operator's requests (a `swarm-operator` ServiceAccount of namespace `accounts_in`,
    /// or of any namespace), oldest first, from the API server's audit log; `None` without one.
    pub fn operator_requests(&self, accounts_in: Option<&str>) -> Option<Vec<RequestRecord>> {
        let text = std::fs::read_to_string(self.audit_log.as_ref()?).ok()?;
        let suffix = format!(":{OPERATOR_ACCOUNT}");
        let exact = accounts_in.map(|ns| format!("system:serviceaccount:{ns}{suffix}"));
        Some(
            text.lines()
                // Most lines are other clients': skip them before parsing.
                .filter(|line| line.contains(exact.as_deref().unwrap_or(&suffix)))
                .filter_map(|line| serde_json::from_str::<AuditEvent>(line).ok())
                .filter(|e| match &exact {
                    Some(exact) => e.user.username == *exact,
                    None => {
                        e.user.username.starts_with("system:serviceaccount:")
                            && e.user.username.ends_with(&suffix)
                    }
                })
                .map(AuditEvent::into_record)
                .collect(),
        )
    }
}

/// One line of the audit log (`audit.k8s.io/v1` Event, Metadata level).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: AuditUser,
    #[serde(default)]
    user_agent: Option<String>,
    #[serde(default)]
    response_status: Option<AuditStatus>,
    #[serde(default)]
    request_received_timestamp: String,
}

#[derive(Deserialize)]
struct AuditUser {
    username: String,
}

#[derive(Deserialize)]
struct AuditStatus {
    #[serde(default)]
    code: u16,
}

impl AuditEvent {
    /// The request as the simulation's request log records it.
    fn into_record(self) -> RequestRecord {
        let method = match self.verb.as_str() {
            "get" | "list" | "watch" => "GET",
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            other => other,
        }
        .to_string();
        let (path, query) = match self.request_uri.split_once('?') {
            Some((path, query)) => (path.to_string(), Some(query.to_string())),
            None => (self.request_uri.clone(), None),
        };
        RequestRecord {
            method,
            path,
            query,
            user_agent: self.user_agent,
            status: self.response_status.map_or(0, |s| s.code),
            time: self.request_received_timestamp,
        }
    }
}

/// Runs `program` with `args`, which must succeed; its stdout.
pub async fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {} exited {}: {stdout}{}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `scripts/real-cluster.sh <args...>`, which must succeed; its stdout.
pub async fn script(args: &[&str]) -> String {
    run_ok(&repo_root().join("scripts/real-cluster.sh"), args).await
}

/// `scripts/real-cluster.sh ctr <cluster> <args...>`: ctr against the real node's containerd
/// (namespace k8s.io), which must succeed; its stdout.
pub async fn ctr(cluster: &Path, args: &[&str]) -> String {
    let mut full = vec!["ctr", cluster.to_str().expect("UTF-8 cluster path")];
    full.extend_from_slice(args);
    script(&full).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_line_becomes_a_request_record() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/swarm/pods/w-0","verb":"delete","user":{"username":"system:serviceaccount:swarm-system:swarm-operator"},"userAgent":"swarm-operator","responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:00Z"}"#;
        let record = serde_json::from_str::<AuditEvent>(line)
            .unwrap()
            .into_record();
        assert_eq!(record.method, "DELETE");
        assert_eq!(record.verb(), "delete");
        assert_eq!(record.status, 200);
        let target = record.target().unwrap();
        assert_eq!(target.name.as_deref(), Some("w-0"));
        let watch = r#"{"requestURI":"/api/v1/pods?watch=true&labelSelector=a","verb":"watch","user":{"username":"u"}}"#;
        let record = serde_json::from_str::<AuditEvent>(watch)
            .unwrap()
            .into_record();
        assert_eq!(record.verb(), "watch");
    }
}
