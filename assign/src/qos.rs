//! `spec.qos`: jobs that need a worker of their own, and jobs that cost more than others.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt, HashSet};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest weight a job may have: far above any real cost ratio, small enough that the
/// total weight of a pool cannot overflow.
pub const MAX_WEIGHT: u64 = 1_000_000;

/// Quality of service for a pool's jobs: dedicated jobs and job weights.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Qos {
    /// Jobs that each run on a worker holding no other job, in order of priority: while there
    /// are not enough workers (one worker stays shared whenever some job has to share one), the
    /// first ones listed get a worker and the rest run as shared jobs. Every name must be in
    /// `spec.jobs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "dedicated_schema")]
    pub dedicated: Vec<String>,

    /// Relative cost of a job (an integer from 1 to 1000000); a job not listed weighs 1. The
    /// `Sticky` strategy balances the total weight of the shared workers; `Consistent` and
    /// `Contiguous` ignore weights. Every name must be in `spec.jobs`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "weights_schema")]
    pub weights: BTreeMap<String, u64>,
}

impl Qos {
    /// Whether this changes nothing: no dedicated job and no weight other than 1. An assignment
    /// under such a `Qos` is the assignment without one, byte for byte.
    pub fn is_neutral(&self) -> bool {
        self.dedicated.is_empty() && !self.is_weighted()
    }

    /// Whether some job weighs more than 1.
    pub fn is_weighted(&self) -> bool {
        self.weights.values().any(|&weight| weight != 1)
    }

    /// The weight of `job`: its entry in `weights`, or 1.
    pub fn weight(&self, job: &str) -> u64 {
        self.weights.get(job).copied().unwrap_or(1)
    }
}

/// Why a pool's `qos` cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    /// `qos.dedicated` names a job that `spec.jobs` does not list.
    #[error(
        "spec.qos.dedicated names job {job:?}, which is not in spec.jobs; add it to spec.jobs or remove it from spec.qos.dedicated"
    )]
    UnknownDedicated {
        /// The job name.
        job: String,
    },
    /// `qos.weights` names a job that `spec.jobs` does not list.
    #[error(
        "spec.qos.weights names job {job:?}, which is not in spec.jobs; add it to spec.jobs or remove its weight"
    )]
    UnknownWeighted {
        /// The job name.
        job: String,
    },
    /// `qos.dedicated` lists a job twice.
    #[error("job {job:?} is listed more than once in spec.qos.dedicated")]
    DuplicateDedicated {
        /// The job name.
        job: String,
    },
    /// A weight is outside 1..=[`MAX_WEIGHT`].
    #[error(
        "spec.qos.weights gives job {job:?} the weight {weight}; a weight is an integer from 1 to {MAX_WEIGHT}"
    )]
    WeightOutOfRange {
        /// The job name.
        job: String,
        /// The weight given.
        weight: u64,
    },
}

impl QosError {
    /// The job the error is about.
    pub fn job(&self) -> &str {
        match self {
            QosError::UnknownDedicated { job }
            | QosError::UnknownWeighted { job }
            | QosError::DuplicateDedicated { job }
            | QosError::WeightOutOfRange { job, .. } => job,
        }
    }
}

/// Checks `qos` against the pool's (valid) job list, reporting the first problem: dedicated
/// jobs in list order, then weights in name order.
pub fn validate_qos(jobs: &[String], qos: &Qos) -> Result<(), QosError> {
    let listed: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    let mut seen: HashMap<&str, ()> = HashMap::with_capacity(qos.dedicated.len());
    for job in &qos.dedicated {
        if !listed.contains(job.as_str()) {
            return Err(QosError::UnknownDedicated { job: job.clone() });
        }
        if seen.insert(job, ()).is_some() {
            return Err(QosError::DuplicateDedicated { job: job.clone() });
        }
    }
    for (job, &weight) in &qos.weights {
        if !listed.contains(job.as_str()) {
            return Err(QosError::UnknownWeighted { job: job.clone() });
        }
        if !(1..=MAX_WEIGHT).contains(&weight) {
            return Err(QosError::WeightOutOfRange {
                job: job.clone(),
                weight,
            });
        }
    }
    Ok(())
}

fn dedicated_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Jobs that each run on a worker holding no other job, in order of priority: while there are not enough workers (one worker stays shared whenever some job has to share one), the first ones listed get a worker and the rest run as shared jobs. Every name must be in `spec.jobs`.",
        "type": "array",
        "items": { "type": "string", "minLength": 1 },
        "x-kubernetes-list-type": "set",
    })
}

fn weights_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Relative cost of a job (an integer from 1 to 1000000); a job not listed weighs 1. The `Sticky` strategy balances the total weight of the shared workers; `Consistent` and `Contiguous` ignore weights. Every name must be in `spec.jobs`.",
        "type": "object",
        "additionalProperties": { "type": "integer", "format": "int64", "minimum": 1, "maximum": MAX_WEIGHT },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn names_outside_the_job_list_repeats_and_zero_weights_are_refused_naming_the_job() {
        let list = jobs(&["a", "b"]);
        let qos = |dedicated: &[&str], weights: &[(&str, u64)]| Qos {
            dedicated: jobs(dedicated),
            weights: weights.iter().map(|(j, w)| (j.to_string(), *w)).collect(),
        };
        assert_eq!(validate_qos(&list, &qos(&["a"], &[("b", 3)])), Ok(()));
        let error = validate_qos(&list, &qos(&["c"], &[])).unwrap_err();
        assert_eq!(error.job(), "c");
        assert!(
            error
                .to_string()
                .contains("spec.qos.dedicated names job \"c\"")
        );
        let error = validate_qos(&list, &qos(&[], &[("z", 2)])).unwrap_err();
        assert_eq!(error, QosError::UnknownWeighted { job: "z".into() });
        let error = validate_qos(&list, &qos(&["a", "a"], &[])).unwrap_err();
        assert_eq!(error, QosError::DuplicateDedicated { job: "a".into() });
        let error = validate_qos(&list, &qos(&[], &[("a", 0)])).unwrap_err();
        assert!(error.to_string().contains("from 1 to 1000000"), "{error}");
    }

    #[test]
    fn weights_of_one_are_neutral() {
        let mut qos = Qos::default();
        assert!(qos.is_neutral());
        qos.weights.insert("a".into(), 1);
        assert!(qos.is_neutral());
        assert_eq!(qos.weight("a"), 1);
        qos.weights.insert("b".into(), 4);
        assert!(!qos.is_neutral());
        assert_eq!((qos.weight("b"), qos.weight("zz")), (4, 1));
    }
}
