//! Who the worker is and where it reads and writes, from the pod's environment (the downward
//! API and the pool's pod spec), each overridable through [`crate::WorkerBuilder`].

use std::path::PathBuf;
use std::time::Duration;
use swarm_protocol::fence;

use crate::Error;

/// The Lease duration when none is set: the operator sees a stopped worker within it.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(10);
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
    /// The Lease's `leaseDurationSeconds`; it is renewed four times per duration.
    pub lease_duration: Duration,
    /// How long before its Lease could look expired the worker fences itself (stops every
    /// job); by default [`swarm_protocol::fence::default_margin`], at most half the duration.
    pub fence_margin: Duration,
    /// How long after SIGTERM the worker waits to acknowledge a version without jobs before it
    /// exits anyway; keep it below the pod's `terminationGracePeriodSeconds`.
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
}

impl PartialSettings {
    /// Reads the protocol's variables through `var`; empty values count as unset.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        Self {
            pod_name: var("POD_NAME"),
            namespace: var("POD_NAMESPACE"),
            pod_uid: var("POD_UID"),
            pool: var("SWARM_POOL"),
            config_map: var("SWARM_CONFIG_MAP"),
            report: var("SWARM_WORKER_REPORT").map(PathBuf::from),
            lease_duration: None,
            fence_margin: None,
            termination_deadline: None,
        }
    }

    /// The complete settings, or the first missing variable.
    pub(crate) fn complete(self) -> Result<Settings, Error> {
        let missing = |name: &'static str| Error::MissingSetting { name };
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
        assert_eq!(settings.lease_duration, Duration::from_secs(10));
        assert_eq!(settings.fence_margin, Duration::from_secs(2));
        assert_eq!(settings.fence_after(), Duration::from_secs(8));
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
}
