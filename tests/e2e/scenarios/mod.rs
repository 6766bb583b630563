//! The end-to-end scenarios, one module each.

pub(crate) mod acknowledge;
mod bad_input;
mod deployment_pool;
mod failover;
mod handoff;
mod install;
mod job_edits;
mod jobs_from;
mod kubectl_commands;
mod kubectl_plugin;
mod namespaced_install;
mod pool_deletion;
mod qos;
mod quiet;
pub(crate) mod real_workers;
mod restart;
mod scale_down;
mod scale_up;
pub(crate) mod whole_cluster;

use crate::harness::Env;

/// `kubectl -n <example namespace> <args...>`, which must succeed; returns its stdout.
async fn kubectl_ns(env: &Env, args: &[&str]) -> String {
    let namespace = env.example.namespace();
    let mut full = vec!["-n", namespace.as_str()];
    full.extend_from_slice(args);
    env.kubectl.ok(&full).await
}

/// `kubectl scale statefulset <example sts> --replicas=<n>`.
async fn scale(env: &Env, replicas: usize) {
    let sts = env.example.statefulset_name();
    let replicas = format!("--replicas={replicas}");
    kubectl_ns(env, &["scale", "statefulset", &sts, &replicas]).await;
}

/// `kubectl swarm <args> -o json`, which must succeed, parsed.
async fn swarm_json(env: &Env, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["swarm"];
    full.extend_from_slice(args);
    full.extend(["-o", "json"]);
    let text = env.kubectl.ok(&full).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}
