//! A worker built on the library against kube-sim: it takes over a Lease left by a previous
//! pod instance, acknowledges a version only after the application confirmed its stops, keeps
//! renewing meanwhile, reports each stop before the start that follows it, and on SIGTERM
//! starts nothing and exits once a version without jobs for it is acknowledged.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use kube_sim::{Sim, SimConfig};
use swarm_protocol::config::{WorkerConfig, Workload};
use swarm_protocol::lease::acked_version;
use swarm_protocol::names::{ACKED_VERSION_ANNOTATION, POOL_LABEL};
use swarm_worker::{Exit, Jobs, Permit, WorkerBuilder};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};

const POD: &str = "w-0";
const CONFIG_MAP: &str = "pool-config";
/// The ConfigMap the worker of `POD` reads: its own slice of the pool's config.
const OWN_CONFIG_MAP: &str = "pool-config.w-0";

/// The application: records every call; each stop waits for a permit, so the test decides when
/// a stop has finished.
#[derive(Clone)]
struct Recorder {
    calls: Arc<Mutex<Vec<String>>>,
    stop_permits: Arc<Semaphore>,
}

impl Recorder {
    fn new() -> Self {
        Self {
            calls: Arc::default(),
            stop_permits: Arc::new(Semaphore::new(0)),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl Jobs for Recorder {
    async fn start(&mut self, job: &str, permit: Permit) {
        // A job starts only while the worker holds its Lease.
        assert!(permit.holds(), "{job} started without a permit");
        self.record(format!("start {job}"));
    }

    async fn stop(&mut self, job: &str) {
        self.record(format!("stopping {job}"));
        self.stop_permits.acquire().await.unwrap().forget();
        self.record(format!("stopped {job}"));
    }
}

/// `config.yml` at `version` with `jobs` for this pod and `others` for another.
fn config(version: u64, jobs: &[&str], others: &[&str]) -> ConfigMap {
    let workload = |jobs: &[&str]| Workload {
        version,
        jobs: jobs.iter().map(|job| job.to_string()).collect(),
    };
    let text = WorkerConfig::new(
        version,
        [
            (POD.to_string(), workload(jobs)),
            ("w-1".to_string(), workload(others)),
        ],
    )
    .render();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(OWN_CONFIG_MAP.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("config.yml".to_string(), text)])),
        ..ConfigMap::default()
    }
}

async fn write_config(api: &Api<ConfigMap>, desired: ConfigMap) {
    let mut current = api.get(OWN_CONFIG_MAP).await.unwrap();
    current.data = desired.data;
    api.replace(OWN_CONFIG_MAP, &PostParams::default(), &current)
        .await
        .unwrap();
}

/// Polls `check` every 20 ms for up to 10 s.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates this test's Pod, the Lease's owner (the sim collects a Lease whose owner is
/// missing); returns its uid.
async fn create_pod(pods: &Api<Pod>) -> String {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(POD.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "worker".into(),
                image: Some("swarm-worker:latest".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    pod.metadata.uid.unwrap()
}

fn spec(lease: &Lease) -> &LeaseSpec {
    lease.spec.as_ref().unwrap()
}

fn renew_time(lease: &Lease) -> Timestamp {
    spec(lease).renew_time.as_ref().unwrap().0
}

fn report_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The running jobs of each report line after the first, with its version.
/// What the report says the worker ran, a line per change: the lines a renewal adds (the same
/// jobs, a later `until`) are left out once checked.
fn reported(path: &Path) -> Vec<(Option<u64>, Vec<String>)> {
    let mut changes: Vec<(Option<u64>, Vec<String>)> = Vec::new();
    let mut until = None;
    for line in report_lines(path) {
        let running: Vec<String> = line["running"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| job.as_str().unwrap().to_string())
            .collect();
        let this = (line["version"].as_u64(), running);
        let this_until = line["until"].as_str().map(str::to_owned);
        if changes.last() == Some(&this) {
            assert!(
                this_until > until,
                "a repeated line extends the permit: {line}"
            );
        } else {
            changes.push(this);
        }
        until = this_until;
    }
    changes
}

fn strings(jobs: &[&str]) -> Vec<String> {
    jobs.iter().map(|job| job.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_is_acknowledged_only_after_the_application_confirmed_its_stops() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    config_maps
        .create(&PostParams::default(), &config(1, &["a", "b"], &["x"]))
        .await
        .unwrap();
    let uid = create_pod(&pods).await;
    // The previous pod of this name left its Lease, acknowledging a version of its own.
    let left = Lease {
        metadata: ObjectMeta {
            name: Some(POD.into()),
            annotations: Some(BTreeMap::from([(
                ACKED_VERSION_ANNOTATION.to_string(),
                "9".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("uid-of-the-previous-pod".into()),
            lease_duration_seconds: Some(10),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    leases.create(&PostParams::default(), &left).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    let (terminate, terminated) = oneshot::channel::<()>();
    let worker = worker_of(&uid, client.clone())
        .report(&report)
        .lease_duration(Duration::from_secs(2))
        .termination_deadline(Duration::from_secs(20))
        .shutdown_on(async move {
            let _ = terminated.await;
        })
        .build()
        .await
        .unwrap();
    let run = tokio::spawn(worker.run(app.clone()));

    // Version 1: taken over, started, acknowledged.
    let lease = eventually("version 1 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(1)).then_some(lease)
    })
    .await;
    assert_eq!(spec(&lease).holder_identity.as_deref(), Some(uid.as_str()));
    assert_eq!(spec(&lease).lease_duration_seconds, Some(2));
    assert_eq!(spec(&lease).lease_transitions, Some(1));
    assert_eq!(
        lease.metadata.labels.as_ref().unwrap()[POOL_LABEL],
        "pool".to_string()
    );
    let owners = lease.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Pod", POD)
    );
    assert_eq!(owners[0].uid, uid);
    assert_eq!(app.calls(), strings(&["start a", "start b"]));

    // Version 2 moves b away and brings c: b's stop is held.
    write_config(&config_maps, config(2, &["a", "c"], &["x", "b"])).await;
    eventually("b's stop asked for", async || {
        app.calls()
            .contains(&"stopping b".to_string())
            .then_some(())
    })
    .await;
    let before = leases.get(POD).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = leases.get(POD).await.unwrap();
    assert_eq!(
        acked_version(&during),
        Some(1),
        "not acknowledged while b may still run"
    );
    assert!(
        renew_time(&during) > renew_time(&before),
        "the Lease is renewed while a stop is under way"
    );
    assert!(
        !app.calls().contains(&"start c".to_string()),
        "c waits for b"
    );

    app.stop_permits.add_permits(1);
    eventually("version 2 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(2)).then_some(())
    })
    .await;
    assert_eq!(
        app.calls(),
        strings(&["start a", "start b", "stopping b", "stopped b", "start c"])
    );
    assert_eq!(
        reported(&report),
        vec![
            (None, vec![]),
            (Some(1), strings(&["a", "b"])),
            (Some(2), strings(&["a"])),
            (Some(2), strings(&["a", "c"])),
        ],
        "the stop is reported after b stopped, the start before c started"
    );
    let first = &report_lines(&report)[0];
    assert_eq!(first["pod"], POD);
    assert_eq!(first["uid"], uid.as_str());

    // SIGTERM: every job stops; a version that still lists jobs is neither run nor
    // acknowledged; the first version without jobs for this pod is, and the worker exits.
    app.stop_permits.add_permits(2);
    terminate.send(()).unwrap();
    eventually("every job stopped", async || {
        let calls = app.calls();
        (calls.contains(&"stopped a".to_string()) && calls.contains(&"stopped c".to_string()))
            .then_some(())
    })
    .await;
    write_config(&config_maps, config(3, &["a", "d"], &["x", "b", "c"])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(acked_version(&leases.get(POD).await.unwrap()), Some(2));
    assert!(!run.is_finished());
    write_config(&config_maps, config(4, &[], &["x", "b", "a", "c", "d"])).await;
    let exit = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker exits once a version without its jobs is acknowledged")
        .unwrap();
    assert_eq!(exit, Exit::Acknowledged { version: 4 });
    assert_eq!(acked_version(&leases.get(POD).await.unwrap()), Some(4));
    let calls = app.calls();
    assert!(
        !calls.iter().any(|call| call == "start d"),
        "nothing starts after SIGTERM: {calls:?}"
    );
    assert_eq!(
        reported(&report).last(),
        Some(&(Some(2), vec![])),
        "the last line shows nothing running"
    );

    // Only what the protocol's RBAC allows: get and watch of the ConfigMap by name; get,
    // create and update of Leases.
    let requests: Vec<serde_json::Value> =
        reqwest::get(format!("{}/kube-sim/v1/requests", sim.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let by_worker = |path: &str| -> Vec<(String, String)> {
        requests
            .iter()
            .filter(|request| request["path"].as_str().unwrap().contains(path))
            .map(|request| {
                let method = request["method"].as_str().unwrap().to_string();
                let query = request["query"].as_str().unwrap();
                let watch = query.contains("watch=true");
                (
                    if watch { "WATCH".to_string() } else { method },
                    query.to_string(),
                )
            })
            .collect()
    };
    let config_map_calls = by_worker("/configmaps");
    let watches: Vec<_> = config_map_calls
        .iter()
        .filter(|(verb, _)| verb == "WATCH")
        .collect();
    assert_eq!(
        watches.len(),
        1,
        "one watch, never restarted: {config_map_calls:?}"
    );
    assert!(
        watches[0]
            .1
            .contains("fieldSelector=metadata.name%3Dpool-config.w-0"),
        "{watches:?}"
    );
    let gets = config_map_calls
        .iter()
        .filter(|(verb, query)| verb == "GET" && query.is_empty())
        .count();
    // The test's own writes read the ConfigMap three times; the worker twice: to follow it,
    // and the fresh read after its first Lease write that lifts the fence it starts behind.
    assert_eq!(gets, 5, "{config_map_calls:?}");
    for (verb, _) in by_worker("/leases") {
        assert!(["GET", "POST", "PUT"].contains(&verb.as_str()), "{verb}");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn without_the_api_a_worker_runs_nothing() {
    // Nothing listens on port 1: every request fails to connect. The worker cannot renew its
    // Lease, so the operator may hand its jobs to others: it starts none.
    let client = Client::try_from(Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    let (terminate, terminated) = oneshot::channel::<()>();
    let worker = WorkerBuilder::empty()
        .pod_name(POD)
        .namespace("default")
        .pod_uid("uid-1")
        .pool("pool")
        .report(&report)
        .termination_deadline(Duration::from_millis(500))
        .client(client)
        .shutdown_on(async move {
            let _ = terminated.await;
        })
        .build()
        .await
        .unwrap();
    assert_eq!(worker.settings().config_map, "pool-config");
    let run = tokio::spawn(worker.run(app.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    terminate.send(()).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit, Exit::DeadlineReached);
    assert!(app.calls().is_empty(), "{:?}", app.calls());
    assert!(
        reported(&report)
            .iter()
            .all(|(_, running)| running.is_empty()),
        "{:?}",
        reported(&report)
    );
}

/// A TCP proxy in front of the sim that the test can cut: cut, it breaks every open connection
/// and refuses new ones, as a network partition that resets would.
struct Proxy {
    url: String,
    open: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (open, _) = watch::channel(true);
        let state = open.clone();
        tokio::spawn(async move {
            while let Ok((mut downstream, _)) = listener.accept().await {
                let mut open = state.subscribe();
                if !*open.borrow_and_update() {
                    continue; // dropped: refused
                }
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream) => {}
                        _ = open.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Self { url, open }
    }

    fn cut(&self) {
        self.open.send_replace(false);
    }

    fn restore(&self) {
        self.open.send_replace(true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_api_fences_itself_and_runs_again_after_a_renewal_and_a_fresh_read()
 {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("swarm_worker=debug")
        .with_test_writer()
        .try_init();
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let uid = create_pod(&Api::namespaced(client.clone(), "default")).await;
    config_maps
        .create(&PostParams::default(), &config(1, &["a", "b"], &[]))
        .await
        .unwrap();
    let proxy = Proxy::start(sim.addr()).await;
    let through_proxy = Client::try_from(Config::new(proxy.url.parse().unwrap())).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    app.stop_permits.add_permits(100);
    let duration = Duration::from_secs(4);
    let worker = worker_of(&uid, through_proxy)
        .report(&report)
        .lease_duration(duration)
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let fence_after = worker.settings().fence_after();
    assert_eq!(
        fence_after,
        Duration::from_secs(2),
        "4 s less a margin of 2 s"
    );
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    eventually("version 1 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(1)).then_some(())
    })
    .await;
    assert_eq!(app.calls(), strings(&["start a", "start b"]));

    // Cut off: no renewal gets through, so within the fence limit every job stops.
    let cut = tokio::time::Instant::now();
    proxy.cut();
    let renewed_before = renew_time(&leases.get(POD).await.unwrap());
    eventually("every job stopped", async || {
        let calls = app.calls();
        (calls.contains(&"stopped a".to_string()) && calls.contains(&"stopped b".to_string()))
            .then_some(())
    })
    .await;
    let fenced_after = cut.elapsed();
    assert!(
        fenced_after <= fence_after + Duration::from_millis(500),
        "fenced {fenced_after:?} after the cut"
    );
    assert_eq!(reported(&report).last(), Some(&(Some(1), vec![])));

    // Meanwhile the operator moves b away: the worker must not run b again.
    write_config(&config_maps, config(2, &["a", "c"], &["b"])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        renew_time(&leases.get(POD).await.unwrap()),
        renewed_before,
        "no renewal got through"
    );
    let calls = app.calls();
    assert_eq!(calls.len(), 6, "nothing starts while fenced: {calls:?}");

    // Back: a renewal, then a GET issued after it, then the new entry runs and is acknowledged.
    proxy.restore();
    eventually("version 2 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(2)).then_some(())
    })
    .await;
    let restarted: Vec<String> = app.calls()[6..].to_vec();
    assert_eq!(restarted, strings(&["start a", "start c"]));
    assert_eq!(
        reported(&report).last(),
        Some(&(Some(2), strings(&["a", "c"])))
    );
    assert!(renew_time(&leases.get(POD).await.unwrap()) > renewed_before);
    sim.shutdown().await;
}

/// The worker of `POD` in namespace `default`, for pod instance `uid`, in pool `pool` (whose
/// ConfigMap is `CONFIG_MAP`), on `client`; each test adds its timing and shutdown.
fn worker_of(uid: &str, client: Client) -> WorkerBuilder {
    WorkerBuilder::empty()
        .pod_name(POD)
        .namespace("default")
        .pod_uid(uid)
        .pool("pool")
        .config_map(CONFIG_MAP)
        .client(client)
}

/// Aborts a task when the test ends, even on a failed assertion.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A worker that starts before its pool's ConfigMap exists: its read after its first Lease
/// write finds none, so whatever the watch delivers later is newer, and it runs its entry as
/// soon as the ConfigMap comes, not at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_config_runs_it_as_soon_as_it_comes() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = create_pod(&pods).await;
    let app = Recorder::new();
    // Renewed every 15 s: a start that waited for the next renewal would take that long.
    let worker = worker_of(&uid, client.clone())
        .lease_duration(Duration::from_secs(60))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let run = tokio::spawn(worker.run(app.clone()));
    eventually("the first Lease write", async || leases.get(POD).await.ok()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(app.calls().is_empty(), "no config, no job");

    let created = tokio::time::Instant::now();
    config_maps
        .create(&PostParams::default(), &config(1, &["a"], &[]))
        .await
        .unwrap();
    eventually("a started", async || {
        app.calls().contains(&"start a".to_string()).then_some(())
    })
    .await;
    assert!(
        created.elapsed() < Duration::from_secs(5),
        "{:?}",
        created.elapsed()
    );
    eventually("version 1 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(1)).then_some(())
    })
    .await;
    run.abort();
    sim.shutdown().await;
}

/// On the default timing (a 40 s Lease), a worker in steady state writes its Lease once per
/// 10 s and no more, while a new version is still acknowledged at once, not at the next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_default_timing_a_worker_renews_every_ten_seconds_and_acknowledges_at_once() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = create_pod(&pods).await;
    config_maps
        .create(&PostParams::default(), &config(1, &["a"], &[]))
        .await
        .unwrap();
    let app = Recorder::new();
    let worker = worker_of(&uid, client.clone())
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let run = tokio::spawn(worker.run(app.clone()));
    let acked = eventually("version 1 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(1)).then_some(lease)
    })
    .await;
    assert_eq!(spec(&acked).lease_duration_seconds, Some(40));

    // Steady state: the next renewal is 10 s after the acknowledgement, not sooner.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let idle = leases.get(POD).await.unwrap();
    assert_eq!(
        idle.metadata.resource_version, acked.metadata.resource_version,
        "no Lease write within 4 s of the last one"
    );

    let written = tokio::time::Instant::now();
    write_config(&config_maps, config(2, &["a", "b"], &[])).await;
    let renewed = eventually("version 2 acknowledged", async || {
        let lease = leases.get(POD).await.ok()?;
        (acked_version(&lease) == Some(2)).then_some(lease)
    })
    .await;
    assert!(
        written.elapsed() < Duration::from_secs(5),
        "acknowledged {:?} after the write: at the next renewal, not at once",
        written.elapsed()
    );
    assert!(renew_time(&renewed) > renew_time(&acked));
    run.abort();
    sim.shutdown().await;
}

/// After a 410 a worker watches from the object as it is: the resourceVersion of its next GET is
/// that of the object's last change, older than the history too, and a watch from it would
/// expire at once, over and over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_its_watch_expires_a_worker_watches_from_the_object_as_it_is() {
    let sim = Sim::start(SimConfig::default()).await.unwrap();
    let client = Client::try_from(Config::new(sim.url().parse().unwrap())).unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let uid = create_pod(&Api::namespaced(client.clone(), "default")).await;
    config_maps
        .create(&PostParams::default(), &config(1, &["a"], &[]))
        .await
        .unwrap();
    let proxy = Proxy::start(sim.addr()).await;
    let through_proxy = Client::try_from(Config::new(proxy.url.parse().unwrap())).unwrap();
    let app = Recorder::new();
    app.stop_permits.add_permits(100);
    let worker = worker_of(&uid, through_proxy)
        .lease_duration(Duration::from_secs(60))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    let acked = async |version| {
        eventually(&format!("version {version} acknowledged"), async || {
            let lease = leases.get(POD).await.ok()?;
            (acked_version(&lease) == Some(version)).then_some(())
        })
        .await;
    };
    acked(1).await;

    // The history no longer reaches the ConfigMap's last change; the watch breaks.
    let before = config_map_watches(&sim).await;
    sim.compact();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.restore();
    tokio::time::sleep(Duration::from_secs(2)).await;
    write_config(&config_maps, config(2, &["b"], &[])).await;
    acked(2).await;
    let watches = config_map_watches(&sim).await - before;
    assert!(
        watches <= 3,
        "{watches} watches of the ConfigMap after the compaction: the worker re-watched from an expired resourceVersion"
    );
    assert_eq!(
        app.calls(),
        strings(&["start a", "stopping a", "stopped a", "start b"])
    );
    sim.shutdown().await;
}

/// How many WATCH requests of ConfigMaps the sim has answered.
async fn config_map_watches(sim: &Sim) -> usize {
    let requests: Vec<serde_json::Value> =
        reqwest::get(format!("{}/kube-sim/v1/requests", sim.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    requests
        .iter()
        .filter(|r| {
            r["path"].as_str().unwrap().contains("/configmaps")
                && r["query"].as_str().unwrap().contains("watch=true")
        })
        .count()
}
