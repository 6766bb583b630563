//! What each pod instance runs on a real cluster, derived from the API's history.
//!
//! A real cluster has no record of what a container read at start, so this follows the rule
//! the operator's handoff relies on: a pod instance runs what its ConfigMaps held when the
//! instance was created. Two watches (pods and ConfigMaps of one namespace) keep every
//! ConfigMap version and every instance's creation, ordered by resourceVersion (etcd's
//! revision, which totally orders writes). An instance is live from its creation until the
//! API reports it gone; a terminating pod is live. The answer has the shape of kube-sim's
//! `/kube-sim/v1/mounts`, so the duplicate watch reads both alike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use swarm_operator::controller::relisting_watch::relisting_watcher;

use super::sim_inspect::{MountedConfigMap, PodMounts};
use super::worker_config::WorkerConfig;

/// Data of one ConfigMap version; `None` once deleted.
type Version = Option<BTreeMap<String, String>>;

#[derive(Default)]
struct Ledger {
    /// ConfigMap name -> its versions by resourceVersion.
    config_maps: BTreeMap<String, BTreeMap<u64, Version>>,
    /// Pod uid -> the instance.
    pods: BTreeMap<String, Instance>,
    /// Uids listed since the pod watch last (re)started its list.
    relisted: Option<BTreeSet<String>>,
    /// ConfigMap name -> its `config.yml` by resourceVersion, parsed once.
    parsed: BTreeMap<String, BTreeMap<u64, Option<WorkerConfig>>>,
    /// The watches that failed and have not listed again since: until they have, the ledger
    /// may miss a pod's end or a ConfigMap version (the API server restarted, say).
    failing: BTreeSet<&'static str>,
}

struct Instance {
    name: String,
    /// The resourceVersion of the first state seen: its creation, as the watch starts
    /// before any worker pod exists.
    created: u64,
    /// ConfigMaps it mounts as volumes.
    volumes: Vec<String>,
    live: bool,
    /// What it mounted, once known.
    mounted: Option<BTreeMap<String, MountedConfigMap>>,
}

/// The background watches of one namespace; stop when dropped.
#[derive(Clone)]
pub struct DerivedMounts {
    ledger: Arc<Mutex<Ledger>>,
    config_maps: Api<ConfigMap>,
    namespace: String,
    _tasks: Arc<Tasks>,
}

struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl DerivedMounts {
    /// Starts watching pods and ConfigMaps in `namespace`.
    pub fn start(client: kube::Client, namespace: &str) -> DerivedMounts {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
        let pod_task = spawn_watch("pods", pods, ledger.clone(), Ledger::pod_event);
        let config_map_task = spawn_watch(
            "configmaps",
            config_maps.clone(),
            ledger.clone(),
            Ledger::config_map_event,
        );
        DerivedMounts {
            ledger,
            config_maps,
            namespace: namespace.to_string(),
            _tasks: Arc::new(Tasks(vec![pod_task, config_map_task])),
        }
    }

    /// Every live pod instance whose mounts are known, with what it mounted. An instance
    /// created after the last ConfigMap version the watch has delivered is resolved with a
    /// read of the ConfigMap; one that cannot be resolved yet is left for the next call.
    pub async fn try_mounts(&self) -> Result<Vec<PodMounts>, String> {
        let pending = {
            let ledger = self.ledger.lock().expect("ledger");
            if !ledger.failing.is_empty() {
                return Err(format!("the {:?} watches are catching up", ledger.failing));
            }
            ledger.unresolved()
        };
        let mut latest = BTreeMap::new();
        for (_, names) in &pending {
            for name in names {
                if !latest.contains_key(name) {
                    let current = self
                        .config_maps
                        .get_opt(name)
                        .await
                        .map_err(|e| format!("GET configmap {name}: {e}"))?;
                    latest.insert(name.clone(), current.map(|cm| (rv(&cm.metadata), cm.data)));
                }
            }
        }
        let mut ledger = self.ledger.lock().expect("ledger");
        for (uid, _) in pending {
            ledger.resolve(&uid, &latest);
        }
        Ok(ledger.live_mounts(&self.namespace))
    }

    /// What the instances `uids` mounted, waiting (a few seconds at most) for the watches to
    /// see them and for their mounts to be resolved; instances never seen are left out.
    pub async fn mounts_of(&self, uids: &[String]) -> Vec<PodMounts> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let mounts = self.try_mounts().await.unwrap_or_default();
            let all_known = uids.iter().all(|uid| mounts.iter().any(|m| &m.uid == uid));
            if all_known || tokio::time::Instant::now() >= deadline {
                return mounts;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// One live pod instance and every job its own entry listed while it lived.
#[derive(Clone, Debug)]
pub struct EverListed {
    pub pod: String,
    pub uid: String,
    pub jobs: BTreeSet<String>,
}

impl DerivedMounts {
    /// For every live instance that mounts `config_map`: the union of its entry's jobs over the
    /// version it mounted and every version written since its creation, as the watch has
    /// delivered them. A worker that waits for its entry and reads the file as the kubelet
    /// refreshes it may run any of these, so a job listed for two live instances is one two
    /// workers may run at once.
    pub fn ever_listed(&self, config_map: &str) -> Vec<EverListed> {
        self.ledger.lock().expect("ledger").ever_listed(config_map)
    }
}

/// `config.yml` of one ConfigMap version, parsed once (`None`: absent or unreadable).
fn parse_version(data: &Version) -> Option<WorkerConfig> {
    WorkerConfig::parse(data.as_ref()?.get("config.yml")?).ok()
}

impl Ledger {
    fn ever_listed(&mut self, config_map: &str) -> Vec<EverListed> {
        let Some(history) = self.config_maps.get(config_map) else {
            return Vec::new();
        };
        let parsed = self.parsed.entry(config_map.to_owned()).or_default();
        for (rv, data) in history.range(parsed.keys().next_back().map_or(0, |rv| rv + 1)..) {
            parsed.insert(*rv, parse_version(data));
        }
        let parsed: BTreeMap<u64, &WorkerConfig> = parsed
            .iter()
            .filter_map(|(rv, config)| Some((*rv, config.as_ref()?)))
            .collect();
        self.pods
            .iter()
            .filter(|(_, i)| i.live && i.volumes.iter().any(|v| v == config_map))
            .map(|(uid, i)| {
                let from = parsed
                    .range(..i.created)
                    .next_back()
                    .map_or(i.created, |(rv, _)| *rv);
                let jobs = parsed
                    .range(from..)
                    .filter_map(|(_, config)| config.workload(&i.name))
                    .flat_map(|w| w.jobs.iter().cloned())
                    .collect();
                EverListed {
                    pod: i.name.clone(),
                    uid: uid.clone(),
                    jobs,
                }
            })
            .collect()
    }

    fn pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Init => self.relisted = Some(BTreeSet::new()),
            Event::InitApply(pod) => {
                if let Some(uid) = pod.metadata.uid.clone() {
                    self.relisted.get_or_insert_default().insert(uid);
                }
                self.seen(&pod);
            }
            Event::InitDone => {
                // Pods missing from a re-list are gone.
                let listed = self.relisted.take().unwrap_or_default();
                for (uid, instance) in &mut self.pods {
                    if !listed.contains(uid) {
                        instance.live = false;
                    }
                }
            }
            Event::Apply(pod) => self.seen(&pod),
            Event::Delete(pod) => {
                if let Some(instance) = pod.metadata.uid.as_ref().and_then(|u| self.pods.get_mut(u))
                {
                    instance.live = false;
                }
            }
        }
    }

    fn seen(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Failed" | "Succeeded")) {
            // Evicted or completed: its containers have stopped for good.
            if let Some(instance) = self.pods.get_mut(&uid) {
                instance.live = false;
            }
            return;
        }
        self.pods.entry(uid).or_insert_with(|| Instance {
            name: pod.metadata.name.clone().unwrap_or_default(),
            created: rv(&pod.metadata),
            volumes: pod
                .spec
                .iter()
                .flat_map(|spec| spec.volumes.iter().flatten())
                .filter_map(|v| v.config_map.as_ref().map(|cm| cm.name.clone()))
                .collect(),
            live: true,
            mounted: None,
        });
    }

    fn config_map_event(&mut self, event: Event<ConfigMap>) {
        match event {
            Event::Apply(cm) | Event::InitApply(cm) => {
                let name = cm.metadata.name.clone().unwrap_or_default();
                self.config_maps
                    .entry(name)
                    .or_default()
                    .insert(rv(&cm.metadata), Some(cm.data.unwrap_or_default()));
            }
            Event::Delete(cm) => {
                let name = cm.metadata.name.clone().unwrap_or_default();
                self.config_maps
                    .entry(name)
                    .or_default()
                    .insert(rv(&cm.metadata), None);
            }
            Event::Init | Event::InitDone => {}
        }
    }

    /// Live instances whose mounts are not known yet, with the ConfigMaps they mount.
    fn unresolved(&self) -> Vec<(String, Vec<String>)> {
        self.pods
            .iter()
            .filter(|(_, i)| i.live && i.mounted.is_none())
            .map(|(uid, i)| (uid.clone(), i.volumes.clone()))
            .collect()
    }

    /// Resolves what instance `uid` mounted, given each ConfigMap's state as just read
    /// (`latest`: resourceVersion and data, `None` if it does not exist).
    fn resolve(&mut self, uid: &str, latest: &BTreeMap<String, Option<(u64, Version)>>) {
        let Some(instance) = self.pods.get(uid) else {
            return;
        };
        let mut mounted = BTreeMap::new();
        for name in &instance.volumes {
            let history = self.config_maps.get(name);
            let before_creation = || history.and_then(|h| h.range(..instance.created).next_back());
            let watched_past_creation = history
                .and_then(|h| h.keys().next_back())
                .is_some_and(|&last| last > instance.created);
            let version = if watched_past_creation {
                // The watch delivers in resourceVersion order: every earlier version is here.
                before_creation()
            } else {
                match latest.get(name) {
                    // Not changed since before the creation: the current state is it.
                    Some(Some((version, data))) if *version < instance.created => {
                        Some((version, data))
                    }
                    // Absent now, and no version after the creation delivered.
                    Some(None) => before_creation(),
                    // Changed after the creation, not yet delivered; or not read.
                    _ => return,
                }
            };
            if let Some((version, Some(data))) = version {
                mounted.insert(
                    name.clone(),
                    MountedConfigMap {
                        resource_version: version.to_string(),
                        data: data.clone(),
                    },
                );
            }
        }
        if let Some(instance) = self.pods.get_mut(uid) {
            instance.mounted = Some(mounted);
        }
    }

    fn live_mounts(&self, namespace: &str) -> Vec<PodMounts> {
        self.pods
            .iter()
            .filter(|(_, i)| i.live)
            .filter_map(|(uid, i)| {
                Some(PodMounts {
                    namespace: namespace.to_string(),
                    pod: i.name.clone(),
                    uid: uid.clone(),
                    config_maps: i.mounted.clone()?,
                })
            })
            .collect()
    }
}

/// Feeds every event of a watch on `api` to `record` on the ledger, until aborted.
/// Feeds the events of a watch of `api` into the ledger. After a failure the watch lists
/// again (as the operator's do); until it has, the ledger says it is catching up.
fn spawn_watch<K>(
    name: &'static str,
    api: Api<K>,
    ledger: Arc<Mutex<Ledger>>,
    record: fn(&mut Ledger, Event<K>),
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut events = relisting_watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let mut ledger = ledger.lock().expect("ledger");
            match event {
                Ok(event) => {
                    if matches!(event, Event::InitDone) {
                        ledger.failing.remove(name);
                    }
                    record(&mut ledger, event);
                }
                Err(_) => {
                    ledger.failing.insert(name);
                }
            }
        }
    })
}

/// A resourceVersion as a number (etcd's revision); 0 if it is not one.
fn rv(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger_with(versions: &[(u64, &str)]) -> Ledger {
        let mut ledger = Ledger::default();
        for (rv, text) in versions {
            ledger.config_maps.entry("cm".into()).or_default().insert(
                *rv,
                Some([("config.yml".to_string(), text.to_string())].into()),
            );
        }
        ledger
    }

    fn add_pod(ledger: &mut Ledger, uid: &str, created: u64) {
        ledger.pods.insert(
            uid.into(),
            Instance {
                name: format!("pod-{uid}"),
                created,
                volumes: vec!["cm".into()],
                live: true,
                mounted: None,
            },
        );
    }

    fn mounted_text(ledger: &Ledger, uid: &str) -> Option<Option<String>> {
        let mounted = ledger.pods[uid].mounted.as_ref()?;
        Some(mounted.get("cm").map(|m| m.data["config.yml"].clone()))
    }

    #[test]
    fn a_waiting_worker_may_run_every_job_its_entry_listed_since_it_mounted() {
        let entry = |jobs: &str| {
            format!("version: 1\nworkloads:\n  pod-a:\n    version: 1\n    jobs: [{jobs}]\n")
        };
        let mut ledger = ledger_with(&[
            (10, &entry("x")),
            (20, &entry("")),
            (30, &entry("y")),
            (40, "version: 2\nworkloads: {}\n"),
        ]);
        add_pod(&mut ledger, "a", 25);
        let listed = ledger.ever_listed("cm");
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].jobs,
            BTreeSet::from(["y".to_string()]),
            "it mounted version 20 (no jobs), then saw y; x was gone before it existed"
        );
        ledger.pods.get_mut("a").unwrap().created = 15;
        assert_eq!(
            ledger.ever_listed("cm")[0].jobs,
            BTreeSet::from(["x".to_string(), "y".to_string()])
        );
        ledger.pods.get_mut("a").unwrap().live = false;
        assert!(
            ledger.ever_listed("cm").is_empty(),
            "a gone instance runs nothing"
        );
    }

    #[test]
    fn an_instance_mounts_the_last_version_before_its_creation() {
        let mut ledger = ledger_with(&[(10, "v1"), (20, "v2"), (30, "v3")]);
        add_pod(&mut ledger, "a", 25);
        add_pod(&mut ledger, "b", 5);
        ledger.resolve("a", &BTreeMap::new());
        ledger.resolve("b", &BTreeMap::new());
        assert_eq!(mounted_text(&ledger, "a"), Some(Some("v2".into())));
        assert_eq!(
            mounted_text(&ledger, "b"),
            Some(None),
            "created before the ConfigMap existed: it mounted nothing"
        );
    }

    #[test]
    fn an_instance_newer_than_the_history_waits_unless_the_read_proves_no_change() {
        let mut ledger = ledger_with(&[(10, "v1")]);
        add_pod(&mut ledger, "a", 25);
        let changed_since: BTreeMap<_, _> =
            [("cm".to_string(), Some((40, Some(BTreeMap::new()))))].into();
        ledger.resolve("a", &changed_since);
        assert_eq!(
            mounted_text(&ledger, "a"),
            None,
            "a version after the creation is not delivered yet: unknown what came between"
        );
        let unchanged: BTreeMap<_, _> = [(
            "cm".to_string(),
            Some((
                10,
                Some([("config.yml".to_string(), "v1".to_string())].into()),
            )),
        )]
        .into();
        ledger.resolve("a", &unchanged);
        assert_eq!(mounted_text(&ledger, "a"), Some(Some("v1".into())));
    }

    #[test]
    fn a_deleted_or_relisted_away_pod_is_no_longer_live() {
        let mut ledger = ledger_with(&[(10, "v1"), (30, "v2")]);
        add_pod(&mut ledger, "a", 25);
        add_pod(&mut ledger, "b", 26);
        ledger.resolve("a", &BTreeMap::new());
        ledger.resolve("b", &BTreeMap::new());
        assert_eq!(ledger.live_mounts("ns").len(), 2);
        ledger.pod_event(Event::Init);
        let mut kept = Pod::default();
        kept.metadata.uid = Some("b".into());
        kept.metadata.resource_version = Some("26".into());
        ledger.pod_event(Event::InitApply(kept));
        ledger.pod_event(Event::InitDone);
        let live: Vec<String> = ledger
            .live_mounts("ns")
            .into_iter()
            .map(|m| m.uid)
            .collect();
        assert_eq!(live, ["b"]);
    }

    #[test]
    fn an_evicted_pod_is_no_longer_live() {
        let mut ledger = ledger_with(&[(10, "v1"), (30, "v2")]);
        add_pod(&mut ledger, "a", 25);
        ledger.resolve("a", &BTreeMap::new());
        assert_eq!(ledger.live_mounts("ns").len(), 1);
        let mut evicted = Pod::default();
        evicted.metadata.uid = Some("a".into());
        evicted.metadata.resource_version = Some("40".into());
        evicted.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        ledger.pod_event(Event::Apply(evicted));
        assert!(
            ledger.live_mounts("ns").is_empty(),
            "its containers stopped"
        );
    }
}
