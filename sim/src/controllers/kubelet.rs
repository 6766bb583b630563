//! The kubelet stand-in: binds pods to the one simulated node, starts them after the
//! configured delay, and ends terminating pods when their grace period runs out.
//!
//! Starting a pod means what a real kubelet does once volumes are set up and containers run:
//! it waits (in `ContainerCreating`) until every non-optional ConfigMap the pod mounts exists,
//! snapshots those ConfigMaps into [`Mounts`], and reports the pod Running. Its containers are
//! ready at once, except those with an `httpGet` readinessProbe: they start unready and follow
//! their probe (see [`prober`]). Ending a pod is the kubelet's final `DELETE` with grace 0 and
//! a uid precondition, as the real one issues after the containers stopped. A pod whose phase
//! is set to `Failed` or `Succeeded` (what a real kubelet writes when it evicts a pod) has
//! stopped: its mounts are dropped, its probes end and it is never started again, but it stays
//! in the API until someone deletes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tracing::debug;

use super::meta;
use super::prober::{self, Probes};
use super::timers::Timers;
use super::{Controller, scaled_secs};
use crate::config::SimConfig;
use crate::mounts::{MountedConfigMap, Mounts, PodMounts};
use crate::store::{DeleteOptions, EventType, Store, StoreEvent};

/// The node every pod runs on.
pub const NODE_NAME: &str = "kube-sim-node";
/// The simulated node's address (`status.hostIP`).
pub const HOST_IP: &str = "10.89.0.2";
/// Termination grace when neither the request nor the pod says otherwise.
const DEFAULT_GRACE_SECONDS: f64 = 30.0;
/// How soon a status write that failed is retried.
const WRITE_RETRY: Duration = Duration::from_millis(20);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// Set `spec.nodeName` and the Pending status of a scheduled pod.
    Bind,
    /// Mount volumes, start containers, report Running (and Ready unless a probe decides).
    Start,
    /// The grace period is over: remove the pod.
    Remove,
}

/// What the kubelet knows about one pod instance.
struct Tracked {
    namespace: String,
    name: String,
    started: bool,
    /// When the pod is removed, once it is terminating.
    remove_at: Option<Instant>,
}

/// Runs every pod of the store on one simulated node.
pub struct Kubelet {
    store: Store,
    /// Binding is the scheduler's write in a real cluster.
    scheduler: Store,
    mounts: Mounts,
    config: SimConfig,
    pods: HashMap<String, Tracked>,
    timers: Timers<(String, Action)>,
    /// Pods whose start waits for a ConfigMap to appear.
    waiting_for_config_maps: BTreeSet<String>,
    config_maps_changed: bool,
    /// The readiness probes of started pods, by uid.
    probes: HashMap<String, Probes>,
    next_ip: u32,
}

impl Kubelet {
    /// A kubelet for `store` that records started pods' ConfigMaps in `mounts`.
    pub fn new(store: &Store, mounts: Mounts, config: SimConfig) -> Self {
        Self {
            store: store.with_manager("kubelet"),
            scheduler: store.with_manager("kube-scheduler"),
            mounts,
            config,
            pods: HashMap::new(),
            timers: Timers::new(),
            waiting_for_config_maps: BTreeSet::new(),
            config_maps_changed: false,
            probes: HashMap::new(),
            next_ip: 0,
        }
    }

    fn observe_pod(&mut self, pod: &Value, now: Instant) {
        let uid = meta::uid(pod).to_string();
        if uid.is_empty() {
            return;
        }
        if meta::is_finished(pod) {
            // Failed or Succeeded (an eviction writes Failed): its containers have stopped for
            // good, so it mounts and runs nothing, though it stays until someone deletes it.
            self.waiting_for_config_maps.remove(&uid);
            self.mounts.forget(&uid);
            self.probes.remove(&uid);
            let tracked = self.pods.entry(uid).or_insert_with(|| Tracked {
                namespace: meta::namespace(pod).unwrap_or_default().to_string(),
                name: meta::name(pod).to_string(),
                started: true,
                remove_at: None,
            });
            tracked.started = true;
            return;
        }
        let tracked = self.pods.entry(uid.clone()).or_insert_with(|| {
            // A new pod instance: the scheduler binds it at once, containers start later.
            self.timers.schedule(now, (uid.clone(), Action::Bind));
            self.timers.schedule(
                now + self.config.scaled(self.config.pod_ready_delay),
                (uid.clone(), Action::Start),
            );
            Tracked {
                namespace: meta::namespace(pod).unwrap_or_default().to_string(),
                name: meta::name(pod).to_string(),
                started: false,
                remove_at: None,
            }
        });
        if meta::is_deleting(pod) {
            // A second DELETE may shorten the grace period; it never extends it.
            let remove_at = now + scaled_secs(&self.config, grace_seconds(pod));
            if tracked.remove_at.is_none_or(|at| remove_at < at) {
                tracked.remove_at = Some(remove_at);
                self.timers
                    .schedule(remove_at, (uid.clone(), Action::Remove));
            }
            self.waiting_for_config_maps.remove(&uid);
        }
    }

    fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.waiting_for_config_maps.remove(uid);
        self.mounts.forget(uid);
        self.probes.remove(uid);
    }

    /// Starts probing the readiness of a pod whose containers now run.
    fn start_probing(&mut self, uid: &str, pod: &Value) {
        if let Some(probes) = prober::start(&self.store, pod) {
            self.probes.insert(uid.to_string(), probes);
        }
    }

    /// The current state of a tracked pod instance, if it still exists with that uid.
    fn current(&self, uid: &str) -> Option<Value> {
        let tracked = self.pods.get(uid)?;
        self.store
            .get("v1", "Pod", Some(&tracked.namespace), &tracked.name)
            .filter(|pod| meta::uid(pod) == uid)
    }

    fn run(&mut self, uid: &str, action: &Action, now: Instant) {
        let Some(pod) = self.current(uid) else {
            return;
        };
        match action {
            Action::Bind => self.bind(uid, pod, now),
            Action::Start => self.start(uid, pod, now),
            Action::Remove => self.remove(uid, &pod, now),
        }
    }

    fn bind(&mut self, uid: &str, mut pod: Value, now: Instant) {
        if meta::is_deleting(&pod) || self.pods.get(uid).is_some_and(|t| t.started) {
            return;
        }
        let unbound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if unbound {
            // A binding, not an update: the pod's generation stays as its users left it.
            match self.scheduler.bind_pod(
                meta::namespace(&pod).unwrap_or_default(),
                meta::name(&pod),
                NODE_NAME,
            ) {
                Ok(bound) => pod = bound,
                Err(err) => {
                    debug!(uid, error = %err.message, "binding pod failed; retrying");
                    self.timers
                        .schedule(now + WRITE_RETRY, (uid.to_string(), Action::Bind));
                    return;
                }
            }
        }
        if meta::condition(&pod, "PodScheduled").is_some() {
            return;
        }
        let transition = meta::now_rfc3339();
        let mut status = Map::new();
        status.insert("phase".into(), json!("Pending"));
        status.insert(
            "conditions".into(),
            json!([condition("PodScheduled", &transition)]),
        );
        status.insert("qosClass".into(), json!(qos_class(&pod)));
        self.write_status(uid, pod, status, Action::Bind, now);
    }

    fn start(&mut self, uid: &str, pod: Value, now: Instant) {
        if meta::is_deleting(&pod) || self.pods.get(uid).is_none_or(|t| t.started) {
            return;
        }
        if pod.pointer("/status/startTime").is_some() {
            // Started before this kubelet tracked it; its mounts stay as recorded then.
            if let Some(tracked) = self.pods.get_mut(uid) {
                tracked.started = true;
            }
            self.start_probing(uid, &pod);
            return;
        }
        let bound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|node| !node.is_empty());
        if !bound {
            // Binding failed and is being retried; containers start once it succeeds.
            self.timers
                .schedule(now + WRITE_RETRY, (uid.to_string(), Action::Start));
            return;
        }
        let Some(config_maps) = self.read_config_maps(&pod) else {
            // Like ContainerCreating on a real node: retried when ConfigMaps change.
            self.waiting_for_config_maps.insert(uid.to_string());
            return;
        };
        self.waiting_for_config_maps.remove(uid);
        let started_at = meta::now_rfc3339();
        self.next_ip += 1;
        let pod_ip = format!("10.244.{}.{}", self.next_ip / 250, self.next_ip % 250 + 2);
        let status = running_status(&pod, &started_at, &pod_ip);
        let record = PodMounts {
            namespace: meta::namespace(&pod).unwrap_or_default().to_string(),
            pod: meta::name(&pod).to_string(),
            uid: uid.to_string(),
            started_at,
            config_maps,
        };
        if self.write_status(uid, pod.clone(), status, Action::Start, now) {
            self.mounts.record(record);
            self.start_probing(uid, &pod);
            if let Some(tracked) = self.pods.get_mut(uid) {
                tracked.started = true;
            }
        }
    }

    fn remove(&mut self, uid: &str, pod: &Value, now: Instant) {
        let due = self
            .pods
            .get(uid)
            .and_then(|t| t.remove_at)
            .is_some_and(|at| at <= now);
        if !due {
            return;
        }
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: Some(uid.to_string()),
            ..DeleteOptions::default()
        };
        if let Err(err) =
            self.store
                .delete("v1", "Pod", meta::namespace(pod), meta::name(pod), options)
        {
            debug!(uid, error = %err.message, "removing terminated pod failed");
        }
    }

    /// Writes `status` over the pod's; on failure schedules `retry`. Returns success.
    fn write_status(
        &mut self,
        uid: &str,
        mut pod: Value,
        status: Map<String, Value>,
        retry: Action,
        now: Instant,
    ) -> bool {
        pod["status"] = Value::Object(status);
        // The kubelet owns pod status: last write wins, like its status patches.
        if let Some(metadata) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("resourceVersion");
        }
        match self.store.update_status(pod) {
            Ok(_) => true,
            Err(err) => {
                debug!(uid, error = %err.message, "pod status write failed; retrying");
                self.timers
                    .schedule(now + WRITE_RETRY, (uid.to_string(), retry));
                false
            }
        }
    }

    /// The ConfigMaps the pod mounts, or `None` while a non-optional one is missing.
    fn read_config_maps(&self, pod: &Value) -> Option<BTreeMap<String, MountedConfigMap>> {
        let namespace = meta::namespace(pod);
        let mut mounted = BTreeMap::new();
        for source in config_map_sources(pod) {
            let Some(name) = source.get("name").and_then(Value::as_str) else {
                continue;
            };
            let optional = source.get("optional").and_then(Value::as_bool) == Some(true);
            let Some(config_map) = self.store.get_shared("v1", "ConfigMap", namespace, name) else {
                if optional {
                    continue;
                }
                return None;
            };
            let data = meta::string_map(config_map.get("data"));
            let data: BTreeMap<String, String> = match source.get("items").and_then(Value::as_array)
            {
                // With `items`, only the listed keys are projected into the volume.
                Some(items) => items
                    .iter()
                    .filter_map(|item| item.get("key").and_then(Value::as_str))
                    .filter_map(|key| data.get(key).map(|v| (key.to_string(), v.to_string())))
                    .collect(),
                None => data
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            let entry = mounted
                .entry(name.to_string())
                .or_insert_with(|| MountedConfigMap {
                    resource_version: config_map
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    data: BTreeMap::new(),
                });
            entry.data.extend(data);
        }
        Some(mounted)
    }
}

impl Controller for Kubelet {
    fn store(&self) -> &Store {
        &self.store
    }

    fn observe(&mut self, event: &StoreEvent) {
        let obj = &event.object;
        if meta::is(obj, "v1", "Pod") {
            match event.event_type {
                EventType::Deleted => self.forget(meta::uid(obj)),
                _ => self.observe_pod(obj, Instant::now()),
            }
        } else if meta::is(obj, "v1", "ConfigMap") {
            self.config_maps_changed = true;
        }
    }

    fn resync(&mut self) {
        let now = Instant::now();
        let pods = self.store.list_shared("v1", "Pod", None);
        let live: BTreeSet<String> = pods.iter().map(|p| meta::uid(p).to_string()).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.forget(&uid);
        }
        self.mounts.retain(|uid| live.contains(uid));
        for pod in &pods {
            self.observe_pod(pod, now);
        }
        self.config_maps_changed = true;
    }

    fn work(&mut self, now: Instant) -> Option<Instant> {
        if std::mem::take(&mut self.config_maps_changed) {
            for uid in std::mem::take(&mut self.waiting_for_config_maps) {
                self.timers.schedule(now, (uid, Action::Start));
            }
        }
        for (uid, action) in self.timers.pop_due(now) {
            self.run(&uid, &action, now);
        }
        self.timers.next()
    }
}

/// The grace period of a terminating pod: what the DELETE asked for (the API server stores it
/// as `metadata.deletionGracePeriodSeconds`), else the pod's own, else 30 s.
fn grace_seconds(pod: &Value) -> f64 {
    pod.pointer("/metadata/deletionGracePeriodSeconds")
        .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds"))
        .and_then(Value::as_f64)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
}

/// The `configMap` sources of `spec.volumes`, including those inside projected volumes.
fn config_map_sources(pod: &Value) -> Vec<&Value> {
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut sources = Vec::new();
    for volume in volumes {
        if let Some(source) = volume.get("configMap") {
            sources.push(source);
        }
        let projected = volume
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        sources.extend(projected.iter().filter_map(|s| s.get("configMap")));
    }
    sources
}

fn condition(type_: &str, transition: &str) -> Value {
    json!({"type": type_, "status": "True", "lastProbeTime": null, "lastTransitionTime": transition})
}

/// The status of a pod whose containers all run: ready, but those whose readiness a probe
/// decides, which start unready as on a real node.
fn running_status(pod: &Value, started_at: &str, pod_ip: &str) -> Map<String, Value> {
    let scheduled_at = meta::condition(pod, "PodScheduled")
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .unwrap_or(started_at);
    let containers = |field: &str| {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let container_status = |container: &Value, state: Value, ready: bool, started: bool| {
        let image = container.get("image").and_then(Value::as_str).unwrap_or("");
        json!({
            "name": container.get("name").cloned().unwrap_or(Value::Null),
            "image": image,
            "imageID": format!("{image}@sha256:{}", fake_digest()),
            "containerID": format!("containerd://{}", fake_digest()),
            "ready": ready,
            "started": started,
            "restartCount": 0,
            "state": state,
            "lastState": {},
        })
    };
    let running = json!({"running": {"startedAt": started_at}});
    let completed = json!({"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": started_at, "finishedAt": started_at
    }});

    let main: Vec<Value> = containers("containers")
        .iter()
        .map(|c| container_status(c, running.clone(), !prober::probes_readiness(c), true))
        .collect();
    let unready = prober::unready_containers(&main);
    let mut status = Map::new();
    status.insert("phase".into(), json!("Running"));
    status.insert(
        "conditions".into(),
        json!([
            condition("PodReadyToStartContainers", started_at),
            condition("Initialized", started_at),
            prober::readiness_condition("Ready", &unready, started_at),
            prober::readiness_condition("ContainersReady", &unready, started_at),
            condition("PodScheduled", scheduled_at),
        ]),
    );
    status.insert("hostIP".into(), json!(HOST_IP));
    status.insert("hostIPs".into(), json!([{"ip": HOST_IP}]));
    status.insert("podIP".into(), json!(pod_ip));
    status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    status.insert("startTime".into(), json!(started_at));
    let init: Vec<Value> = containers("initContainers")
        .iter()
        .map(|c| container_status(c, completed.clone(), false, false))
        .collect();
    if !init.is_empty() {
        status.insert("initContainerStatuses".into(), Value::Array(init));
    }
    status.insert("containerStatuses".into(), Value::Array(main));
    status.insert("qosClass".into(), json!(qos_class(pod)));
    status
}

/// The pod's QoS class from its containers' requests and limits.
fn qos_class(pod: &Value) -> &'static str {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let resources = |c: &Value, kind: &str| {
        c.pointer(&format!("/resources/{kind}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let any_set = containers
        .iter()
        .any(|c| !resources(c, "requests").is_empty() || !resources(c, "limits").is_empty());
    if !any_set {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let limits = resources(c, "limits");
        let requests = resources(c, "requests");
        ["cpu", "memory"].iter().all(|r| {
            limits
                .get(*r)
                .is_some_and(|l| requests.get(*r).is_none_or(|q| q == l))
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// 64 hex digits standing in for an image or container digest.
fn fake_digest() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_prefers_the_request_then_the_pod_then_thirty_seconds() {
        let requested = json!({"metadata": {"deletionGracePeriodSeconds": 5},
                               "spec": {"terminationGracePeriodSeconds": 10}});
        assert_eq!(grace_seconds(&requested), 5.0);
        let from_pod = json!({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 10}});
        assert_eq!(grace_seconds(&from_pod), 10.0);
        assert_eq!(grace_seconds(&json!({"metadata": {}, "spec": {}})), 30.0);
    }

    #[test]
    fn config_map_sources_include_projected_volumes() {
        let pod = json!({"spec": {"volumes": [
            {"name": "a", "configMap": {"name": "one"}},
            {"name": "b", "emptyDir": {}},
            {"name": "c", "projected": {"sources": [
                {"configMap": {"name": "two", "optional": true}},
                {"secret": {"name": "s"}}
            ]}}
        ]}});
        let names: Vec<_> = config_map_sources(&pod)
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["one", "two"]);
    }

    #[test]
    fn running_status_reports_every_readiness_condition_and_container() {
        let pod = json!({"spec": {"containers": [{"name": "w", "image": "busybox"}]}});
        let status = Value::Object(running_status(&pod, "2024-01-01T00:00:00Z", "10.244.0.3"));
        assert_eq!(status["phase"], "Running");
        for type_ in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            let found = status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True");
            assert!(found, "condition {type_} missing");
        }
        assert_eq!(status["podIP"], "10.244.0.3");
        assert_eq!(status["startTime"], "2024-01-01T00:00:00Z");
        let container = &status["containerStatuses"][0];
        assert_eq!(container["name"], "w");
        assert_eq!(container["ready"], true);
        assert_eq!(
            container["state"]["running"]["startedAt"],
            "2024-01-01T00:00:00Z"
        );
    }

    #[test]
    fn qos_class_follows_requests_and_limits() {
        let best_effort = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(qos_class(&best_effort), "BestEffort");
        let guaranteed = json!({"spec": {"containers": [{"name": "a", "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&guaranteed), "Guaranteed");
        let burstable = json!({"spec": {"containers": [{"name": "a", "resources": {
            "requests": {"cpu": "100m"}}}]}});
        assert_eq!(qos_class(&burstable), "Burstable");
    }
}
