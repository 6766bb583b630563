//! The pool both plan benchmarks reconcile: 1,000 workers sharing 100,000 jobs under
//! `rollout.policy: Acknowledge`, in memory ([`WhatIf`]).
#![allow(dead_code)] // each benchmark uses a different part

use k8s_openapi::jiff::Timestamp;
use swarm_operator::api::crd::{RolloutPolicy, SwarmPool};
use swarm_operator::drive::whatif::WhatIf;

pub const WORKERS: usize = 1_000;
pub const JOBS: usize = 100_000;
/// The workers after the scale: a tenth more.
pub const SCALED: usize = WORKERS + WORKERS / 10;
const STATEFULSET: &str = "swarm-worker";

fn pool() -> SwarmPool {
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("stream:camera-{i:06}")).collect();
    let mut pool = SwarmPool::new(
        "big",
        serde_json::from_value(serde_json::json!({
            "selector": {"matchLabels": {"app": STATEFULSET}},
            "jobs": jobs,
        }))
        .expect("a valid spec"),
    );
    pool.spec.rollout.policy = RolloutPolicy::Acknowledge;
    pool.metadata.namespace = Some("bench".into());
    pool.metadata.uid = Some("big-uid".into());
    pool.metadata.generation = Some(1);
    pool
}

fn running(workers: usize) -> Vec<(String, String)> {
    (0..workers)
        .map(|i| (format!("{STATEFULSET}-{i}"), format!("uid-{i}")))
        .collect()
}

/// The pool with its workers running and no ConfigMap yet.
pub fn fresh() -> WhatIf {
    WhatIf::new(
        pool(),
        STATEFULSET,
        &running(WORKERS),
        None,
        Vec::new(),
        Timestamp::UNIX_EPOCH,
    )
}

/// The pool settled on its first config, every worker acknowledged.
pub fn settled() -> WhatIf {
    let mut whatif = fresh();
    whatif.settle().expect("the pool settles");
    whatif
}

/// `settled`, its StatefulSet scaled to [`SCALED`] workers.
pub fn scaled(settled: &WhatIf) -> WhatIf {
    let mut whatif = settled.clone();
    whatif.scale(SCALED);
    whatif
}
