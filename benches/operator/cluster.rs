//! The control plane a grid cell runs on, and the workloads the benchmark creates in it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use swarm_operator::api::crd::{Phase, SwarmPool};
use swarm_protocol::names::VERSION_ANNOTATION;

/// The benchmark's field manager and user agent, apart from the operator's.
const MANAGER: &str = "swarm-operator-bench";

/// Where a cell runs: kube-sim in this process, or a cluster named by a kubeconfig.
pub enum ControlPlane {
    Sim(kube_sim::Sim),
    Real,
}

/// A control plane with a client and the kubeconfig the operator gets.
pub struct Cluster {
    pub plane: ControlPlane,
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// The namespace of this cell's pools (deleted at the end of the cell).
    pub namespace: String,
    /// Where etcd serves its metrics, when the cluster says (`scripts/real-cluster.sh`).
    pub etcd_url: Option<String>,
}

impl Cluster {
    /// A fresh kube-sim writing its kubeconfig into `dir`, or the cluster of `real_kubeconfig`.
    pub async fn start(dir: &Path, real_kubeconfig: Option<&Path>, namespace: &str) -> Cluster {
        let (plane, kubeconfig) = match real_kubeconfig {
            Some(path) => (ControlPlane::Real, path.to_path_buf()),
            None => {
                let sim = kube_sim::Sim::start(kube_sim::SimConfig {
                    // A 30 s termination grace takes 0.6 s; pods are Ready after 20 ms.
                    time_scale: 0.02,
                    ..kube_sim::SimConfig::default()
                })
                .await
                .expect("start kube-sim");
                let path = dir.join("kubeconfig");
                sim.write_kubeconfig(&path)
                    .expect("write kube-sim kubeconfig");
                (ControlPlane::Sim(sim), path)
            }
        };
        let mut config = load_config(&kubeconfig).await;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(MANAGER),
        ));
        // The grid creates thousands of objects: do not let client-side timeouts cut lists.
        config.read_timeout = Some(Duration::from_secs(120));
        let client = Client::try_from(config).expect("build the benchmark's client");
        let etcd_url = real_kubeconfig.and_then(crate::apiserver::etcd_url);
        let cluster = Cluster {
            plane,
            client,
            kubeconfig,
            namespace: namespace.to_owned(),
            etcd_url,
        };
        cluster.install_crd().await;
        cluster.create_namespace().await;
        cluster
    }

    pub fn name(&self) -> &'static str {
        match self.plane {
            ControlPlane::Sim(_) => "kube-sim",
            ControlPlane::Real => "kube-apiserver 1.37",
        }
    }

    async fn install_crd(&self) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let text = std::fs::read_to_string(repo_path("crds/swarmpool.yaml")).expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("parse CRD");
        let name = crd.name_any();
        crds.patch(&name, &apply_params(), &Patch::Apply(&crd))
            .await
            .expect("apply the SwarmPool CRD");
        wait_for("the CRD to be established", Duration::from_secs(60), || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                let conditions = crd.status?.conditions?;
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }

    async fn create_namespace(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": self.namespace}})).expect("ns");
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(e) => panic!("create namespace {}: {e}", self.namespace),
        }
    }

    /// Deletes the cell's namespace and waits until it is gone (on a real cluster; kube-sim
    /// is simply stopped).
    pub async fn finish(self) {
        match self.plane {
            ControlPlane::Sim(sim) => sim.shutdown().await,
            ControlPlane::Real => {
                let namespaces: Api<Namespace> = Api::all(self.client.clone());
                let _ = namespaces
                    .delete(&self.namespace, &DeleteParams::default())
                    .await;
                wait_for(
                    "the namespace to be deleted",
                    Duration::from_secs(600),
                    || {
                        let namespaces = namespaces.clone();
                        let name = self.namespace.clone();
                        async move {
                            namespaces
                                .get_opt(&name)
                                .await
                                .ok()?
                                .is_none()
                                .then_some(())
                        }
                    },
                )
                .await;
            }
        }
    }

    /// kube-sim's URL, on kube-sim.
    pub fn sim_url(&self) -> Option<String> {
        match &self.plane {
            ControlPlane::Sim(sim) => Some(sim.url()),
            ControlPlane::Real => None,
        }
    }

    pub fn statefulsets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn pools(&self) -> Api<SwarmPool> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates StatefulSet `name` with `replicas` workers mounting ConfigMap `config_map`.
    pub async fn create_workers(&self, name: &str, replicas: usize, config_map: &str) {
        let mut sts = json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "worker",
                            "image": "swarm-worker:latest",
                            "volumeMounts": [{"name": "config", "mountPath": "/app/config"}],
                        }],
                        "volumes": [{
                            "name": "config",
                            "configMap": {"name": config_map, "optional": true},
                        }],
                    },
                },
            },
        });
        // What a real pool's workers carry (docs/worker-protocol.md). kwok runs no probe; kube-sim
        // would, against a process per pod that the load driver does not serve, so there the
        // pods go without one, Ready as soon as they run, as kwok's are.
        if matches!(self.plane, ControlPlane::Real) {
            sts["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = json!({
                "httpGet": {"path": "/readyz", "port": 8081},
                "periodSeconds": 5,
                "timeoutSeconds": 2,
                "failureThreshold": 1,
            });
        }
        let sts: StatefulSet = serde_json::from_value(sts).expect("StatefulSet manifest");
        self.statefulsets()
            .patch(name, &apply_params(), &Patch::Apply(&sts))
            .await
            .unwrap_or_else(|e| panic!("create StatefulSet {name}: {e}"));
    }

    /// Applies pool `name` selecting StatefulSet `workers`, sharing `jobs`; under
    /// `rollout.policy: Acknowledge` if `acknowledge`, else under the default (`DeletePods`).
    pub async fn apply_pool(
        &self,
        name: &str,
        workers: &str,
        config_map: &str,
        jobs: &[String],
        acknowledge: bool,
    ) {
        // A SwarmPool holds at most about 1.5 MiB: a long job list goes into ConfigMaps the
        // pool takes its jobs from (`spec.jobsFrom`), as its users would.
        let (inline, sources) = if jobs.len() > INLINE_JOBS {
            let mut sources = Vec::new();
            for (k, chunk) in jobs.chunks(JOBS_PER_SOURCE).enumerate() {
                let source = format!("{name}-jobs-{k}");
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": source, "labels": {"swarm.io/jobs-source": "true"}},
                    "data": {"jobs": chunk.join("\n")},
                });
                self.config_maps()
                    .patch(&source, &apply_params(), &Patch::Apply(&cm))
                    .await
                    .unwrap_or_else(|e| panic!("apply ConfigMap {source}: {e}"));
                sources.push(json!({"configMapRef": {"name": source}}));
            }
            (&[][..], sources)
        } else {
            (jobs, Vec::new())
        };
        let mut pool = json!({
            "apiVersion": "swarm.io/v1alpha1",
            "kind": "SwarmPool",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": workers}},
                "configMap": config_map,
                "jobs": inline,
                "jobsFrom": sources,
            },
        });
        if acknowledge {
            pool["spec"]["rollout"] = json!({"policy": "Acknowledge"});
        }
        self.pools()
            .patch(name, &apply_params(), &Patch::Apply(&pool))
            .await
            .unwrap_or_else(|e| panic!("apply SwarmPool {name}: {e}"));
    }

    /// Scales StatefulSet `name` to `replicas`.
    pub async fn scale(&self, name: &str, replicas: usize) {
        let patch = json!({"spec": {"replicas": replicas}});
        self.statefulsets()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("scale StatefulSet {name}: {e}"));
    }

    /// Waits until the StatefulSets of the namespace count `expected_pods` Ready replicas. Their
    /// status, not a list of the pods: listing 10,000 pods every poll would load the very
    /// control plane being timed.
    pub async fn wait_workers_ready(&self, expected_pods: usize, limit: Duration) {
        let sets = self.statefulsets();
        poll(
            "every worker pod to be Ready",
            limit,
            Duration::from_millis(250),
            || {
                let sets = sets.clone();
                async move {
                    let list = sets.list(&ListParams::default()).await.ok()?;
                    let ready: i32 = list
                        .items
                        .iter()
                        .filter_map(|s| s.status.as_ref()?.ready_replicas)
                        .sum();
                    (ready as usize == expected_pods).then_some(())
                }
            },
        )
        .await;
    }

    /// The config version written into `config_map`, if it exists.
    pub async fn config_version(&self, config_map: &str) -> Option<u64> {
        config_version(&self.config_maps(), config_map).await
    }
}

/// The config version written into `config_map`, if it exists.
async fn config_version(config_maps: &Api<ConfigMap>, config_map: &str) -> Option<u64> {
    let cm = config_maps.get_opt(config_map).await.ok()??;
    cm.annotations().get(VERSION_ANNOTATION)?.parse().ok()
}

/// Whether a pool reports what the benchmark waits for: Balanced on its current generation,
/// every job held by exactly one Ready worker, no worker left to refresh.
/// Whether `pool` is Balanced over `expected_workers` with all `expected_jobs` held (counted by
/// the caller: jobs in ConfigMaps the pool reads change no generation).
pub fn settled(pool: &SwarmPool, expected_workers: usize, expected_jobs: usize) -> bool {
    let Some(status) = &pool.status else {
        return false;
    };
    status.phase == Some(Phase::Balanced)
        && status.observed_generation == pool.metadata.generation
        && status.workers as usize == expected_workers
        && status.ready_workers as usize == expected_workers
        && status.jobs as usize == expected_jobs
        && status.unassigned_jobs == 0
        && status.jobs_in_transit == 0
        && status.stale_workers.is_empty()
        && status.version.is_some_and(|v| v > 0)
}

/// Whether `pod` is Ready and not terminating.
pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The client configuration of `kubeconfig`.
pub async fn load_config(kubeconfig: &Path) -> kube::Config {
    let options = kube::config::KubeConfigOptions::default();
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    kube::Config::from_custom_kubeconfig(file, &options)
        .await
        .expect("load the kubeconfig")
}

/// The bytes the API server has sent to ConfigMap watchers so far, from its own
/// `apiserver_watch_events_sizes` histogram; `None` where it serves no metrics (kube-sim).
pub async fn configmap_watch_bytes(client: &Client) -> Option<f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    let sum = text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_watch_events_sizes_sum{")
                && l.contains("resource=\"configmaps\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    Some(sum)
}

/// The resourceVersion of each worker's own ConfigMap (the per-worker layout), by name.
pub async fn worker_config_map_versions(
    api: &Api<ConfigMap>,
) -> std::collections::HashMap<String, String> {
    let listed = api
        .list(&ListParams::default().labels("swarm.io/worker"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    listed
        .into_iter()
        .map(|cm| {
            (
                cm.name_any(),
                cm.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

/// How many of `after` are new or changed since `before`.
pub fn changed(
    before: &std::collections::HashMap<String, String>,
    after: &std::collections::HashMap<String, String>,
) -> usize {
    after
        .iter()
        .filter(|(name, version)| before.get(*name) != Some(*version))
        .count()
}

/// The most jobs a pool lists inline; more go into ConfigMaps it takes its jobs from.
const INLINE_JOBS: usize = 20_000;
/// Jobs per such ConfigMap: well within its 1 MiB.
const JOBS_PER_SOURCE: usize = 25_000;

fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// A path in the repository.
pub fn repo_path(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Polls `check` every 100 ms until it answers, or panics after `limit`.
pub async fn wait_for<F, Fut, T>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(what, limit, Duration::from_millis(100), check).await
}

/// Polls `check` every `interval` until it answers, or panics after `limit`.
pub async fn poll<F, Fut, T>(what: &str, limit: Duration, interval: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(interval).await;
    }
}
