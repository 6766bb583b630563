//! Who the worker is and where it reads and writes, from the pod's environment (the downward
//! API and the pool's pod spec), each overridable through [`crate::WorkerBuilder`].

use std::path::PathBuf;
use std::time::Duration;
use swarm_protocol::fence;

use crate::Error;

/// The Lease duration when none is set ([`fence::DEFAULT_DURATION`], 40 s): the operator hands
/// a stopped worker's jobs to others within it and the pool's grace.
pub const DEFAULT_LEASE_DURATION: Duration = fence::DEFAULT_DURATION;
/// How long a terminating worker waits for a version it may acknowledge: within Kubernetes'
/// default grace period of 30 s, with room to exit.
pub const DEFAULT_TERMINATION_DEADLINE: Duration = Duration::from_secs(25);

/// Everything the worker needs to know about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `POD_NAME`: the entry of `config.yml` to run, and the Lease's name.
    pub pod_name: String,
    /// `POD_NAMESPACE`: where the ConfigMap and the Lease are.
    pub namespace: String,
    /// `POD_UID`: the Lease's holder identity and its owner reference.
    pub pod_uid: String,
    /// `SWARM_POOL`: the SwarmPool's name, the Lease's `swarm.io/pool` label.
    pub pool: String,
    /// `SWARM_CONFIG_MAP`: the pool's ConfigMap, by default `<pool>-config`; the worker reads
    /// its own, [`Settings::own_config_map`].
    pub config_map: String,
    /// `SWARM_WORKER_REPORT`: the report file, if any.
    pub report: Option<PathBuf>,
    /// `SWARM_LEASE_DURATION_SECONDS`: the Lease's `leaseDurationSeconds`, renewed every
    /// quarter of it ([`fence::renew_interval`]) and at once on each acknowledgement.
    pub lease_duration: Duration,
    /// `SWARM_FENCE_MARGIN_SECONDS`: how long before its Lease could look expired the worker
    /// fences itself (stops every job); by default [`swarm_protocol::fence::default_margin`],
    /// at most half the duration.
    pub fence_margin: Duration,
    /// `SWARM_TERMINATION_SECONDS`: how long after SIGTERM the worker waits to acknowledge a
    /// version without jobs before it exits anyway; keep it below the pod's
    /// `terminationGracePeriodSeconds`.
    pub termination_deadline: Duration,
}

impl Settings {
    /// The ConfigMap this worker reads, `<config_map>.<pod_name>`: the operator gives each
    /// worker its own slice of the config, so a version change reaches only the workers whose
    /// jobs it changes.
    pub fn own_config_map(&self) -> String {
        format!("{}.{}", self.config_map, self.pod_name)
    }

    /// How long after its last successful Lease write the worker may run jobs.
    pub fn fence_after(&self) -> Duration {
        fence::limit(self.lease_duration, self.fence_margin)
    }

    /// How often the Lease is renewed when no acknowledgement is due.
    pub fn renew_every(&self) -> Duration {
        fence::renew_interval(self.lease_duration)
    }
}

/// Settings as read from the environment, each possibly missing until the builder fills it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartialSettings {
    pub(crate) pod_name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) pod_uid: Option<String>,
    pub(crate) pool: Option<String>,
    pub(crate) config_map: Option<String>,
    pub(crate) report: Option<PathBuf>,
    pub(crate) lease_duration: Option<Duration>,
    pub(crate) fence_margin: Option<Duration>,
    pub(crate) termination_deadline: Option<Duration>,
    /// Variables that hold no usable value, reported unless the builder sets their setting.
    pub(crate) invalid: Vec<Invalid>,
}

/// An environment variable that does not hold what it must.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    name: &'static str,
    value: String,
    expected: &'static str,
}

const LEASE_DURATION_VAR: &str = "SWARM_LEASE_DURATION_SECONDS";
const FENCE_MARGIN_VAR: &str = "SWARM_FENCE_MARGIN_SECONDS";
const TERMINATION_VAR: &str = "SWARM_TERMINATION_SECONDS";

impl PartialSettings {
    /// Reads the protocol's variables through `var`; empty values count as unset.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let mut invalid = Vec::new();
        let mut seconds = |name: &'static str, whole: bool| {
            let value = var(name)?;
            let parsed = parse_seconds(&value, whole);
            if parsed.is_none() {
                invalid.push(Invalid {
                    name,
                    value,
                    expected: if whole {
                        "expected a whole number of seconds, at least 1 (unset: 40)"
                    } else {
                        "expected a positive number of seconds"
                    },
                });
            }
            parsed
        };
        let lease_duration = seconds(LEASE_DURATION_VAR, true);
        let fence_margin = seconds(FENCE_MARGIN_VAR, false);
        let termination_deadline = seconds(TERMINATION_VAR, false);
        Self {
            pod_name: var("POD_NAME"),
            namespace: var("POD_NAMESPACE"),
            pod_uid: var("POD_UID"),
            pool: var("SWARM_POOL"),
            config_map: var("SWARM_CONFIG_MAP"),
            report: var("SWARM_WORKER_REPORT").map(PathBuf::from),
            lease_duration,
            fence_margin,
            termination_deadline,
            invalid,
        }
    }

    /// The complete settings, or the first missing variable.
    pub(crate) fn complete(self) -> Result<Settings, Error> {
        let missing = |name: &'static str| Error::MissingSetting { name };
        // A variable whose setting the builder gave after all is not in the way.
        let overridden = |name: &str| match name {
            LEASE_DURATION_VAR => self.lease_duration.is_some(),
            FENCE_MARGIN_VAR => self.fence_margin.is_some(),
            TERMINATION_VAR => self.termination_deadline.is_some(),
            _ => false,
        };
        if let Some(bad) = self.invalid.iter().find(|bad| !overridden(bad.name)) {
            return Err(Error::InvalidSetting {
                name: bad.name,
                value: bad.value.clone(),
                expected: bad.expected,
            });
        }
        let pool = self.pool.ok_or(missing("SWARM_POOL"))?;
        let lease_duration = self.lease_duration.unwrap_or(DEFAULT_LEASE_DURATION);
        Ok(Settings {
            pod_name: self.pod_name.ok_or(missing("POD_NAME"))?,
            namespace: self.namespace.ok_or(missing("POD_NAMESPACE"))?,
            pod_uid: self.pod_uid.ok_or(missing("POD_UID"))?,
            config_map: self.config_map.unwrap_or_else(|| format!("{pool}-config")),
            pool,
            report: self.report,
            lease_duration,
            fence_margin: self
                .fence_margin
                .unwrap_or_else(|| fence::default_margin(lease_duration)),
            termination_deadline: self
                .termination_deadline
                .unwrap_or(DEFAULT_TERMINATION_DEADLINE),
        })
    }
}

/// A number of seconds as the pod's environment gives it: whole (and at least 1) or not,
/// positive either way.
fn parse_seconds(value: &str, whole: bool) -> Option<Duration> {
    let value = value.trim();
    if whole {
        return value
            .parse::<u64>()
            .ok()
            .filter(|s| *s >= 1)
            .map(Duration::from_secs);
    }
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> PartialSettings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PartialSettings::from_vars(|name| map.get(name).cloned())
    }

    #[test]
    fn the_downward_api_and_pool_variables_make_complete_settings_with_defaults() {
        let settings = vars(&[
            ("POD_NAME", "w-0"),
            ("POD_NAMESPACE", "ns"),
            ("POD_UID", "u-1"),
            ("SWARM_POOL", "pool"),
        ])
        .complete()
        .unwrap();
        assert_eq!(settings.config_map, "pool-config");
        assert_eq!(settings.own_config_map(), "pool-config.w-0");
        assert_eq!(settings.report, None);
        assert_eq!(settings.lease_duration, Duration::from_secs(40));
        assert_eq!(settings.fence_margin, Duration::from_secs(8));
        assert_eq!(settings.fence_after(), Duration::from_secs(32));
        assert_eq!(settings.renew_every(), Duration::from_secs(10));
        assert_eq!(settings.termination_deadline, Duration::from_secs(25));
    }

    const POD: [(&str, &str); 4] = [
        ("POD_NAME", "w-0"),
        ("POD_NAMESPACE", "ns"),
        ("POD_UID", "u-1"),
        ("SWARM_POOL", "pool"),
    ];

    #[test]
    fn the_lease_timing_comes_from_the_pod_environment() {
        let mut pairs = POD.to_vec();
        pairs.extend([
            ("SWARM_LEASE_DURATION_SECONDS", "10"),
            ("SWARM_TERMINATION_SECONDS", "12.5"),
        ]);
        let settings = vars(&pairs).complete().unwrap();
        assert_eq!(settings.lease_duration, Duration::from_secs(10));
        assert_eq!(settings.fence_margin, Duration::from_secs(2));
        assert_eq!(settings.renew_every(), Duration::from_millis(2500));
        assert_eq!(settings.termination_deadline, Duration::from_millis(12500));
        pairs.push(("SWARM_FENCE_MARGIN_SECONDS", "3"));
        let settings = vars(&pairs).complete().unwrap();
        assert_eq!(settings.fence_after(), Duration::from_secs(7));
    }

    #[test]
    fn a_timing_variable_that_is_no_number_is_named_with_what_it_must_hold() {
        for (name, value) in [
            ("SWARM_LEASE_DURATION_SECONDS", "40s"),
            ("SWARM_LEASE_DURATION_SECONDS", "0"),
            ("SWARM_LEASE_DURATION_SECONDS", "2.5"),
            ("SWARM_FENCE_MARGIN_SECONDS", "-1"),
            ("SWARM_TERMINATION_SECONDS", "soon"),
        ] {
            let mut pairs = POD.to_vec();
            pairs.push((name, value));
            let error = vars(&pairs).complete().unwrap_err();
            assert!(
                matches!(&error, Error::InvalidSetting { name: n, value: v, .. } if n == &name && v == value),
                "{name}={value}: {error}"
            );
            assert!(error.to_string().contains("expected"), "{error}");
        }
    }

    #[test]
    fn the_builder_overrides_a_bad_variable() {
        let mut pairs = POD.to_vec();
        pairs.push(("SWARM_LEASE_DURATION_SECONDS", "forty"));
        let mut partial = vars(&pairs);
        partial.lease_duration = Some(Duration::from_secs(20));
        assert_eq!(
            partial.complete().unwrap().lease_duration,
            Duration::from_secs(20)
        );
    }

    #[test]
    fn explicit_config_map_file_and_report_are_kept() {
        let settings = vars(&[
            ("POD_NAME", "w-0"),
            ("POD_NAMESPACE", "ns"),
            ("POD_UID", "u-1"),
            ("SWARM_POOL", "pool"),
            ("SWARM_CONFIG_MAP", "jobs"),
            ("SWARM_WORKER_REPORT", "/tmp/report"),
        ])
        .complete()
        .unwrap();
        assert_eq!(settings.config_map, "jobs");
        assert_eq!(settings.report, Some(PathBuf::from("/tmp/report")));
    }

    #[test]
    fn a_missing_or_empty_variable_is_named() {
        let error = vars(&[
            ("POD_NAME", "w-0"),
            ("POD_NAMESPACE", "ns"),
            ("POD_UID", ""),
            ("SWARM_POOL", "pool"),
        ])
        .complete()
        .unwrap_err();
        assert!(matches!(error, Error::MissingSetting { name: "POD_UID" }));
    }

    /// `protocol/vectors/settings.json`, which the Go and Python workers read too.
    #[test]
    fn the_settings_are_the_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../protocol/vectors/settings.json"
        );
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let seconds = |value: &serde_json::Value| Duration::from_secs_f64(value.as_f64().unwrap());
        for case in file["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let mut env: HashMap<String, String> =
                serde_json::from_value(file["pod"].clone()).unwrap();
            for (key, value) in case["environment"].as_object().unwrap() {
                match value.as_str() {
                    Some(value) => env.insert(key.clone(), value.to_owned()),
                    None => env.remove(key),
                };
            }
            let result = PartialSettings::from_vars(|name| env.get(name).cloned()).complete();
            if let Some(variable) = case["error"].as_str() {
                let error = result.expect_err(name).to_string();
                assert!(error.contains(variable), "{name}: {error}");
                continue;
            }
            let settings = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            let want = &case["settings"];
            assert_eq!(settings.own_config_map(), want["ownConfigMap"], "{name}");
            assert_eq!(
                settings.lease_duration,
                seconds(&want["leaseDurationSeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.renew_every(),
                seconds(&want["renewEverySeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.fence_after(),
                seconds(&want["fenceAfterSeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.termination_deadline,
                seconds(&want["terminationSeconds"]),
                "{name}"
            );
        }
    }
}
