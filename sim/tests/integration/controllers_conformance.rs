//! Conformance of the controllers running inside the simulation (cases 20-23 of the sim
//! spec, plus Background/Orphan garbage collection, Parallel pod management and the mounts
//! endpoint). Every check goes through the HTTP API as a client would.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube_sim::{Sim, SimConfig};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Generous upper bound for anything to happen; never a performance goal.
const PATIENCE: Duration = Duration::from_secs(20);

struct Harness {
    sim: Sim,
    http: Client,
}

impl Harness {
    /// A simulation where a 30 s grace period takes 0.3 s and pods start after `ready_delay`
    /// simulated seconds.
    async fn start(time_scale: f64, ready_delay: Duration) -> Self {
        let config = SimConfig {
            time_scale,
            pod_ready_delay: ready_delay,
            ..SimConfig::default()
        };
        let sim = Sim::start(config).await.expect("simulation starts");
        Self {
            sim,
            http: Client::new(),
        }
    }

    async fn fast() -> Self {
        Self::start(0.01, Duration::from_secs(1)).await
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.request_as(method, path, body, "application/json")
            .await
    }

    async fn request_as(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        content_type: &str,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.sim.url()))
            .header("Accept", "application/json");
        if let Some(body) = body {
            req = req
                .header("Content-Type", content_type)
                .body(body.to_string());
        }
        let resp = req.send().await.expect("request is answered");
        let status = resp.status();
        let text = resp.text().await.expect("body is readable");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let (status, body) = self.request(Method::GET, path, None).await;
        match status {
            StatusCode::OK => Some(body),
            StatusCode::NOT_FOUND => None,
            other => panic!("GET {path}: unexpected {other}: {body}"),
        }
    }

    async fn create(&self, path: &str, obj: Value) -> Value {
        let (status, body) = self.request(Method::POST, path, Some(obj)).await;
        assert_eq!(status, StatusCode::CREATED, "POST {path}: {body}");
        body
    }

    async fn delete(&self, path: &str, options: Value) -> Value {
        let (status, body) = self.request(Method::DELETE, path, Some(options)).await;
        assert!(
            status == StatusCode::OK || status == StatusCode::ACCEPTED,
            "DELETE {path}: {status} {body}"
        );
        body
    }

    async fn pod(&self, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await
    }

    async fn pods(&self) -> Vec<Value> {
        let list = self
            .get("/api/v1/namespaces/default/pods")
            .await
            .expect("pods are listable");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    async fn statefulset(&self, name: &str) -> Option<Value> {
        self.get(&format!(
            "/apis/apps/v1/namespaces/default/statefulsets/{name}"
        ))
        .await
    }

    async fn mounts(&self) -> Vec<Value> {
        let body = self
            .get("/kube-sim/v1/mounts")
            .await
            .expect("mounts endpoint is served");
        body.as_array().cloned().expect("mounts is a JSON list")
    }

    /// Polls `check` until it returns `Some`, panicking with `what` after [`PATIENCE`].
    async fn eventually<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts a watch on `path` from `resource_version`, collecting every event.
    async fn watch(&self, path: &str, resource_version: &str) -> Watch {
        let url = format!(
            "{}{path}?watch=true&resourceVersion={resource_version}",
            self.sim.url()
        );
        let resp = self.http.get(url).send().await.expect("watch starts");
        assert_eq!(resp.status(), StatusCode::OK);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut stream = resp.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                        sink.lock().unwrap().push(event);
                    }
                }
            }
        });
        Watch { events, task }
    }

    async fn list_resource_version(&self, path: &str) -> String {
        let list = self.get(path).await.expect("list is served");
        list["metadata"]["resourceVersion"]
            .as_str()
            .expect("a list has a resourceVersion")
            .to_string()
    }
}

struct Watch {
    events: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn statefulset(name: &str, replicas: u32, policy: Option<&str>) -> Value {
    let mut sts = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}]}
            }
        }
    });
    if let Some(policy) = policy {
        sts["spec"]["podManagementPolicy"] = json!(policy);
    }
    sts
}

const STS_PATH: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const PODS_PATH: &str = "/api/v1/namespaces/default/pods";

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn uid_of(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn is_terminating(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// Position of the first event matching `predicate`.
fn first(events: &[Value], predicate: impl Fn(&str, &Value) -> bool) -> Option<usize> {
    events
        .iter()
        .position(|e| predicate(e["type"].as_str().unwrap_or_default(), &e["object"]))
}

async fn wait_all_ready(h: &Harness, set: &str, replicas: usize) {
    h.eventually(
        &format!("{set} to have {replicas} ready replicas"),
        || async {
            let sts = h.statefulset(set).await?;
            (sts["status"]["readyReplicas"] == json!(replicas)
                && sts["status"]["availableReplicas"] == json!(replicas)
                && sts["status"]["replicas"] == json!(replicas))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn ordered_ready_creates_each_pod_after_its_predecessor_is_ready_with_identity_labels_and_owner()
 {
    let h = Harness::fast().await;
    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let sts = h.statefulset("web").await.expect("set exists");
    let status = &sts["status"];
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["availableReplicas"], 3);
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(status["updatedReplicas"], 3);
    assert_eq!(status["observedGeneration"], sts["metadata"]["generation"]);
    assert_eq!(status["currentRevision"], status["updateRevision"]);
    let revision = status["updateRevision"]
        .as_str()
        .expect("updateRevision set");
    assert!(revision.starts_with("web-"), "{revision}");

    // Wait until the watch has seen every pod become ready, then check the order.
    h.eventually("the watch to see web-2 ready", || async {
        watch
            .events()
            .iter()
            .any(|e| name_of(&e["object"]) == "web-2" && is_ready(&e["object"]))
            .then_some(())
    })
    .await;
    let events = watch.events();
    for (before, after) in [("web-0", "web-1"), ("web-1", "web-2")] {
        let ready = first(&events, |_, o| name_of(o) == before && is_ready(o))
            .unwrap_or_else(|| panic!("{before} never became ready"));
        let created = first(&events, |t, o| t == "ADDED" && name_of(o) == after)
            .unwrap_or_else(|| panic!("{after} was never created"));
        assert!(
            ready < created,
            "{after} was created (event {created}) before {before} was ready (event {ready})"
        );
    }

    for ordinal in 0..3 {
        let name = format!("web-{ordinal}");
        let pod = h.pod(&name).await.expect("pod exists");
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], json!(name));
        assert_eq!(
            labels["apps.kubernetes.io/pod-index"],
            json!(ordinal.to_string())
        );
        assert_eq!(labels["controller-revision-hash"], json!(revision));
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                    "uid": uid_of(&sts), "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(pod["spec"]["hostname"], json!(name));
        assert_eq!(pod["spec"]["subdomain"], "web");
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
        );
        assert!(
            pod["status"]["podIP"]
                .as_str()
                .is_some_and(|ip| !ip.is_empty())
        );
        assert!(pod["status"]["startTime"].is_string());
        for condition in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            let ok = pod["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == condition && c["status"] == "True");
            assert!(ok, "{name} lacks condition {condition}=True");
        }
        let container = &pod["status"]["containerStatuses"][0];
        assert_eq!(container["name"], "worker");
        assert_eq!(container["ready"], true);
        assert!(container["state"]["running"]["startedAt"].is_string());
    }

    // Like kube-controller-manager, the controller records an event per pod it creates.
    let events = h
        .get("/api/v1/namespaces/default/events")
        .await
        .expect("events are listable");
    let mut created: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "SuccessfulCreate"
                && e["involvedObject"]["uid"] == sts["metadata"]["uid"]
        })
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    created.sort_unstable();
    assert_eq!(
        created,
        [
            "create Pod web-0 in StatefulSet web successful",
            "create Pod web-1 in StatefulSet web successful",
            "create Pod web-2 in StatefulSet web successful"
        ]
    );
    drop(watch);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn ordered_ready_waits_for_an_unready_pod_before_creating_the_next() {
    // Unscaled time and a long start delay: web-0 stays unready for the whole test.
    let h = Harness::start(1.0, Duration::from_secs(3600)).await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    h.eventually("web-0 to be created and bound", || async {
        let pod = h.pod("web-0").await?;
        pod["spec"]["nodeName"].is_string().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names: Vec<String> = h
        .pods()
        .await
        .iter()
        .map(|p| name_of(p).to_string())
        .collect();
    assert_eq!(
        names,
        ["web-0"],
        "only web-0 may exist while it is not ready"
    );
    let pod = h.pod("web-0").await.unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    let sts = h.statefulset("web").await.unwrap();
    assert_eq!(sts["status"]["replicas"], 1);
    assert_eq!(sts["status"]["availableReplicas"], 0);
    assert!(
        sts["status"].get("readyReplicas").is_none(),
        "zero readyReplicas is omitted"
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn parallel_policy_creates_every_pod_without_waiting_for_readiness() {
    let h = Harness::start(1.0, Duration::from_secs(3600)).await;
    h.create(STS_PATH, statefulset("par", 3, Some("Parallel")))
        .await;
    let names = h
        .eventually("three pods", || async {
            let names: Vec<String> = h
                .pods()
                .await
                .iter()
                .map(|p| name_of(p).to_string())
                .collect();
            (names.len() == 3).then_some(names)
        })
        .await;
    assert_eq!(names, ["par-0", "par-1", "par-2"]);
    assert!(h.pods().await.iter().all(|p| !is_ready(p)));
    h.sim.shutdown().await;
}

#[tokio::test]
async fn scale_down_removes_the_highest_ordinal_first_and_a_deleted_pod_returns_with_a_new_uid() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    let (status, scale) = h
        .request_as(
            Method::PATCH,
            &format!("{STS_PATH}/web/scale"),
            Some(json!({"spec": {"replicas": 1}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{scale}");
    assert_eq!(scale["spec"]["replicas"], 1);
    h.eventually("web-1 and web-2 to be gone", || async {
        let names: Vec<String> = h
            .pods()
            .await
            .iter()
            .map(|p| name_of(p).to_string())
            .collect();
        (names == ["web-0"]).then_some(())
    })
    .await;
    wait_all_ready(&h, "web", 1).await;
    let events = watch.events();
    let terminating = |name: &'static str| {
        first(&events, move |t, o| {
            t == "MODIFIED" && name_of(o) == name && is_terminating(o)
        })
        .unwrap_or_else(|| panic!("{name} was never marked for deletion"))
    };
    let gone = |name: &'static str| {
        first(&events, move |t, o| t == "DELETED" && name_of(o) == name)
            .unwrap_or_else(|| panic!("{name} was never removed"))
    };
    assert!(
        terminating("web-2") < terminating("web-1"),
        "web-2 must go first"
    );
    assert!(
        gone("web-2") < terminating("web-1"),
        "OrderedReady removes web-1 only once web-2 is gone"
    );
    drop(watch);

    let old = h.pod("web-0").await.unwrap();
    let old_uid = uid_of(&old).to_string();
    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    h.delete(&format!("{PODS_PATH}/web-0"), json!({})).await;
    let new = h
        .eventually("web-0 to come back with a new uid and be ready", || async {
            let pod = h.pod("web-0").await?;
            (uid_of(&pod) != old_uid && is_ready(&pod)).then_some(pod)
        })
        .await;
    assert_ne!(uid_of(&new), old_uid);
    let events = watch.events();
    let old_gone = first(&events, |t, o| t == "DELETED" && uid_of(o) == old_uid)
        .expect("the old web-0 is removed");
    let new_added = first(&events, |t, o| t == "ADDED" && name_of(o) == "web-0")
        .expect("a new web-0 is created");
    assert!(
        old_gone < new_added,
        "the new web-0 appears only once the old one is fully gone"
    );
    drop(watch);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn pod_delete_sets_deletion_timestamp_from_the_grace_period_and_removes_the_pod_when_it_ends()
{
    let h = Harness::fast().await;
    for (name, grace) in [("default-grace", None), ("short-grace", Some(5))] {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        });
        if let Some(grace) = grace {
            pod["spec"]["terminationGracePeriodSeconds"] = json!(grace);
        }
        h.create(PODS_PATH, pod).await;
    }
    for name in ["default-grace", "short-grace"] {
        h.eventually("pod to run", || async {
            is_ready(&h.pod(name).await?).then_some(())
        })
        .await;
    }

    // The request's grace period wins over the pod's; without one the pod's (30 s) applies.
    let cases = [
        ("default-grace", json!({}), 30),
        ("short-grace", json!({"gracePeriodSeconds": 20}), 20),
    ];
    for (name, options, grace) in cases {
        let rv = h.list_resource_version(PODS_PATH).await;
        let watch = h.watch(PODS_PATH, &rv).await;
        let requested = chrono::Utc::now();
        let asked = Instant::now();
        let deleted = h.delete(&format!("{PODS_PATH}/{name}"), options).await;
        let stamp = deleted["metadata"]["deletionTimestamp"]
            .as_str()
            .expect("the DELETE answer carries deletionTimestamp");
        let stamp = chrono::DateTime::parse_from_rfc3339(stamp).unwrap();
        let offset = (stamp.with_timezone(&chrono::Utc) - requested).num_seconds();
        assert!(
            (grace - 2..=grace + 1).contains(&offset),
            "{name}: deletionTimestamp is {offset}s after the request, expected about {grace}s"
        );
        assert_eq!(
            deleted["metadata"]["deletionGracePeriodSeconds"],
            json!(grace)
        );

        h.eventually("pod to be gone", || async {
            h.pod(name).await.is_none().then_some(())
        })
        .await;
        let took = asked.elapsed();
        // Scaled grace is grace * 0.01 s: the pod may not vanish earlier than that.
        let scaled = Duration::from_millis(grace as u64 * 10);
        assert!(
            took >= scaled,
            "{name} was removed after {took:?}, before its grace {scaled:?}"
        );
        let events = watch.events();
        let marked = first(&events, |t, o| {
            t == "MODIFIED" && name_of(o) == name && is_terminating(o)
        })
        .expect("the pod stays, marked for deletion");
        let removed = first(&events, |t, o| t == "DELETED" && name_of(o) == name)
            .expect("the pod is removed when its grace ends");
        assert!(marked < removed);
    }
    h.sim.shutdown().await;
}

#[tokio::test]
async fn foreground_delete_of_a_statefulset_removes_its_pods_before_the_set() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;

    let deleted = h
        .delete(
            &format!("{STS_PATH}/web"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}),
        )
        .await;
    assert!(is_terminating(&deleted));
    assert!(
        deleted["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("foregroundDeletion")))
    );
    // The pods need their 0.3 s grace: the set must still be there, waiting for them.
    let waiting = h
        .statefulset("web")
        .await
        .expect("the set waits for its pods");
    assert!(is_terminating(&waiting));

    let pods_seen_while_set_existed = Cell::new(0);
    h.eventually("the set to be gone", || async {
        let pods = h.pods().await.len();
        match h.statefulset("web").await {
            Some(_) => {
                pods_seen_while_set_existed.set(pods_seen_while_set_existed.get().max(pods));
                None
            }
            None => Some(()),
        }
    })
    .await;
    assert!(
        pods_seen_while_set_existed.get() > 0,
        "pods existed while the set was being deleted"
    );
    assert!(h.pods().await.is_empty(), "every pod went before the set");
    h.sim.shutdown().await;
}

#[tokio::test]
async fn background_delete_of_a_statefulset_removes_the_set_at_once_and_its_pods_after() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 2, None)).await;
    wait_all_ready(&h, "web", 2).await;
    h.delete(
        &format!("{STS_PATH}/web"),
        json!({"propagationPolicy": "Background"}),
    )
    .await;
    assert!(h.statefulset("web").await.is_none(), "the set goes at once");
    h.eventually("its pods to be collected", || async {
        h.pods().await.is_empty().then_some(())
    })
    .await;
    h.sim.shutdown().await;
}

#[tokio::test]
async fn orphan_delete_of_a_statefulset_keeps_its_pods_without_owner_references() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 2, None)).await;
    wait_all_ready(&h, "web", 2).await;
    let uids: Vec<String> = h
        .pods()
        .await
        .iter()
        .map(|p| uid_of(p).to_string())
        .collect();
    h.delete(
        &format!("{STS_PATH}/web"),
        json!({"propagationPolicy": "Orphan"}),
    )
    .await;
    h.eventually("the set to be gone", || async {
        h.statefulset("web").await.is_none().then_some(())
    })
    .await;
    // Give the collector time to act wrongly before checking that it did not.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pods = h.pods().await;
    let kept: Vec<String> = pods.iter().map(|p| uid_of(p).to_string()).collect();
    assert_eq!(kept, uids, "the same pod instances remain");
    for pod in &pods {
        let refs = &pod["metadata"]["ownerReferences"];
        // Like the API server, no empty list: clients index it as absent.
        assert!(
            refs.is_null(),
            "{} still has owner references: {refs}",
            name_of(pod)
        );
        assert!(!is_terminating(pod));
    }
    h.sim.shutdown().await;
}

#[tokio::test]
async fn dependent_of_a_deleted_config_map_is_collected_but_one_with_a_live_owner_stays() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let owner = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "owner", "namespace": "default"}}),
        )
        .await;
    let other = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "other", "namespace": "default"}}),
        )
        .await;
    let reference = |o: &Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name_of(o), "uid": uid_of(o)});
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "only-child", "namespace": "default",
                     "ownerReferences": [reference(&owner)]}}),
    )
    .await;
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared-child", "namespace": "default",
                     "ownerReferences": [reference(&owner), reference(&other)]}}),
    )
    .await;
    h.delete(&format!("{cm_path}/owner"), json!({})).await;
    h.eventually("only-child to be collected", || async {
        h.get(&format!("{cm_path}/only-child"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let shared = h
        .eventually("shared-child to drop the dangling reference", || async {
            let obj = h.get(&format!("{cm_path}/shared-child")).await?;
            (obj["metadata"]["ownerReferences"].as_array()?.len() == 1).then_some(obj)
        })
        .await;
    assert_eq!(
        shared["metadata"]["ownerReferences"][0]["uid"],
        json!(uid_of(&other))
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn mounts_record_each_pod_instance_config_map_content_as_of_its_start() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let cm = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "jobs", "namespace": "default"},
            "data": {"config.yml": "version: 1"}}),
        )
        .await;
    let mut sts = statefulset("web", 2, None);
    sts["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "jobs", "configMap": {"name": "jobs"}},
        {"name": "extra", "configMap": {"name": "missing-but-optional", "optional": true}}
    ]);
    h.create(STS_PATH, sts).await;
    wait_all_ready(&h, "web", 2).await;

    let mounts = h.mounts().await;
    let pods = h.pods().await;
    assert_eq!(mounts.len(), 2, "one entry per live pod: {mounts:#?}");
    for (entry, pod) in mounts.iter().zip(&pods) {
        assert_eq!(entry["namespace"], "default");
        assert_eq!(entry["pod"], pod["metadata"]["name"]);
        assert_eq!(entry["uid"], pod["metadata"]["uid"]);
        assert_eq!(entry["startedAt"], pod["status"]["startTime"]);
        assert_eq!(
            entry["configMaps"],
            json!({"jobs": {"resourceVersion": cm["metadata"]["resourceVersion"],
                            "data": {"config.yml": "version: 1"}}}),
            "the optional missing ConfigMap is absent"
        );
    }

    // A running pod keeps what it mounted; a re-created one mounts the new content.
    let (status, updated) = h
        .request_as(
            Method::PATCH,
            &format!("{cm_path}/jobs"),
            Some(json!({"data": {"config.yml": "version: 2"}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let old_uid = uid_of(&h.pod("web-1").await.unwrap()).to_string();
    h.delete(&format!("{PODS_PATH}/web-1"), json!({})).await;
    let fresh = h
        .eventually("web-1 re-created and started", || async {
            let mounts = h.mounts().await;
            let web1: Vec<&Value> = mounts.iter().filter(|m| m["pod"] == "web-1").collect();
            (web1.len() == 1 && web1[0]["uid"] != json!(old_uid)).then(|| mounts.clone())
        })
        .await;
    let by_pod: BTreeMap<String, &Value> = fresh
        .iter()
        .map(|m| (m["pod"].as_str().unwrap().to_string(), m))
        .collect();
    assert_eq!(
        by_pod["web-0"]["configMaps"]["jobs"]["data"]["config.yml"],
        "version: 1"
    );
    assert_eq!(
        by_pod["web-1"]["configMaps"]["jobs"]["data"]["config.yml"],
        "version: 2"
    );
    assert_eq!(
        by_pod["web-1"]["configMaps"]["jobs"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    assert!(
        fresh.iter().all(|m| m["uid"] != json!(old_uid)),
        "the gone instance is dropped"
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn pod_waits_in_pending_until_a_required_config_map_exists() {
    let h = Harness::fast().await;
    h.create(
        PODS_PATH,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "needs-cm", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "cfg", "configMap": {"name": "later"}}]}
        }),
    )
    .await;
    // Many start delays pass; without the ConfigMap the pod must not start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pod = h.pod("needs-cm").await.unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    assert!(h.mounts().await.is_empty());

    h.create(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"name": "later", "namespace": "default"},
        "data": {"k": "v"}}),
    )
    .await;
    h.eventually("the pod to start", || async {
        is_ready(&h.pod("needs-cm").await?).then_some(())
    })
    .await;
    let mounts = h.mounts().await;
    assert_eq!(mounts[0]["configMaps"]["later"]["data"], json!({"k": "v"}));
    h.sim.shutdown().await;
}

#[tokio::test]
async fn template_change_rolls_pods_to_the_new_revision_from_the_highest_ordinal() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("web", 3, None)).await;
    wait_all_ready(&h, "web", 3).await;
    let before = h.statefulset("web").await.unwrap();
    let old_revision = before["status"]["updateRevision"].clone();

    let rv = h.list_resource_version(PODS_PATH).await;
    let watch = h.watch(PODS_PATH, &rv).await;
    let (status, patched) = h
        .request_as(
            Method::PATCH,
            &format!("{STS_PATH}/web"),
            Some(json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let after = h
        .eventually("the rollout to finish", || async {
            let sts = h.statefulset("web").await?;
            let s = &sts["status"];
            (s["updateRevision"] != old_revision
                && s["currentRevision"] == s["updateRevision"]
                && s["updatedReplicas"] == 3
                && s["readyReplicas"] == 3)
                .then_some(sts)
        })
        .await;
    assert_eq!(
        after["status"]["observedGeneration"],
        after["metadata"]["generation"]
    );
    let new_revision = after["status"]["updateRevision"].clone();
    for pod in h.pods().await {
        assert_eq!(
            pod["metadata"]["labels"]["controller-revision-hash"],
            new_revision
        );
        assert_eq!(pod["metadata"]["annotations"]["rev"], "2");
    }
    let events = watch.events();
    let order: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "DELETED")
        .map(|e| name_of(&e["object"]))
        .collect();
    assert_eq!(order, ["web-2", "web-1", "web-0"]);

    // Both templates are kept as ControllerRevisions owned by the set, the new one newest.
    let revisions = h
        .get("/apis/apps/v1/namespaces/default/controllerrevisions")
        .await
        .expect("revisions are listable");
    let history: Vec<(Value, Value)> = revisions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(
                r["metadata"]["ownerReferences"][0]["uid"],
                after["metadata"]["uid"]
            );
            (r["metadata"]["name"].clone(), r["revision"].clone())
        })
        .collect();
    let mut expected = vec![(old_revision, json!(1)), (new_revision, json!(2))];
    expected.sort_by_key(|(name, _)| name.as_str().map(String::from));
    assert_eq!(history, expected);
    drop(watch);
    h.sim.shutdown().await;
}

#[tokio::test]
async fn foreground_delete_waits_for_blocking_dependents_and_deletes_the_others_too() {
    let h = Harness::fast().await;
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let parent = h
        .create(
            cm_path,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "parent", "namespace": "default"}}),
        )
        .await;
    let reference = |block: bool| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
                "uid": uid_of(&parent), "blockOwnerDeletion": block}])
    };
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "held", "namespace": "default",
                            "finalizers": ["example.com/hold"],
                            "ownerReferences": reference(true)}}),
    )
    .await;
    h.create(
        cm_path,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "loose", "namespace": "default",
                            "ownerReferences": reference(false)}}),
    )
    .await;

    h.delete(
        &format!("{cm_path}/parent"),
        json!({"propagationPolicy": "Foreground"}),
    )
    .await;
    h.eventually("the non-blocking dependent to be deleted", || async {
        h.get(&format!("{cm_path}/loose"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    h.eventually(
        "the blocking dependent to be marked for deletion",
        || async { is_terminating(&h.get(&format!("{cm_path}/held")).await?).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = h
        .get(&format!("{cm_path}/parent"))
        .await
        .expect("the owner waits for its blocking dependent");
    assert!(is_terminating(&waiting));

    let (status, body) = h
        .request_as(
            Method::PATCH,
            &format!("{cm_path}/held"),
            Some(json!({"metadata": {"finalizers": null}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    h.eventually("the owner to go once its dependents are gone", || async {
        h.get(&format!("{cm_path}/parent"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    h.sim.shutdown().await;
}

#[tokio::test]
async fn binding_a_statefulset_pod_to_the_node_keeps_its_generation_at_one() {
    let h = Harness::fast().await;
    h.create(STS_PATH, statefulset("bound", 2, None)).await;
    wait_all_ready(&h, "bound", 2).await;
    for name in ["bound-0", "bound-1"] {
        let pod = h.pod(name).await.expect("the pod exists");
        assert!(is_ready(&pod), "{pod}");
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty()),
            "the pod is bound: {pod}"
        );
        assert_eq!(pod["metadata"]["generation"], 1, "{pod}");
    }

    // A spec change by a user does raise it.
    let (status, patched) = h
        .request_as(
            Method::PATCH,
            &format!("{PODS_PATH}/bound-0"),
            Some(json!({"spec": {"activeDeadlineSeconds": 600}})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["metadata"]["generation"], 2, "{patched}");
    h.sim.shutdown().await;
}

// ---- ReplicaSet and Deployment controllers -------------------------------------------------
//
// What kube-controller-manager does, as these cases check it: a Deployment owns one ReplicaSet
// per pod template, named `<deployment>-<pod-template-hash>` (`getNewReplicaSet`); its pods are
// named by `generateName` (`<replicaset>-` and 5 characters of `bcdfghjklmnpqrstvwxz2456789`,
// apiserver's `SimpleNameGenerator`); a ReplicaSet replaces a deleted pod while it terminates
// (`FilterActivePods`) and deletes not-Ready pods first (`ActivePodsWithRanks`); a rolling
// update stays within `replicas + maxSurge` pods and `replicas - maxUnavailable` available ones
// (`reconcileNewReplicaSet`, `reconcileOldReplicaSets`); `Recreate` starts new pods only once
// the old ones are gone (`rolloutRecreate`); ReplicaSets beyond `revisionHistoryLimit` go
// (`cleanupDeployment`).

const DEPLOYMENTS_PATH: &str = "/apis/apps/v1/namespaces/default/deployments";
const REPLICASETS_PATH: &str = "/apis/apps/v1/namespaces/default/replicasets";
const NAME_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

fn deployment(name: &str, replicas: u32, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}]}
            }
        }
    })
}

impl Harness {
    async fn replica_sets(&self) -> Vec<Value> {
        let list = self.get(REPLICASETS_PATH).await.expect("listable");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    async fn deployment(&self, name: &str) -> Value {
        self.get(&format!("{DEPLOYMENTS_PATH}/{name}"))
            .await
            .expect("the Deployment exists")
    }

    async fn merge_patch(&self, path: &str, patch: Value) {
        let (status, body) = self
            .request_as(
                Method::PATCH,
                path,
                Some(patch),
                "application/merge-patch+json",
            )
            .await;
        assert_eq!(status, StatusCode::OK, "PATCH {path}: {body}");
    }

    /// Waits until the Deployment's rollout is complete, as `kubectl rollout status` decides
    /// it: status current, every replica updated, available, and no old pod left.
    async fn wait_rolled_out(&self, name: &str, replicas: u64) -> Value {
        self.eventually(&format!("{name} rolled out to {replicas}"), || async {
            let d = self.deployment(name).await;
            let s = &d["status"];
            let current = s["observedGeneration"] == d["metadata"]["generation"];
            let n = |f: &str| s[f].as_u64().unwrap_or(0);
            (current
                && n("updatedReplicas") == replicas
                && n("replicas") == replicas
                && n("availableReplicas") == replicas)
                .then_some(d)
        })
        .await
    }
}

fn owner_of(obj: &Value) -> (String, String, String) {
    let owner = obj["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .cloned()
        .unwrap_or_default();
    let s = |f: &str| owner[f].as_str().unwrap_or_default().to_string();
    (s("kind"), s("name"), s("uid"))
}

#[tokio::test]
async fn a_deployment_owns_one_replicaset_per_template_whose_pods_have_generated_names() {
    let h = Harness::fast().await;
    let created = h
        .create(
            DEPLOYMENTS_PATH,
            deployment("web", 3, json!({"type": "RollingUpdate"})),
        )
        .await;
    let d = h.wait_rolled_out("web", 3).await;
    let sets = h.replica_sets().await;
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("a pod-template-hash label");
    assert_eq!(name_of(rs), format!("web-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", "pod-template-hash": hash})
    );
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(
        owner_of(rs),
        ("Deployment".into(), "web".into(), uid_of(&created).into())
    );
    let pods = h.pods().await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let suffix = name_of(pod)
            .strip_prefix(&format!("{}-", name_of(rs)))
            .expect("named after the ReplicaSet");
        assert_eq!(suffix.len(), 5, "{}", name_of(pod));
        assert!(
            suffix.chars().all(|c| NAME_ALPHABET.contains(c)),
            "{suffix}"
        );
        assert_eq!(pod["metadata"]["generateName"], format!("{}-", name_of(rs)));
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            owner_of(pod),
            ("ReplicaSet".into(), name_of(rs).into(), uid_of(rs).into())
        );
        assert!(is_ready(pod));
    }
    let conditions = d["status"]["conditions"].as_array().unwrap();
    let reason = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    assert_eq!(
        reason("Available"),
        Some((json!("True"), json!("MinimumReplicasAvailable")))
    );
    assert_eq!(
        reason("Progressing"),
        Some((json!("True"), json!("NewReplicaSetAvailable")))
    );
    h.sim.shutdown().await;
}

#[tokio::test]
async fn a_replicaset_replaces_a_terminating_pod_at_once_and_scales_down_unready_pods_first() {
    // A 30 s grace takes 0.3 s; a pod is Ready 1 s after it is created.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 3, json!({"type": "RollingUpdate"})),
    )
    .await;
    h.wait_rolled_out("web", 3).await;

    let victim = h.pods().await.remove(0);
    h.delete(&format!("{PODS_PATH}/{}", name_of(&victim)), json!({}))
        .await;
    let pods = h
        .eventually("a replacement beside the terminating pod", || async {
            let pods = h.pods().await;
            (pods.len() == 4).then_some(pods)
        })
        .await;
    let terminating: Vec<&str> = pods
        .iter()
        .filter(|p| is_terminating(p))
        .map(uid_of)
        .collect();
    assert_eq!(
        terminating,
        [uid_of(&victim)],
        "the old pod still terminates"
    );
    h.wait_rolled_out("web", 3).await;
    h.eventually("the deleted pod gone", || async {
        (h.pods().await.len() == 3).then_some(())
    })
    .await;

    // 3 -> 5, and straight to 2 before the new pods are Ready: those go first.
    let scale = |n: u32| json!({"spec": {"replicas": n}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), scale(5))
        .await;
    let fresh: Vec<String> = h
        .eventually("two new pods", || async {
            let pods = h.pods().await;
            let fresh: Vec<String> = pods
                .iter()
                .filter(|p| !is_ready(p))
                .map(|p| uid_of(p).to_string())
                .collect();
            (pods.len() == 5 && fresh.len() == 2).then_some(fresh)
        })
        .await;
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), scale(2))
        .await;
    h.wait_rolled_out("web", 2).await;
    let left: Vec<String> = h
        .eventually("two pods left", || async {
            let pods = h.pods().await;
            let live: Vec<String> = pods
                .iter()
                .filter(|p| !is_terminating(p))
                .map(|p| uid_of(p).to_string())
                .collect();
            (live.len() == 2).then_some(live)
        })
        .await;
    assert!(
        fresh.iter().all(|uid| !left.contains(uid)),
        "the unready pods were deleted first: {fresh:?} vs {left:?}"
    );
    h.sim.shutdown().await;
}

/// `ClaimReplicaSets`: a Deployment adopts an orphan ReplicaSet its selector matches (an old
/// revision, so scaled to 0), and releases one of its sets whose labels stop matching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_adopts_a_matching_orphan_replicaset_and_releases_one_that_stops_matching() {
    let h = Harness::fast().await;
    let orphan = h
        .create(
            REPLICASETS_PATH,
            json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "legacy", "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "web", "era": "legacy"}},
                    "template": {
                        "metadata": {"labels": {"app": "web", "era": "legacy"}},
                        "spec": {"containers": [{"name": "worker", "image": "busybox:1.35"}]}
                    }
                }
            }),
        )
        .await;
    let d = h
        .create(
            DEPLOYMENTS_PATH,
            deployment("web", 2, json!({"type": "RollingUpdate"})),
        )
        .await;
    h.wait_rolled_out("web", 2).await;
    let legacy = h
        .eventually("the orphan adopted and scaled down", || async {
            let rs = h.get(&format!("{REPLICASETS_PATH}/legacy")).await?;
            (rs["spec"]["replicas"] == 0).then_some(rs)
        })
        .await;
    assert_eq!(uid_of(&legacy), uid_of(&orphan));
    assert_eq!(
        owner_of(&legacy),
        ("Deployment".into(), "web".into(), uid_of(&d).to_string())
    );

    h.merge_patch(
        &format!("{REPLICASETS_PATH}/legacy"),
        json!({"metadata": {"labels": {"app": "retired"}}}),
    )
    .await;
    h.eventually("the set released", || async {
        let rs = h.get(&format!("{REPLICASETS_PATH}/legacy")).await?;
        (owner_of(&rs).2.is_empty()).then_some(())
    })
    .await;
    h.sim.shutdown().await;
}

/// An eviction as the kubelet's eviction manager writes it (`status.phase: Failed`, reason
/// `Evicted`): the pod stays in the API, its containers are stopped for good (no mounts, never
/// started again), and its ReplicaSet no longer counts it (`FilterActivePods` skips Failed and
/// Succeeded pods), so it creates a replacement at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_stays_failed_without_mounts_and_its_replicaset_replaces_it() {
    let h = Harness::fast().await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 2, json!({"type": "RollingUpdate"})),
    )
    .await;
    h.wait_rolled_out("web", 2).await;
    h.eventually("both pods mounted", || async {
        (h.mounts().await.len() == 2).then_some(())
    })
    .await;

    let victim = h.pods().await.remove(0);
    h.merge_patch(
        &format!("{PODS_PATH}/{}/status", name_of(&victim)),
        json!({"status": {"phase": "Failed", "reason": "Evicted",
                          "message": "The node was low on resource: memory."}}),
    )
    .await;
    let pods = h
        .eventually("a replacement beside the evicted pod", || async {
            let pods = h.pods().await;
            (pods.len() == 3 && pods.iter().filter(|p| is_ready(p)).count() == 2).then_some(pods)
        })
        .await;
    let evicted = pods
        .iter()
        .find(|p| uid_of(p) == uid_of(&victim))
        .expect("the evicted pod stays in the API");
    assert_eq!(evicted["status"]["phase"], "Failed");
    assert!(!is_terminating(evicted), "nobody deleted it");
    h.wait_rolled_out("web", 2).await;
    let mounts = h
        .eventually("the replacement mounted", || async {
            let mounts = h.mounts().await;
            (mounts.len() == 2).then_some(mounts)
        })
        .await;
    assert!(
        mounts.iter().all(|m| m["uid"] != json!(uid_of(&victim))),
        "an evicted pod runs nothing: {mounts:#?}"
    );
    let again = h.pod(name_of(&victim)).await.expect("still there");
    assert_eq!(again["status"]["phase"], "Failed", "never started again");
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_restart_rolls_within_max_surge_and_max_unavailable_to_a_new_replicaset() {
    let h = Harness::start(0.01, Duration::from_secs(20)).await;
    let strategy =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 4, strategy))
        .await;
    h.wait_rolled_out("web", 4).await;
    let old = h.replica_sets().await.remove(0);

    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 4).await;
    assert!(
        most_asked <= 5,
        "at most replicas + maxSurge pods asked for: {most_asked}"
    );
    assert!(
        fewest_ready >= 4,
        "never below replicas - maxUnavailable: {fewest_ready}"
    );

    let sets = h.replica_sets().await;
    assert_eq!(sets.len(), 2);
    let new = sets.iter().find(|rs| uid_of(rs) != uid_of(&old)).unwrap();
    assert_eq!(
        new["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let old_now = sets.iter().find(|rs| uid_of(rs) == uid_of(&old)).unwrap();
    assert_eq!(old_now["spec"]["replicas"], 0);
    let pods = h
        .eventually("only the new ReplicaSet's pods", || async {
            let pods = h.pods().await;
            (pods.len() == 4).then_some(pods)
        })
        .await;
    assert!(pods.iter().all(|p| owner_of(p).2 == uid_of(new)));
    h.sim.shutdown().await;
}

/// Restarts the rollout of Deployment `name` as `kubectl rollout restart` does and waits until
/// it is done. Returns the most replicas its ReplicaSets were asked for at once and the fewest
/// Ready pods seen meanwhile.
///
/// maxSurge bounds the replicas the Deployment asks of its ReplicaSets (upstream's
/// `NewRSNewReplicas` counts `spec.replicas`): pods an old set was just told to drop may still be
/// running for a moment, there as upstream.
async fn rollout_restart_bounds(h: &Harness, name: &str, replicas: u64) -> (usize, usize) {
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-11-24T00:00:00Z"
    }}}}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/{name}"), restart)
        .await;
    let (most_asked, fewest_ready) = (Cell::new(0), Cell::new(usize::MAX));
    h.eventually("the rollout to finish", || async {
        let asked: u64 = h
            .replica_sets()
            .await
            .iter()
            .filter_map(|rs| rs["spec"]["replicas"].as_u64())
            .sum();
        most_asked.set(most_asked.get().max(asked as usize));
        let pods = h.pods().await;
        let live: Vec<&Value> = pods.iter().filter(|p| !is_terminating(p)).collect();
        fewest_ready.set(
            fewest_ready
                .get()
                .min(live.iter().filter(|p| is_ready(p)).count()),
        );
        let d = h.deployment(name).await;
        let done = d["status"]["updatedReplicas"] == replicas
            && d["status"]["replicas"] == replicas
            && d["status"]["availableReplicas"] == replicas
            && d["status"]["observedGeneration"] == d["metadata"]["generation"];
        done.then_some(())
    })
    .await;
    (most_asked.get(), fewest_ready.get())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percentages_of_a_rolling_update_round_surge_up_and_unavailability_down() {
    // Upstream's `ResolveFenceposts`: maxSurge rounds up, maxUnavailable down. Of 3 replicas,
    // 25% and 25% are a surge of 1 and no pod unavailable; rounded the other way the rollout
    // could not move (0 and 0) or would drop a Ready pod.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    let strategy = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 3, strategy))
        .await;
    h.wait_rolled_out("web", 3).await;
    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 3).await;
    assert_eq!(most_asked, 4, "replicas + a surge of ceil(0.75)");
    assert!(
        fewest_ready >= 3,
        "floor(0.75) = 0 unavailable: {fewest_ready}"
    );
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_without_surge_replaces_up_to_max_unavailable_pods_at_once() {
    // maxSurge 0: old pods must go first (`reconcileOldReplicaSets` scales the old set down to
    // `replicas - maxUnavailable` at once), new ones come up in their place.
    let h = Harness::start(0.01, Duration::from_secs(100)).await;
    let strategy = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "50%"}});
    h.create(DEPLOYMENTS_PATH, deployment("web", 4, strategy))
        .await;
    h.wait_rolled_out("web", 4).await;
    let (most_asked, fewest_ready) = rollout_restart_bounds(&h, "web", 4).await;
    assert_eq!(most_asked, 4, "no surge");
    assert_eq!(
        fewest_ready, 2,
        "down to replicas - maxUnavailable while the new pods start, no further"
    );
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_starts_new_pods_only_once_the_old_ones_are_gone() {
    let h = Harness::start(0.01, Duration::from_secs(20)).await;
    h.create(
        DEPLOYMENTS_PATH,
        deployment("web", 2, json!({"type": "Recreate"})),
    )
    .await;
    h.wait_rolled_out("web", 2).await;
    let old = h.replica_sets().await.remove(0);
    let change = json!({"spec": {"template": {"metadata": {"labels": {"app": "web", "v": "2"}}}}});
    h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), change)
        .await;
    let overlapped = Cell::new(false);
    h.eventually("the recreate to finish", || async {
        let pods = h.pods().await;
        let old_pods = pods.iter().any(|p| owner_of(p).2 == uid_of(&old));
        let new_pods = pods.iter().any(|p| owner_of(p).2 != uid_of(&old));
        overlapped.set(overlapped.get() || (old_pods && new_pods));
        let d = h.deployment("web").await;
        (d["status"]["updatedReplicas"] == 2 && d["status"]["availableReplicas"] == 2 && !old_pods)
            .then_some(())
    })
    .await;
    assert!(!overlapped.get(), "old and new pods never exist together");
    h.sim.shutdown().await;
}

#[tokio::test]
async fn old_replicasets_beyond_the_history_limit_go_and_a_deleted_deployment_takes_its_pods() {
    let h = Harness::fast().await;
    let mut d = deployment("web", 1, json!({"type": "RollingUpdate"}));
    d["spec"]["revisionHistoryLimit"] = json!(1);
    h.create(DEPLOYMENTS_PATH, d).await;
    h.wait_rolled_out("web", 1).await;
    for version in ["2", "3", "4"] {
        let change = json!({"spec": {"template": {"metadata": {"annotations": {"v": version}}}}});
        h.merge_patch(&format!("{DEPLOYMENTS_PATH}/web"), change)
            .await;
        h.wait_rolled_out("web", 1).await;
    }
    let sets = h
        .eventually("one old ReplicaSet kept", || async {
            let sets = h.replica_sets().await;
            (sets.len() == 2).then_some(sets)
        })
        .await;
    let mut revisions: Vec<&str> = sets
        .iter()
        .map(|rs| {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap()
        })
        .collect();
    revisions.sort();
    assert_eq!(revisions, ["3", "4"]);

    h.delete(&format!("{DEPLOYMENTS_PATH}/web"), json!({}))
        .await;
    h.eventually("the ReplicaSets and pods collected", || async {
        (h.replica_sets().await.is_empty() && h.pods().await.is_empty()).then_some(())
    })
    .await;
    h.sim.shutdown().await;
}
