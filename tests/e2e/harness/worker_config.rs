//! Reading `config.yml`, the workers' contract, independently of the operator's own types:
//! the suite checks the format a worker sees, as documented, not the code that writes it.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;

/// One worker's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Config version at which this worker's job set last changed.
    pub version: u64,
    /// The worker's jobs, in spec order.
    pub jobs: Vec<String>,
}

/// A parsed `config.yml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Config version: +1 each time any worker's job set changes.
    pub version: u64,
    /// Entries in document order (the contract says ordinal order).
    pub workloads: Vec<(String, Workload)>,
    /// Jobs in transit by the pod that last held them (present only during a handoff).
    pub transit: Vec<(String, Vec<String>)>,
}

impl WorkerConfig {
    /// Parses `text`, explaining what is wrong when it does not follow the documented shape.
    pub fn parse(text: &str) -> Result<WorkerConfig, String> {
        let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
        let version = doc
            .get("version")
            .and_then(Value::as_u64)
            .ok_or("missing integer `version`")?;
        let mut workloads = Vec::new();
        match doc.get("workloads") {
            Some(Value::Mapping(map)) => {
                for (name, entry) in map {
                    let name = name.as_str().ok_or("a workload key is not a string")?;
                    let version = entry
                        .get("version")
                        .and_then(Value::as_u64)
                        .ok_or_else(|| format!("workload {name}: missing integer `version`"))?;
                    let jobs = match entry.get("jobs") {
                        Some(Value::Sequence(items)) => items
                            .iter()
                            .map(|j| j.as_str().map(str::to_string))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| format!("workload {name}: a job is not a string"))?,
                        Some(Value::Null) | None => Vec::new(),
                        Some(other) => {
                            return Err(format!("workload {name}: `jobs` is {other:?}"));
                        }
                    };
                    workloads.push((name.to_string(), Workload { version, jobs }));
                }
            }
            Some(Value::Null) | None => {}
            Some(other) => return Err(format!("`workloads` is not a map: {other:?}")),
        }
        let mut transit = Vec::new();
        match doc.get("transit") {
            Some(Value::Mapping(map)) => {
                for (name, jobs) in map {
                    let name = name.as_str().ok_or("a transit key is not a string")?;
                    let jobs = jobs
                        .as_sequence()
                        .ok_or_else(|| format!("transit {name}: not a list"))?
                        .iter()
                        .map(|j| j.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| format!("transit {name}: a job is not a string"))?;
                    transit.push((name.to_string(), jobs));
                }
            }
            Some(Value::Null) | None => {}
            Some(other) => return Err(format!("`transit` is not a map: {other:?}")),
        }
        Ok(WorkerConfig {
            version,
            workloads,
            transit,
        })
    }

    /// The config of the per-worker layout (`rollout.policy: Acknowledge`): `index.yml` of the
    /// pool's ConfigMap `config_map`, and `slices`, each worker's own ConfigMap as (name, the
    /// pod its `swarm.io/worker` label names, its `config.yml`). Checks what
    /// docs/worker-protocol.md promises of each: it is named `<config_map>.<pod>` and holds that
    /// pod's entry only.
    pub fn assemble(
        config_map: &str,
        index: &str,
        slices: &[(String, String, String)],
    ) -> Result<WorkerConfig, String> {
        let doc: Value = serde_yaml::from_str(index).map_err(|e| format!("index.yml: {e}"))?;
        let version = doc
            .get("version")
            .and_then(Value::as_u64)
            .ok_or("index.yml: missing integer `version`")?;
        let mut assembled = WorkerConfig {
            version,
            workloads: Vec::new(),
            transit: Vec::new(),
        };
        for (name, pod, text) in slices {
            if *name != format!("{config_map}.{pod}") {
                return Err(format!(
                    "worker ConfigMap {name} is not named {config_map}.{pod}"
                ));
            }
            let slice = WorkerConfig::parse(text).map_err(|e| format!("{name}: {e}"))?;
            let others = slice
                .workloads
                .iter()
                .map(|(p, _)| p)
                .chain(slice.transit.iter().map(|(p, _)| p))
                .find(|p| *p != pod);
            if let Some(other) = others {
                return Err(format!("{name} holds an entry of {other}"));
            }
            assembled.workloads.extend(slice.workloads);
            assembled.transit.extend(slice.transit);
        }
        // Ordinal order, as in the whole config.
        let key = |pod: &str| {
            let (stem, tail) = pod.rsplit_once('-').unwrap_or((pod, ""));
            (stem.to_owned(), tail.parse::<u64>().ok(), pod.to_owned())
        };
        assembled.workloads.sort_by_key(|(pod, _)| key(pod));
        assembled.transit.sort_by_key(|(pod, _)| key(pod));
        Ok(assembled)
    }

    /// The entry of `pod`, if it has one.
    pub fn workload(&self, pod: &str) -> Option<&Workload> {
        self.workloads
            .iter()
            .find(|(name, _)| name == pod)
            .map(|(_, w)| w)
    }

    /// Pod names in document order.
    pub fn pods(&self) -> Vec<&str> {
        self.workloads
            .iter()
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Job sets by pod, for comparing two versions.
    pub fn job_sets(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.workloads
            .iter()
            .map(|(name, w)| (name.clone(), w.jobs.iter().cloned().collect()))
            .collect()
    }

    /// Every job in transit.
    pub fn in_transit(&self) -> BTreeSet<String> {
        self.transit
            .iter()
            .flat_map(|(_, jobs)| jobs.iter().cloned())
            .collect()
    }

    /// Number of jobs per worker, in document order.
    pub fn loads(&self) -> Vec<usize> {
        self.workloads.iter().map(|(_, w)| w.jobs.len()).collect()
    }

    /// Checks the guarantees every strategy gives for `jobs` over the ordinals
    /// `0..replicas` of `statefulset`: one entry per ordinal in ordinal order, every job on
    /// exactly one worker, no other job anywhere, jobs inside a worker in spec order.
    pub fn check_exactly_once(
        &self,
        statefulset: &str,
        replicas: usize,
        jobs: &[String],
    ) -> Result<(), String> {
        let expected_pods: Vec<String> = (0..replicas)
            .map(|i| format!("{statefulset}-{i}"))
            .collect();
        if self.pods() != expected_pods {
            return Err(format!(
                "workers {:?}, expected {expected_pods:?} in ordinal order",
                self.pods()
            ));
        }
        if !self.transit.is_empty() {
            return Err(format!("jobs still in transit: {:?}", self.transit));
        }
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (pod, workload) in &self.workloads {
            for job in &workload.jobs {
                if let Some(first) = owner.insert(job, pod) {
                    return Err(format!("job {job:?} is on both {first} and {pod}"));
                }
            }
            let position = |job: &String| jobs.iter().position(|j| j == job);
            let positions: Vec<_> = workload.jobs.iter().map(position).collect();
            if positions.iter().any(Option::is_none) {
                return Err(format!(
                    "{pod} holds a job that is not in the spec: {workload:?}"
                ));
            }
            if !positions.is_sorted() {
                return Err(format!(
                    "{pod} lists its jobs out of spec order: {workload:?}"
                ));
            }
        }
        let missing: Vec<_> = jobs
            .iter()
            .filter(|j| !owner.contains_key(j.as_str()))
            .collect();
        if !missing.is_empty() && replicas > 0 {
            return Err(format!("jobs on no worker: {missing:?}"));
        }
        Ok(())
    }

    /// Checks perfect balance: every worker holds floor(J/N) or ceil(J/N) jobs.
    pub fn check_balanced(&self) -> Result<(), String> {
        let loads = self.loads();
        match (loads.iter().min(), loads.iter().max()) {
            (Some(min), Some(max)) if max - min > 1 => Err(format!("unbalanced loads {loads:?}")),
            _ => Ok(()),
        }
    }
}

/// Pods whose job set differs between two configs (present in either).
pub fn touched_workers(before: &WorkerConfig, after: &WorkerConfig) -> BTreeSet<String> {
    let (a, b) = (before.job_sets(), after.job_sets());
    a.keys()
        .chain(b.keys())
        .filter(|pod| a.get(*pod) != b.get(*pod))
        .cloned()
        .collect()
}

/// Jobs present in both configs whose worker differs.
pub fn moved_jobs(before: &WorkerConfig, after: &WorkerConfig) -> BTreeSet<String> {
    let owners = |c: &WorkerConfig| -> BTreeMap<String, String> {
        c.workloads
            .iter()
            .flat_map(|(pod, w)| w.jobs.iter().map(move |j| (j.clone(), pod.clone())))
            .collect()
    };
    let (a, b) = (owners(before), owners(after));
    a.iter()
        .filter(|(job, pod)| b.get(*job).is_some_and(|p| p != *pod))
        .map(|(job, _)| job.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "version: 3\nworkloads:\n  w-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  w-1:\n    version: 1\n    jobs: []\n";

    #[test]
    fn parses_the_documented_format_in_document_order() {
        let config = WorkerConfig::parse(SAMPLE).unwrap();
        assert_eq!(config.version, 3);
        assert_eq!(config.pods(), ["w-0", "w-1"]);
        assert_eq!(config.workload("w-0").unwrap().jobs, ["a", "b"]);
        assert_eq!(config.workload("w-1").unwrap().version, 1);
    }

    #[test]
    fn exactly_once_rejects_a_job_on_two_workers_and_a_lost_job() {
        let jobs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let config = WorkerConfig::parse(SAMPLE).unwrap();
        assert!(
            config
                .check_exactly_once("w", 2, &jobs)
                .unwrap_err()
                .contains("no worker")
        );
        let twice = SAMPLE.replace("jobs: []", "jobs: [b]");
        let config = WorkerConfig::parse(&twice).unwrap();
        assert!(
            config
                .check_exactly_once("w", 2, &jobs)
                .unwrap_err()
                .contains("both")
        );
    }

    #[test]
    fn touched_and_moved_compare_job_sets() {
        let before = WorkerConfig::parse(SAMPLE).unwrap();
        let after =
            WorkerConfig::parse(&SAMPLE.replace("    - b\n", "").replace("[]", "[b]")).unwrap();
        assert_eq!(touched_workers(&before, &after).len(), 2);
        assert_eq!(
            moved_jobs(&before, &after),
            BTreeSet::from(["b".to_string()])
        );
    }
}
