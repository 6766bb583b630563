//! The pools a soak runs at once, built from the repository's examples so they stay what a
//! user deploys: a StatefulSet pool, a Deployment pool, a weighted pool and one with
//! dedicated jobs, plus transient pools that come and go. Workers run on kwok's fake nodes
//! with a 1 s termination grace, so the soak's time goes to the operator, not to waiting.

use serde_json::{Value, json};

use crate::harness::kubectl::repo_root;
use crate::harness::manifests::{documents_in, parse_documents};
use crate::schedule::PoolShape;

/// The namespace every pool lives in (the examples').
pub const NAMESPACE: &str = "swarm";
/// Seconds a worker pod takes to terminate.
const GRACE: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    StatefulSet,
    Deployment,
}

/// One pool and its workload.
#[derive(Clone, Debug)]
pub struct PoolDef {
    pub name: String,
    pub workload: Workload,
    /// The StatefulSet's or Deployment's name (also its pods' `app` label).
    pub workload_name: String,
    pub config_map: String,
    pub jobs: Vec<String>,
    pub qos: Option<Value>,
    pub replicas: u32,
    /// What the soak may scale it to.
    pub min: u32,
    pub max: u32,
}

impl PoolDef {
    /// What the plan may scale it to.
    pub fn shape(&self) -> PoolShape {
        PoolShape {
            min: self.min,
            max: self.max,
        }
    }

    /// `statefulset` or `deployment`, as kubectl names the kind.
    pub fn kubectl_kind(&self) -> &'static str {
        match self.workload {
            Workload::StatefulSet => "statefulset",
            Workload::Deployment => "deployment",
        }
    }

    /// The workload and the pool, in apply order.
    pub fn manifests(&self) -> Vec<Value> {
        vec![self.workload_manifest(), self.pool_manifest(&self.jobs)]
    }

    /// The SwarmPool with `jobs`.
    pub fn pool_manifest(&self, jobs: &[String]) -> Value {
        let mut pool = example_pool();
        pool["metadata"] = json!({"name": self.name, "namespace": NAMESPACE});
        let spec = &mut pool["spec"];
        spec["selector"] = json!({"matchLabels": {"app": self.workload_name}});
        spec["configMap"] = json!(self.config_map);
        spec["jobs"] = json!(jobs);
        if self.workload == Workload::Deployment {
            spec["workloadKind"] = json!("Deployment");
        }
        if let Some(qos) = &self.qos {
            spec["qos"] = qos.clone();
        }
        pool
    }

    fn workload_manifest(&self) -> Value {
        let mut workload = match self.workload {
            Workload::StatefulSet => example_kind("examples", "StatefulSet"),
            Workload::Deployment => example_kind("examples/deployment", "Deployment"),
        };
        let labels = json!({"app": self.workload_name});
        workload["metadata"] =
            json!({"name": self.workload_name, "namespace": NAMESPACE, "labels": labels});
        let spec = &mut workload["spec"];
        spec["replicas"] = json!(self.replicas);
        spec["selector"] = json!({"matchLabels": labels});
        if self.workload == Workload::StatefulSet {
            spec["serviceName"] = json!(self.workload_name);
        }
        let template = &mut spec["template"];
        template["metadata"] = json!({"labels": labels});
        template["spec"]["terminationGracePeriodSeconds"] = json!(GRACE);
        for volume in template["spec"]["volumes"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if volume.get("configMap").is_some() {
                volume["configMap"]["name"] = json!(self.config_map);
            }
        }
        workload
    }
}

/// The soak's standing pools.
pub fn standing() -> Vec<PoolDef> {
    let jobs = example_jobs();
    let weighted_jobs: Vec<String> = jobs[..12].to_vec();
    let dedicated_jobs: Vec<String> = jobs[12..22].to_vec();
    vec![
        PoolDef {
            name: "swarm-pool".into(),
            workload: Workload::StatefulSet,
            workload_name: "swarm-worker".into(),
            config_map: "swarm-worker-config".into(),
            jobs: jobs.clone(),
            qos: None,
            replicas: 2,
            min: 1,
            max: 4,
        },
        PoolDef {
            name: "stream-pool".into(),
            workload: Workload::Deployment,
            workload_name: "stream-worker".into(),
            config_map: "stream-worker-config".into(),
            jobs,
            qos: None,
            replicas: 2,
            min: 1,
            max: 4,
        },
        PoolDef {
            name: "weighted-pool".into(),
            workload: Workload::StatefulSet,
            workload_name: "weighted-worker".into(),
            config_map: "weighted-worker-config".into(),
            qos: Some(json!({"weights": {
                weighted_jobs[0].clone(): 5,
                weighted_jobs[1].clone(): 3,
                weighted_jobs[2].clone(): 2,
            }})),
            jobs: weighted_jobs,
            replicas: 3,
            min: 1,
            max: 4,
        },
        PoolDef {
            name: "dedicated-pool".into(),
            workload: Workload::StatefulSet,
            workload_name: "dedicated-worker".into(),
            config_map: "dedicated-worker-config".into(),
            qos: Some(json!({"dedicated": [dedicated_jobs[0].clone(), dedicated_jobs[1].clone()]})),
            jobs: dedicated_jobs,
            replicas: 3,
            // Always room for both dedicated jobs and a shared worker.
            min: 3,
            max: 5,
        },
    ]
}

/// The `n`th transient pool: its own StatefulSet, so no worker outlives its pool into the
/// next one's.
pub fn transient(n: u32) -> PoolDef {
    let name = format!("transient-{n}");
    PoolDef {
        workload_name: format!("{name}-worker"),
        config_map: format!("{name}-config"),
        name,
        workload: Workload::StatefulSet,
        jobs: example_jobs()[20..26].to_vec(),
        qos: None,
        replicas: 2,
        min: 2,
        max: 2,
    }
}

fn example_kind(dir: &str, kind: &str) -> Value {
    documents_in(&repo_root().join(dir))
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{dir}/ holds no {kind}"))
}

fn example_pool() -> Value {
    parse_documents(&repo_root().join("examples/swarmpool.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "SwarmPool")
        .expect("examples/swarmpool.yaml holds a SwarmPool")
}

fn example_jobs() -> Vec<String> {
    example_pool()["spec"]["jobs"]
        .as_array()
        .expect("the example's jobs")
        .iter()
        .filter_map(|j| j.as_str().map(str::to_owned))
        .collect()
}
