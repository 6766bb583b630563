//! Where the worker reads its entry: its own ConfigMap, `<pool's ConfigMap>.<pod>`, through the
//! API (GET, then WATCH by name from that GET's resourceVersion). There is no fallback to a mounted file: a worker
//! that cannot reach the API cannot renew its Lease either, so the operator hands its jobs to
//! others, and it must run none of them (see [`crate::fence`]).

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use swarm_protocol::config::{CONFIG_KEY, WorkerConfig};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// How long to wait before reading the ConfigMap again after a failed read.
const RETRY: Duration = Duration::from_secs(2);

/// One version of this worker's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The config version.
    pub version: u64,
    /// The jobs of this pod's entry; empty when the config has none for it.
    pub entry: Vec<String>,
}

impl Observed {
    /// This pod's entry of a `config.yml` text, or why it cannot be read.
    pub fn parse(text: &str, pod: &str) -> Result<Observed, swarm_protocol::config::ParseError> {
        let config = WorkerConfig::parse(text)?;
        Ok(Observed {
            version: config.version,
            entry: config
                .workload(pod)
                .map(|workload| workload.jobs.clone())
                .unwrap_or_default(),
        })
    }
}

/// Follows the ConfigMap `name` and publishes this pod's entry on `out` until `out` has no
/// receiver left.
pub(crate) async fn follow(
    api: Api<ConfigMap>,
    name: String,
    pod: String,
    out: watch::Sender<Option<Observed>>,
) {
    let mut answered = false;
    let mut expired = false;
    while !out.is_closed() {
        match api.get_opt(&name).await {
            Ok(found) => {
                if !answered {
                    info!(config_map = %name, "API reachable");
                    answered = true;
                }
                match found {
                    Some(config_map) => {
                        // A GET answers with the object's own resourceVersion, which may be
                        // older than the server's watch history (after a 410 it is, unless the
                        // object changed since): then watch without one, from the object as it
                        // is, or each watch would expire at once.
                        let version = match config_map.metadata.resource_version.clone() {
                            Some(_) if expired => Some(String::new()),
                            version => version,
                        };
                        publish(&config_map, &pod, &out);
                        expired = false;
                        if let Some(version) = version
                            && watch_from(&api, &name, &pod, version, &out).await
                                == WatchEnd::Expired
                        {
                            expired = true;
                            continue;
                        }
                    }
                    // No ConfigMap yet: watch for its creation rather than GET it again later.
                    // A watch without a resourceVersion starts with the object as it is, so one
                    // created since the GET is not missed.
                    None => {
                        debug!(config_map = %name, "no ConfigMap yet; watching for it");
                        if watch_from(&api, &name, &pod, String::new(), &out).await
                            == WatchEnd::Expired
                        {
                            continue;
                        }
                    }
                }
            }
            Err(kube::Error::Api(status)) => {
                answered = true;
                warn!(config_map = %name, error = %status, "cannot read the ConfigMap");
            }
            Err(error) => warn!(config_map = %name, %error, "API not reachable"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Why a watch ended, so a failing watch is not retried in a tight loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchEnd {
    /// The resourceVersion is too old (410 Gone): GET again at once.
    Expired,
    /// The watch failed or the worker is shutting down: GET again after a pause.
    Failed,
}

/// Watches the ConfigMap from `version` until the watch fails or expires (then the caller GETs
/// again); a watch that times out is resumed from the last version seen.
async fn watch_from(
    api: &Api<ConfigMap>,
    name: &str,
    pod: &str,
    mut version: String,
    out: &watch::Sender<Option<Observed>>,
) -> WatchEnd {
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    loop {
        let stream = match api.watch(&params, &version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => return WatchEnd::Expired,
            Err(error) => {
                warn!(config_map = %name, %error, "cannot watch the ConfigMap");
                return WatchEnd::Failed;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if out.is_closed() {
                return WatchEnd::Failed;
            }
            match event {
                Ok(WatchEvent::Added(config_map) | WatchEvent::Modified(config_map)) => {
                    if let Some(seen) = &config_map.metadata.resource_version {
                        version.clone_from(seen);
                    }
                    publish(&config_map, pod, out);
                }
                Ok(WatchEvent::Deleted(config_map)) => {
                    if let Some(seen) = &config_map.metadata.resource_version {
                        version.clone_from(seen);
                    }
                    // The jobs keep running: only a new version may change them.
                    warn!(config_map = %name, "ConfigMap deleted");
                }
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    version = bookmark.metadata.resource_version;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    debug!(config_map = %name, "watch expired; reading again");
                    return WatchEnd::Expired;
                }
                Ok(WatchEvent::Error(status)) => {
                    warn!(config_map = %name, error = %status, "watch failed; reading again");
                    return WatchEnd::Failed;
                }
                Err(error) => {
                    warn!(config_map = %name, %error, "watch failed; reading again");
                    return WatchEnd::Failed;
                }
            }
        }
    }
}

fn publish(config_map: &ConfigMap, pod: &str, out: &watch::Sender<Option<Observed>>) {
    if let Some(observed) = observe(config_map, pod) {
        out.send_replace(Some(observed));
    }
}

pub(crate) fn observe(config_map: &ConfigMap, pod: &str) -> Option<Observed> {
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(CONFIG_KEY));
    let Some(text) = text else {
        warn!(key = CONFIG_KEY, "the ConfigMap has no worker config");
        return None;
    };
    Observed::parse(text, pod)
        .inspect_err(|error| warn!(%error, "cannot read the ConfigMap's worker config"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "version: 3\nworkloads:\n  w-0:\n    version: 3\n    jobs:\n    - a\n    - b\n  w-1:\n    version: 1\n    jobs: []\nfuture: field\n";

    #[test]
    fn a_pod_reads_its_own_entry_and_the_config_version() {
        let observed = Observed::parse(CONFIG, "w-0").unwrap();
        assert_eq!(
            observed,
            Observed {
                version: 3,
                entry: vec!["a".into(), "b".into()],
            }
        );
    }

    #[test]
    fn a_missing_entry_means_no_jobs() {
        let observed = Observed::parse(CONFIG, "w-7").unwrap();
        assert_eq!(observed.version, 3);
        assert!(observed.entry.is_empty());
    }

    #[test]
    fn an_unreadable_config_is_an_error() {
        assert!(Observed::parse("{{{ not yaml", "w-0").is_err());
        assert!(Observed::parse("", "w-0").is_err());
    }
}
