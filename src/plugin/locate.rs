//! `kubectl swarm where JOB`: the pool and worker that hold a job, or that it waits in transit
//! or unassigned.

use serde::Serialize;

use super::output::Table;
use super::{PluginError, PoolView};

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum JobState {
    /// A worker holds it.
    Assigned,
    /// Revoked from `worker`, granted to its new worker once that pod is gone.
    InTransit,
    /// In the spec, held by no worker (the pool has no workers, or no config yet).
    Unassigned,
}

/// One pool's answer for the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    /// Namespace of the pool.
    pub namespace: String,
    /// Pool name.
    pub pool: String,
    /// The job.
    pub job: String,
    /// Where it stands.
    pub state: JobState,
    /// The worker that holds it, or that it was revoked from.
    pub worker: Option<String>,
    /// The config version since which that worker holds it (its job set's version).
    pub since_version: Option<u64>,
    /// The pool's config version now.
    pub config_version: Option<u64>,
}

/// Where `job` stands in each pool that lists it (in its spec or its config). Pools without a
/// config yet answer Unassigned for the jobs of their spec.
pub fn locate(views: &[PoolView], job: &str) -> Vec<Location> {
    let mut found = Vec::new();
    for view in views {
        let config = view.config().ok();
        let in_spec = view.pool.spec.jobs.iter().any(|j| j == job);
        let location = |state, worker: Option<&str>, since_version| Location {
            namespace: view.namespace(),
            pool: view.name(),
            job: job.to_owned(),
            state,
            worker: worker.map(str::to_owned),
            since_version,
            config_version: config.as_ref().map(|c| c.version),
        };
        let held = config.as_ref().and_then(|c| {
            c.workloads()
                .find(|(_, w)| w.jobs.iter().any(|j| j == job))
                .map(|(pod, w)| location(JobState::Assigned, Some(pod), Some(w.version)))
        });
        let in_transit = || {
            config.as_ref().and_then(|c| {
                c.transit()
                    .find(|(_, jobs)| jobs.iter().any(|j| j == job))
                    .map(|(pod, _)| location(JobState::InTransit, Some(pod), None))
            })
        };
        match held.or_else(in_transit) {
            Some(place) => found.push(place),
            None if in_spec => found.push(location(JobState::Unassigned, None, None)),
            None => {}
        }
    }
    found
}

/// Fails with [`PluginError::NoSuchJob`] when no pool lists the job.
pub fn require_found(
    found: Vec<Location>,
    job: &str,
    scope: &str,
) -> Result<Vec<Location>, PluginError> {
    if found.is_empty() {
        Err(PluginError::NoSuchJob {
            job: job.to_owned(),
            scope: scope.to_owned(),
        })
    } else {
        Ok(found)
    }
}

/// The answer as a table, one row per pool.
pub fn render(found: &[Location]) -> String {
    let mut table = Table::new(&["NAMESPACE", "POOL", "JOB", "STATE", "WORKER", "SINCE"]);
    for place in found {
        let state = match place.state {
            JobState::Assigned => "Assigned",
            JobState::InTransit => "InTransit",
            JobState::Unassigned => "Unassigned",
        };
        table.row(vec![
            place.namespace.clone(),
            place.pool.clone(),
            place.job.clone(),
            state.to_owned(),
            place.worker.clone().unwrap_or_else(|| "-".to_owned()),
            place
                .since_version
                .map_or_else(|| "-".to_owned(), |v| format!("v{v}")),
        ]);
    }
    table.render()
}
