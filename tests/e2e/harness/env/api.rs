//! What a scenario applies through kubectl and reads from the API: the CRDs, the examples and
//! edited manifests; the pool, its ConfigMaps, pods and events; the operator's requests.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::Env;
use crate::harness::sim_inspect::{PodMounts, RequestRecord};
use crate::harness::worker_config::WorkerConfig;
use crate::harness::{kubectl, manifests, observe, real_cluster};

impl Env {
    /// `kubectl apply -f crds/`, then waits for the CRD to be established.
    pub async fn install_crds(&self) {
        {
            let _one_at_a_time = real_cluster::CLUSTER_SCOPED_APPLY.lock().await;
            self.kubectl.ok(&["apply", "-f", "crds/"]).await;
        }
        self.kubectl
            .ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/swarmpools.swarm.io",
            ])
            .await;
    }

    /// `kubectl apply -f examples/` (an edited copy in the scenario's own namespace when it
    /// shares the cluster).
    pub async fn apply_examples(&self) {
        if self.example.is_relocated() {
            self.apply("examples.yaml", &self.example.documents).await;
        } else {
            self.kubectl.ok(&["apply", "-f", "examples/"]).await;
        }
    }

    /// `kubectl apply -f <path>...` for the repository's manifest files and directories
    /// `paths` (edited copies in the scenario's own namespace when it shares the cluster).
    pub async fn apply_repo_manifests(&self, paths: &[&str]) {
        if self.example.is_relocated() {
            let documents = self.example.localize(manifests::documents_at(paths));
            self.apply("repo-manifests.yaml", &documents).await;
        } else {
            let mut args = vec!["apply"];
            for path in paths {
                args.extend(["-f", path]);
            }
            self.kubectl.ok(&args).await;
        }
    }

    /// Writes `documents` to `file` in the scratch directory and `kubectl apply -f`s it, as a
    /// user applying an edited manifest; fails the test if kubectl fails.
    pub async fn apply(&self, file: &str, documents: &[Value]) {
        let output = self.apply_output(file, documents).await;
        assert!(
            output.success,
            "kubectl apply -f {file} failed: {}",
            output.stderr
        );
    }

    /// Like [`Env::apply`], returning what kubectl printed whatever the outcome.
    pub async fn apply_output(&self, file: &str, documents: &[Value]) -> kubectl::Output {
        let path = manifests::write_manifest(&self.scratch(file), documents);
        let path = path.to_str().expect("UTF-8 scratch path");
        self.kubectl.run(&["apply", "-f", path]).await
    }

    /// The common start of most scenarios: CRDs, the operator, the examples, and a settled
    /// pool at the example's replicas, checked against every invariant.
    pub async fn install_example(&mut self) -> observe::Observed {
        self.install_crds().await;
        self.start_operator().await;
        self.apply_examples().await;
        let settled = observe::wait_balanced(self, self.example.replicas()).await;
        observe::assert_invariants(self, &settled).await;
        settled
    }

    /// The example SwarmPool as the API serves it, if it exists.
    pub async fn pool(&self) -> Option<Value> {
        self.pool_named(&self.example.pool_name()).await
    }

    /// A SwarmPool in the example namespace, as the API serves it, if it exists.
    pub async fn pool_named(&self, name: &str) -> Option<Value> {
        let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.example.namespace(), &resource);
        let pool = api.get_opt(name).await.expect("GET the SwarmPool");
        pool.map(|p| serde_json::to_value(p).expect("SwarmPool as JSON"))
    }

    /// A ConfigMap in the example namespace, if it exists.
    pub async fn config_map(&self, name: &str) -> Option<ConfigMap> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.get_opt(name).await.expect("GET the ConfigMap")
    }

    /// The worker config of pool `pool` from its ConfigMap `config_map` (`main`, as read):
    /// its `config.yml`, or in the per-worker layout its `index.yml` and the workers' own
    /// ConfigMaps. `Ok(None)` when there is no config yet.
    pub async fn pool_config(
        &self,
        pool: &str,
        config_map: &str,
        main: Option<&ConfigMap>,
    ) -> Result<Option<WorkerConfig>, String> {
        let data = main.and_then(|cm| cm.data.as_ref());
        if let Some(text) = data.and_then(|d| d.get("config.yml")) {
            return WorkerConfig::parse(text)
                .map(Some)
                .map_err(|e| format!("{config_map} holds an unreadable config.yml: {e}"));
        }
        let Some(index) = data.and_then(|d| d.get("index.yml")) else {
            return Ok(None);
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.example.namespace());
        let selector = format!("swarm.io/pool={pool},swarm.io/worker");
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("LIST the workers' ConfigMaps: {e}"))?;
        let slices: Vec<(String, String, String)> = listed
            .items
            .iter()
            .map(|cm| {
                let name = cm.metadata.name.clone().unwrap_or_default();
                let pod = cm
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("swarm.io/worker"))
                    .cloned()
                    .unwrap_or_default();
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("config.yml"))
                    .cloned()
                    .unwrap_or_default();
                (name, pod, text)
            })
            .collect();
        WorkerConfig::assemble(config_map, index, &slices).map(Some)
    }

    /// Every pod in the example namespace.
    pub async fn pods(&self) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.list(&ListParams::default())
            .await
            .expect("LIST pods")
            .items
    }

    /// Every events.k8s.io/v1 Event in the example namespace.
    pub async fn events(&self) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.example.namespace());
        api.list(&ListParams::default())
            .await
            .expect("LIST events.k8s.io/v1 events")
            .items
    }

    /// Whether an object exists, by its manifest's apiVersion, kind, namespace and name
    /// (plural found by discovery, as kubectl does).
    pub async fn exists(&self, manifest: &Value) -> bool {
        let api_version = manifests::str_at(manifest, "/apiVersion");
        let kind = manifests::str_at(manifest, "/kind");
        let name = manifests::str_at(manifest, "/metadata/name");
        let (group, version) = api_version
            .split_once('/')
            .unwrap_or(("", api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovery of {api_version} {kind}: {e}"));
        let api: Api<DynamicObject> = match manifest.pointer("/metadata/namespace") {
            Some(Value::String(ns)) => Api::namespaced_with(self.client.clone(), ns, &resource),
            _ if caps.scope == kube::discovery::Scope::Namespaced => {
                Api::default_namespaced_with(self.client.clone(), &resource)
            }
            _ => Api::all_with(self.client.clone(), &resource),
        };
        api.get_opt(&name)
            .await
            .unwrap_or_else(|e| panic!("GET {kind} {name}: {e}"))
            .is_some()
    }

    /// What the live pod instances `uids` mounted (derived on a real cluster, see
    /// [`derived_mounts`](crate::harness::derived_mounts)).
    pub async fn mounts_of(&self, uids: &[String]) -> Vec<PodMounts> {
        self.inspector.mounts_of(uids).await
    }

    /// A position in the operator's request log: requests made from now on come after it.
    pub async fn request_mark(&self) -> usize {
        self.inspector
            .operator_requests()
            .await
            .map_or(0, |requests| requests.len())
    }

    /// Requests RBAC refused so far were caused by the scenario on purpose: the check at the
    /// end looks only at the requests made from now on.
    pub async fn expect_refusals_so_far(&mut self) {
        self.refusals_expected = self.request_mark().await;
    }

    /// The operator's requests after `mark`, oldest first; `None` where the cluster keeps no
    /// request log (a real cluster without an audit log).
    pub async fn operator_requests_since(&self, mark: usize) -> Option<Vec<RequestRecord>> {
        let all = self.inspector.operator_requests().await?;
        Some(all.into_iter().skip(mark).collect())
    }
}
