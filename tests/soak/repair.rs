//! Keeping the control plane's own helpers working, so that the soak measures the operator:
//! after a restart of the API server, kube-scheduler v1.37 can stop binding pods for good (its
//! watches get 403s while the new API server's RBAC caches warm up, then it reports a
//! corrupted cache), and worker pods then stay Pending whatever the operator does. A pod left
//! unscheduled, or scheduled and never started by kwok, well outside any fault gets that
//! component restarted; the report lists every such repair.

use k8s_openapi::api::core::v1::Pod;

use crate::Soak;

/// Seconds a pod may wait for the scheduler or for kwok before the soak steps in.
const STUCK: f64 = 20.0;
/// Seconds between two repairs of one component.
const AGAIN: f64 = 60.0;

/// What the soak repaired, and when.
#[derive(Default)]
pub struct Repairs {
    done: Vec<(f64, String)>,
}

impl Repairs {
    /// Every repair: when, and what.
    pub fn all(&self) -> Vec<(f64, String)> {
        self.done.clone()
    }
}

/// Restarts kube-scheduler or kwok if `pods` show it stuck (called with each status sample).
pub async fn check(soak: &Soak, pods: &[Pod]) {
    let now = soak.clock.now();
    if soak.faults.near_fault(now, STUCK) {
        return;
    }
    let age = |pod: &Pod| {
        pod.metadata
            .creation_timestamp
            .as_ref()
            .map_or(0.0, |t| now - soak.clock.at_timestamp(t.0))
    };
    let waiting = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && age(p) > STUCK);
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    let scheduled = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    let unscheduled = waiting.clone().find(|p| !scheduled(p));
    let unstarted = waiting
        .clone()
        .find(|p| scheduled(p) && phase(p).as_deref() == Some("Pending"));
    for (component, pod) in [("kube-scheduler", unscheduled), ("kwok", unstarted)] {
        let Some(pod) = pod else {
            continue;
        };
        let last = {
            let repairs = soak.repairs.lock().unwrap_or_else(|p| p.into_inner());
            repairs
                .done
                .iter()
                .rev()
                .find(|(_, what)| what.starts_with(component))
                .map(|(at, _)| *at)
        };
        if last.is_some_and(|at| now - at < AGAIN) {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let result = soak.cluster.script("restart", &[component]).await;
        let what = format!(
            "{component} restarted: pod {name} waited {:.0} s{}",
            age(pod),
            result
                .err()
                .map(|e| format!(" (restart failed: {e})"))
                .unwrap_or_default()
        );
        eprintln!("soak: t={now:.1}s repair: {what}");
        soak.repairs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .done
            .push((now, what));
    }
}
