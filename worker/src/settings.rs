//! Who the worker is, where it reads and writes, and its permit, from the pod's environment (the
//! downward API and the pool's pod spec), each overridable through [`crate::WorkerBuilder`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use swarm_protocol::fence;

use crate::Error;

/// The permit when none is set ([`fence::DEFAULT_PERMIT`], 30 s): a fence read lets the jobs it
/// shows run for this long after its send.
pub const DEFAULT_PERMIT: Duration = fence::DEFAULT_PERMIT;
/// Where readiness is served when `SWARM_WORKER_HEALTH_ADDR` is unset.
pub const DEFAULT_HEALTH_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8081);
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
    /// `SWARM_PERMIT_SECONDS`: how long after its send a fence read lets the jobs it shows run
    /// (whole seconds, at least [`fence::MIN_PERMIT`]); the Lease's `leaseDurationSeconds`.
    pub permit: Duration,
    /// `SWARM_WORKER_HEALTH_ADDR`: where `/readyz` and `/healthz` are served; port 0 picks a
    /// free port.
    pub health_addr: SocketAddr,
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

    /// How often the worker reads its ConfigMap when nothing fails: half its permit.
    pub fn read_every(&self) -> Duration {
        fence::read_interval(self.permit)
    }

    /// How long after the send of its last successful read the worker answers ready.
    pub fn ready_within(&self) -> Duration {
        fence::ready_within(self.permit)
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
    pub(crate) permit: Option<Duration>,
    pub(crate) health_addr: Option<SocketAddr>,
    pub(crate) termination_deadline: Option<Duration>,
    /// Variables that hold no usable value, reported unless the builder sets their setting.
    pub(crate) invalid: Vec<Invalid>,
    /// Variables of the renewing protocol that are set: refused whatever the builder sets.
    pub(crate) retired: Vec<&'static str>,
}

/// An environment variable that does not hold what it must.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    name: &'static str,
    value: String,
    expected: &'static str,
}

const PERMIT_VAR: &str = "SWARM_PERMIT_SECONDS";
const HEALTH_ADDR_VAR: &str = "SWARM_WORKER_HEALTH_ADDR";
const TERMINATION_VAR: &str = "SWARM_TERMINATION_SECONDS";
/// The settings of the Lease-renewing protocol: a worker that silently ignored them would run
/// on a permit its operator did not choose.
const RETIRED_VARS: [&str; 2] = ["SWARM_LEASE_DURATION_SECONDS", "SWARM_FENCE_MARGIN_SECONDS"];
const PERMIT_EXPECTED: &str = "expected a whole number of seconds, at least 2 (unset: 30)";
const HEALTH_ADDR_EXPECTED: &str =
    "expected an IP address and a port, such as 0.0.0.0:8081 or [::]:8081 (port 0: any free one)";

/// Where to serve readiness, from the value of `SWARM_WORKER_HEALTH_ADDR` (unset or empty: the
/// default, `0.0.0.0:8081`); for programs that serve it without a [`crate::Worker`].
pub fn health_addr(value: Option<&str>) -> Result<SocketAddr, Error> {
    let Some(value) = value.map(str::trim).filter(|value| !value.is_empty()) else {
        return Ok(DEFAULT_HEALTH_ADDR);
    };
    value.parse().map_err(|_| Error::InvalidSetting {
        name: HEALTH_ADDR_VAR,
        value: value.to_string(),
        expected: HEALTH_ADDR_EXPECTED,
    })
}

impl PartialSettings {
    /// Reads the protocol's variables through `var`; empty values count as unset.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let mut invalid = Vec::new();
        let mut parsed =
            |name: &'static str, expected: &'static str, parse: fn(&str) -> Option<Duration>| {
                let value = var(name)?;
                let parsed = parse(value.trim());
                if parsed.is_none() {
                    invalid.push(Invalid {
                        name,
                        value,
                        expected,
                    });
                }
                parsed
            };
        let permit = parsed(PERMIT_VAR, PERMIT_EXPECTED, parse_permit);
        let termination_deadline = parsed(
            TERMINATION_VAR,
            "expected a positive number of seconds",
            parse_seconds,
        );
        let health_addr = var(HEALTH_ADDR_VAR).and_then(|value| {
            health_addr(Some(&value))
                .inspect_err(|_| {
                    invalid.push(Invalid {
                        name: HEALTH_ADDR_VAR,
                        value: value.clone(),
                        expected: HEALTH_ADDR_EXPECTED,
                    })
                })
                .ok()
        });
        Self {
            pod_name: var("POD_NAME"),
            namespace: var("POD_NAMESPACE"),
            pod_uid: var("POD_UID"),
            pool: var("SWARM_POOL"),
            config_map: var("SWARM_CONFIG_MAP"),
            report: var("SWARM_WORKER_REPORT").map(PathBuf::from),
            permit,
            health_addr,
            termination_deadline,
            invalid,
            retired: RETIRED_VARS
                .into_iter()
                .filter(|name| var(name).is_some())
                .collect(),
        }
    }

    /// The complete settings, or the first setting that is refused, invalid or missing.
    pub(crate) fn complete(self) -> Result<Settings, Error> {
        if let Some(name) = self.retired.first() {
            return Err(Error::RetiredSetting { name });
        }
        let missing = |name: &'static str| Error::MissingSetting { name };
        // A variable whose setting the builder gave after all is not in the way.
        let overridden = |name: &str| match name {
            PERMIT_VAR => self.permit.is_some(),
            HEALTH_ADDR_VAR => self.health_addr.is_some(),
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
        let permit = self.permit.unwrap_or(DEFAULT_PERMIT);
        // The Lease carries whole seconds: a fraction would shorten the operator's revoke wait.
        if permit < fence::MIN_PERMIT || permit.subsec_nanos() != 0 {
            return Err(Error::InvalidSetting {
                name: PERMIT_VAR,
                value: format!("{permit:?}"),
                expected: PERMIT_EXPECTED,
            });
        }
        let pool = self.pool.ok_or(missing("SWARM_POOL"))?;
        Ok(Settings {
            pod_name: self.pod_name.ok_or(missing("POD_NAME"))?,
            namespace: self.namespace.ok_or(missing("POD_NAMESPACE"))?,
            pod_uid: self.pod_uid.ok_or(missing("POD_UID"))?,
            config_map: self.config_map.unwrap_or_else(|| format!("{pool}-config")),
            pool,
            report: self.report,
            permit,
            health_addr: self.health_addr.unwrap_or(DEFAULT_HEALTH_ADDR),
            termination_deadline: self
                .termination_deadline
                .unwrap_or(DEFAULT_TERMINATION_DEADLINE),
        })
    }
}

/// A permit as the pod's environment gives it: whole seconds, at least [`fence::MIN_PERMIT`].
fn parse_permit(value: &str) -> Option<Duration> {
    value
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
        .filter(|permit| *permit >= fence::MIN_PERMIT)
}

/// A positive, finite number of seconds.
fn parse_seconds(value: &str) -> Option<Duration> {
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

    const POD: [(&str, &str); 4] = [
        ("POD_NAME", "w-0"),
        ("POD_NAMESPACE", "ns"),
        ("POD_UID", "u-1"),
        ("SWARM_POOL", "pool"),
    ];

    fn vars(pairs: &[(&str, &str)]) -> PartialSettings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PartialSettings::from_vars(|name| map.get(name).cloned())
    }

    #[test]
    fn the_builder_overrides_a_bad_variable_but_not_a_retired_one() {
        let mut pairs = POD.to_vec();
        pairs.push(("SWARM_PERMIT_SECONDS", "thirty"));
        let mut partial = vars(&pairs);
        partial.permit = Some(Duration::from_secs(4));
        assert_eq!(partial.complete().unwrap().permit, Duration::from_secs(4));
        pairs.push(("SWARM_FENCE_MARGIN_SECONDS", "8"));
        let mut partial = vars(&pairs);
        partial.permit = Some(Duration::from_secs(4));
        let error = partial.complete().unwrap_err().to_string();
        assert!(error.contains("SWARM_FENCE_MARGIN_SECONDS"), "{error}");
    }

    #[test]
    fn a_permit_from_the_builder_is_whole_seconds_and_at_least_two() {
        for permit in [Duration::from_secs(1), Duration::from_millis(2500)] {
            let mut partial = vars(&POD);
            partial.permit = Some(permit);
            let error = partial.complete().unwrap_err().to_string();
            assert!(error.contains("SWARM_PERMIT_SECONDS"), "{error}");
        }
    }

    #[test]
    fn explicit_config_map_and_report_are_kept() {
        let mut pairs = POD.to_vec();
        pairs.extend([
            ("SWARM_CONFIG_MAP", "jobs"),
            ("SWARM_WORKER_REPORT", "/tmp/report"),
        ]);
        let settings = vars(&pairs).complete().unwrap();
        assert_eq!(settings.config_map, "jobs");
        assert_eq!(settings.report, Some(PathBuf::from("/tmp/report")));
    }

    #[test]
    fn an_invalid_variable_is_named_with_what_it_must_hold() {
        let mut pairs = POD.to_vec();
        pairs.push(("SWARM_WORKER_HEALTH_ADDR", "localhost:8081"));
        let error = vars(&pairs).complete().unwrap_err().to_string();
        assert!(error.contains("SWARM_WORKER_HEALTH_ADDR"), "{error}");
        assert!(error.contains("expected an IP address"), "{error}");
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
        // Seconds as the vectors write them, compared to the microsecond (1.2 s is no f64).
        let seconds = |value: &serde_json::Value| {
            Duration::from_micros((value.as_f64().unwrap() * 1e6).round() as u64)
        };
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
            assert_eq!(settings.permit, seconds(&want["permitSeconds"]), "{name}");
            assert_eq!(
                settings.read_every(),
                seconds(&want["readEverySeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.ready_within(),
                seconds(&want["readyWithinSeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.termination_deadline,
                seconds(&want["terminationSeconds"]),
                "{name}"
            );
            assert_eq!(
                settings.health_addr.to_string(),
                want["healthAddr"].as_str().unwrap(),
                "{name}"
            );
        }
    }
}
