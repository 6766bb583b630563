//! The user's side of the soak: scales, job edits, rollout restarts, and a transient pool
//! created and deleted, each through kubectl as a user would. A change made while the API
//! server is down fails like a user's would; it is counted and the soak goes on.

use std::sync::atomic::{AtomicU32, Ordering};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::Soak;
use crate::checks::PoolEntry;
use crate::pools::{self, NAMESPACE};
use crate::schedule::Load;

static NEXT_JOB: AtomicU32 = AtomicU32::new(1);
static NEXT_TRANSIENT: AtomicU32 = AtomicU32::new(1);

/// Performs `load`; returns its kind and what it did, or why it failed.
pub async fn perform(soak: &Soak, load: &Load) -> (&'static str, Result<String, String>) {
    let result = match load {
        Load::Scale { pool, replicas } => {
            let def = soak.pools.def(*pool);
            let target = format!("{}/{}", def.kubectl_kind(), def.workload_name);
            soak.cluster
                .kubectl_ok(&[
                    "-n",
                    NAMESPACE,
                    "scale",
                    &target,
                    &format!("--replicas={replicas}"),
                ])
                .await
                .map(|_| format!("{target} to {replicas}"))
        }
        Load::EditJobs { pool, add, pick } => edit_jobs(soak, *pool, *add, *pick).await,
        Load::RolloutRestart { pool } => {
            let def = soak.pools.def(*pool);
            let target = format!("{}/{}", def.kubectl_kind(), def.workload_name);
            soak.cluster
                .kubectl_ok(&["-n", NAMESPACE, "rollout", "restart", &target])
                .await
                .map(|_| target)
        }
        Load::TogglePool => toggle_transient(soak).await,
    };
    // A removal from a pool with no added job adds one instead: name what was done.
    let kind = match (&result, load) {
        (Ok(what), Load::EditJobs { .. }) if what.starts_with("added") => "add-job",
        (Ok(_), Load::EditJobs { .. }) => "remove-job",
        _ => load.kind(),
    };
    (kind, result)
}

/// Adds a new job to the pool's spec, or removes one the soak added earlier.
async fn edit_jobs(soak: &Soak, pool: usize, add: bool, pick: u64) -> Result<String, String> {
    let def = soak.pools.def(pool);
    let gvk = GroupVersionKind::gvk("swarm.io", "v1alpha1", "SwarmPool");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "swarmpools");
    let api: Api<DynamicObject> =
        Api::namespaced_with(soak.cluster.client.clone(), NAMESPACE, &resource);
    let current = api
        .get(&def.name)
        .await
        .map_err(|e| format!("get swarmpool {}: {e}", def.name))?;
    let mut jobs: Vec<String> = current.data["spec"]["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j.as_str().map(str::to_owned))
        .collect();
    let added: Vec<String> = jobs
        .iter()
        .filter(|j| j.starts_with("soak:"))
        .cloned()
        .collect();
    let what = if add || added.is_empty() {
        let job = format!("soak:job-{}", NEXT_JOB.fetch_add(1, Ordering::Relaxed));
        jobs.push(job.clone());
        format!("added {job} to {}", def.name)
    } else {
        let job = &added[pick as usize % added.len()];
        jobs.retain(|j| j != job);
        format!("removed {job} from {}", def.name)
    };
    let patch = serde_json::json!({"spec": {"jobs": jobs}}).to_string();
    soak.cluster
        .kubectl_ok(&[
            "-n",
            NAMESPACE,
            "patch",
            "swarmpool",
            &def.name,
            "--type=merge",
            "-p",
            &patch,
        ])
        .await
        .map(|_| what)
}

/// Deletes the live transient pool and its StatefulSet, or creates the next one.
async fn toggle_transient(soak: &Soak) -> Result<String, String> {
    if let Some(def) = soak.pools.live_transient() {
        soak.cluster
            .kubectl_ok(&[
                "-n",
                NAMESPACE,
                "delete",
                "swarmpool",
                &def.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .await?;
        soak.pools.retire(&def.name);
        soak.cluster
            .kubectl_ok(&[
                "-n",
                NAMESPACE,
                "delete",
                "statefulset",
                &def.workload_name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .await?;
        return Ok(format!("deleted {}", def.name));
    }
    let def = pools::transient(NEXT_TRANSIENT.fetch_add(1, Ordering::Relaxed));
    // Registered first: a failed apply may still have created it, and the next toggle
    // deletes it either way.
    let (name, manifests) = (def.name.clone(), def.manifests());
    soak.pools.add(PoolEntry::watch(soak, def, true));
    soak.cluster
        .apply(&format!("{name}.yaml"), &manifests)
        .await
        .map(|()| format!("created {name}"))
}
