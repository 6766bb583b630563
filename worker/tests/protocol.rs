//! A worker built on the library against kube-sim: it takes over a Lease left by a previous
//! pod instance, runs a job only within the permit of a fence read (a GET with no
//! resourceVersion) that listed it, stops its jobs when its reads fail, writes its Lease only to
//! acknowledge, serves readiness, and on SIGTERM starts nothing and exits once a version
//! without jobs for it is acknowledged.
//!
//! The sim's side is in `protocol/sim.rs`, the worker's and its application's in
//! `protocol/worker.rs`.

#[path = "protocol/sim.rs"]
mod sim;
#[path = "protocol/worker.rs"]
mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use swarm_protocol::lease::acked_version;
use swarm_protocol::names::{ACKED_VERSION_ANNOTATION, POOL_LABEL};
use swarm_worker::Exit;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use sim::{
    Proxy, Reads, Shed, config_map_watches, count, gated_client, requests, shedding_client,
    sim_with,
};
use worker::{
    AbortOnDrop, CONFIG_MAP, POD, Recorder, acknowledged, config, eventually, readyz, report_lines,
    reported, spec, strings, worker_of, write_config,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_is_acknowledged_only_after_the_application_confirmed_its_stops() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a", "b"], &["x"]))).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    leases
        .create(&PostParams::default(), &left_by_the_previous_pod())
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    let (terminate, terminated) = oneshot::channel::<()>();
    let worker = worker_of(&uid, client.clone())
        .report(&report)
        .permit(Duration::from_secs(6))
        .termination_deadline(Duration::from_secs(20))
        .shutdown_on(async move {
            let _ = terminated.await;
        })
        .build()
        .await
        .unwrap();
    let health = worker.health_addr();
    assert_ne!(health.port(), 0, "the port picked is exposed");
    let run = tokio::spawn(worker.run(app.clone()));

    // Version 1: taken over, started, acknowledged.
    let lease = acknowledged(&leases, 1).await;
    taken_over_by(&lease, &uid);
    assert_eq!(app.calls(), strings(&["start a", "start b"]));
    assert_eq!(readyz(health).await, 200);

    // Version 2 moves b away and brings c: b's stop is held.
    write_config(&config_maps, config(2, &["a", "c"], &["x", "b"])).await;
    eventually("b's stop asked for", async || {
        app.calls()
            .contains(&"stopping b".to_string())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = leases.get(POD).await.unwrap();
    assert_eq!(
        during.metadata.resource_version, lease.metadata.resource_version,
        "not acknowledged while b may still run, and no other Lease write"
    );
    assert!(
        !app.calls().contains(&"start c".to_string()),
        "c waits for b"
    );
    assert_eq!(readyz(health).await, 200, "reads go on while b stops");

    app.stop_permits.add_permits(1);
    acknowledged(&leases, 2).await;
    stop_reported_after_it_ended(&app, &report, &uid);

    // SIGTERM: not ready, every job stops; a version that still lists jobs is neither run nor
    // acknowledged; the first version without jobs for this pod is, and the worker exits.
    app.stop_permits.add_permits(2);
    terminate.send(()).unwrap();
    let exit = exit_on_a_version_without_jobs(&app, health, &config_maps, &leases, run).await;
    assert_eq!(exit, Exit::Acknowledged { version: 4 });
    assert_eq!(acked_version(&leases.get(POD).await.unwrap()), Some(4));
    let calls = app.calls();
    assert!(
        !calls.iter().any(|call| call == "start d"),
        "nothing starts after SIGTERM: {calls:?}"
    );
    assert_eq!(
        reported(&report).last().map(|(_, running)| running.clone()),
        Some(vec![]),
        "the last line shows nothing running"
    );
    only_what_the_rbac_allows(&requests(&sim).await);
    sim.shutdown().await;
}

/// The Lease the previous pod of this name left, acknowledging a version of its own.
fn left_by_the_previous_pod() -> Lease {
    Lease {
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
    }
}

/// The Lease is this pod instance's: held with the permit, taken over once, labelled with the
/// pool and owned by the Pod.
fn taken_over_by(lease: &Lease, uid: &str) {
    assert_eq!(spec(lease).holder_identity.as_deref(), Some(uid));
    assert_eq!(spec(lease).lease_duration_seconds, Some(6), "the permit");
    assert_eq!(spec(lease).lease_transitions, Some(1));
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
}

/// Once b's stop ended: c started after it, and the report says so in that order, each line
/// naming this pod instance.
fn stop_reported_after_it_ended(app: &Recorder, report: &Path, uid: &str) {
    assert_eq!(
        app.calls(),
        strings(&["start a", "start b", "stopping b", "stopped b", "start c"])
    );
    assert_eq!(
        reported(report),
        vec![
            (None, vec![]),
            (Some(1), strings(&["a", "b"])),
            (Some(2), strings(&["a"])),
            (Some(2), strings(&["a", "c"])),
        ],
        "the stop is reported after b stopped, the start before c started"
    );
    let first = &report_lines(report)[0];
    assert_eq!(first["pod"], POD);
    assert_eq!(first["uid"], uid);
}

/// After SIGTERM: every job stops and readiness fails; version 3, which still lists jobs, is
/// not acknowledged; version 4, without any, is, and the worker exits with it.
async fn exit_on_a_version_without_jobs(
    app: &Recorder,
    health: SocketAddr,
    config_maps: &Api<ConfigMap>,
    leases: &Api<Lease>,
    run: JoinHandle<Exit>,
) -> Exit {
    eventually("every job stopped", async || {
        let calls = app.calls();
        (calls.contains(&"stopped a".to_string()) && calls.contains(&"stopped c".to_string()))
            .then_some(())
    })
    .await;
    assert_eq!(readyz(health).await, 503);
    write_config(config_maps, config(3, &["a", "d"], &["x", "b", "c"])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(acked_version(&leases.get(POD).await.unwrap()), Some(2));
    assert!(!run.is_finished());
    write_config(config_maps, config(4, &[], &["x", "b", "a", "c", "d"])).await;
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker exits once a version without its jobs is acknowledged")
        .unwrap()
}

/// Only what the protocol's RBAC allows: get and watch of the ConfigMap by name, every GET a
/// quorum read (no resourceVersion); get, create and update of Leases.
fn only_what_the_rbac_allows(requests: &[(String, String, String)]) {
    let config_map_calls: Vec<_> = requests
        .iter()
        .filter(|(_, path, _)| path.contains("/configmaps"))
        .collect();
    let watches: Vec<_> = config_map_calls
        .iter()
        .filter(|(verb, _, _)| verb == "WATCH")
        .collect();
    assert_eq!(
        watches.len(),
        1,
        "one watch, never restarted: {config_map_calls:?}"
    );
    assert!(
        watches[0]
            .2
            .contains("fieldSelector=metadata.name%3Dpool-config.w-0"),
        "{watches:?}"
    );
    for (verb, path, query) in &config_map_calls {
        assert!(
            ["GET", "WATCH", "PUT", "POST"].contains(&verb.as_str()),
            "{verb} {path}"
        );
        if verb == "GET" {
            assert!(path.ends_with("/pool-config.w-0"), "{path}");
            assert!(!query.contains("resourceVersion"), "{query}");
        }
    }
    for (verb, path, _) in requests
        .iter()
        .filter(|(_, path, _)| path.contains("/leases"))
    {
        assert!(
            ["GET", "POST", "PUT"].contains(&verb.as_str()),
            "{verb} {path}"
        );
    }
}

#[tokio::test]
async fn without_the_api_a_worker_runs_nothing_and_is_not_ready() {
    // Nothing listens on port 1: every fence read fails, so nothing may run.
    let client = Client::try_from(Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    let (terminate, terminated) = oneshot::channel::<()>();
    let worker = worker_of("uid-1", client)
        .report(&report)
        .termination_deadline(Duration::from_millis(500))
        .shutdown_on(async move {
            let _ = terminated.await;
        })
        .build()
        .await
        .unwrap();
    assert_eq!(worker.settings().config_map, CONFIG_MAP);
    let health = worker.health_addr();
    let run = tokio::spawn(worker.run(app.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(readyz(health).await, 503);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_reads_fail_stops_its_jobs_within_the_permit_and_runs_again_after_a_read() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("swarm_worker=debug")
        .with_test_writer()
        .try_init();
    let (sim, client, uid) = sim_with(Some(config(1, &["a", "b"], &[]))).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let proxy = Proxy::start(sim.addr()).await;
    let through_proxy = Client::try_from(Config::new(proxy.url.parse().unwrap())).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    app.stop_permits.add_permits(100);
    let permit = Duration::from_secs(4);
    let worker = worker_of(&uid, through_proxy)
        .report(&report)
        .permit(permit)
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let health = worker.health_addr();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    let acked = acknowledged(&leases, 1).await;
    assert_eq!(app.calls(), strings(&["start a", "start b"]));
    assert_eq!(readyz(health).await, 200);

    // Cut off: no read gets through, so within the permit of the last one every job stops;
    // readiness goes first, at three fifths of it.
    let cut = Instant::now();
    proxy.cut();
    eventually("not ready", async || {
        (readyz(health).await == 503).then_some(())
    })
    .await;
    let unready_after = cut.elapsed();
    eventually("every job stopped", async || {
        let calls = app.calls();
        (calls.contains(&"stopped a".to_string()) && calls.contains(&"stopped b".to_string()))
            .then_some(())
    })
    .await;
    let stopped_after = cut.elapsed();
    assert!(
        unready_after <= permit * 3 / 5 + Duration::from_millis(300),
        "not ready {unready_after:?} after the cut"
    );
    assert!(
        stopped_after <= permit + Duration::from_millis(300),
        "stopped {stopped_after:?} after the cut"
    );
    assert_eq!(reported(&report).last(), Some(&(Some(1), vec![])));

    // Meanwhile the operator moves b away: the worker must not run b again.
    write_config(&config_maps, config(2, &["a", "c"], &["b"])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = app.calls();
    assert_eq!(calls.len(), 6, "nothing starts without a read: {calls:?}");

    // Back: a read shows the new entry, which runs and is acknowledged.
    proxy.restore();
    let renewed = acknowledged(&leases, 2).await;
    let restarted: Vec<String> = app.calls()[6..].to_vec();
    assert_eq!(restarted, strings(&["start a", "start c"]));
    assert_eq!(
        reported(&report).last(),
        Some(&(Some(2), strings(&["a", "c"])))
    );
    assert_ne!(
        renewed.metadata.resource_version,
        acked.metadata.resource_version
    );
    eventually("ready again", async || {
        (readyz(health).await == 200).then_some(())
    })
    .await;
    sim.shutdown().await;
}

/// At rest a worker reads every half permit and writes nothing; each new version costs one
/// Lease write, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_rest_a_worker_reads_and_writes_nothing_and_each_version_costs_one_lease_write() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a"], &[]))).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.jsonl");
    let app = Recorder::new();
    app.stop_permits.add_permits(100);
    let worker = worker_of(&uid, client.clone())
        .report(&report)
        .permit(Duration::from_secs(2))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    let acked = acknowledged(&leases, 1).await;
    // The write at start and the acknowledgement, or one write if it carried both.
    let writes = count(&sim, &["POST", "PUT"], "/leases").await;
    assert!((1..=2).contains(&writes), "{writes} Lease writes at start");

    // Three read intervals at rest: reads, permit extensions, no write.
    let reads_before = count(&sim, &["GET"], "/configmaps/").await;
    let lines_before = report_lines(&report).len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reads = count(&sim, &["GET"], "/configmaps/").await - reads_before;
    assert!((2..=5).contains(&reads), "{reads} fence reads in 3 s");
    assert_eq!(
        count(&sim, &["POST", "PUT"], "/leases").await,
        writes,
        "no Lease write at rest"
    );
    let rest = leases.get(POD).await.unwrap();
    assert_eq!(
        rest.metadata.resource_version,
        acked.metadata.resource_version
    );
    assert!(
        report_lines(&report).len() >= lines_before + 2,
        "each read extends the permit, and the report says until when"
    );
    assert_eq!(reported(&report).last(), Some(&(Some(1), strings(&["a"]))));

    let written = Instant::now();
    write_config(&config_maps, config(2, &["a", "b"], &[])).await;
    acknowledged(&leases, 2).await;
    assert!(
        written.elapsed() < Duration::from_millis(900),
        "acknowledged {:?} after the write: the watch brings the read forward",
        written.elapsed()
    );
    write_config(&config_maps, config(3, &["b"], &[])).await;
    acknowledged(&leases, 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        count(&sim, &["POST", "PUT"], "/leases").await,
        writes + 2,
        "one Lease write per version"
    );
    sim.shutdown().await;
}

/// A watch event proves nothing: the job it brings starts only once a fence read shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_granted_through_the_watch_starts_only_once_a_fence_read_shows_it() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a"], &[]))).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let (reads, gate) = watch::channel(Reads::Answer);
    let app = Recorder::new();
    // The default permit: a read every 15 s, so a read within the test's second is the watch's.
    let worker = worker_of(&uid, gated_client(&sim, gate))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    acknowledged(&leases, 1).await;
    let reads_before = count(&sim, &["GET"], "/configmaps/").await;

    reads.send_replace(Reads::Hold);
    write_config(&config_maps, config(2, &["a", "c"], &[])).await;
    eventually("a fence read sent on the watch event", async || {
        (count(&sim, &["GET"], "/configmaps/").await > reads_before + 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        app.calls(),
        strings(&["start a"]),
        "c waits for the read's answer"
    );
    assert_eq!(acked_version(&leases.get(POD).await.unwrap()), Some(1));

    reads.send_replace(Reads::Answer);
    acknowledged(&leases, 2).await;
    assert_eq!(app.calls(), strings(&["start a", "start c"]));
    sim.shutdown().await;
}

/// Thousands of workers in one process (the operator benchmark's load driver) cannot each
/// hold a port: without its health server a worker binds nothing, even an address in use, and
/// still reads and acknowledges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_a_health_server_binds_nothing_and_still_acknowledges() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a"], &[]))).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let app = Recorder::new();
    let worker = worker_of(&uid, client.clone())
        .health_addr(addr)
        .without_health_server()
        .shutdown_on(std::future::pending())
        .build()
        .await
        .expect("an address in use is not bound");
    assert_eq!(worker.health_addr(), addr);
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    acknowledged(&leases, 1).await;
    assert_eq!(app.calls(), ["start a"]);
    sim.shutdown().await;
}

/// A worker that starts before its pool's ConfigMap exists runs nothing, answers ready, and runs
/// its entry as soon as the ConfigMap comes (the watch's event brings a read), not at its next
/// scheduled read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_its_config_runs_it_as_soon_as_it_comes() {
    let (sim, client, uid) = sim_with(None).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let app = Recorder::new();
    // Reads every 30 s: a start that waited for the next scheduled read would take that long.
    let worker = worker_of(&uid, client.clone())
        .permit(Duration::from_secs(60))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let health = worker.health_addr();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    eventually("the Lease written at start", async || {
        leases.get(POD).await.ok()
    })
    .await;
    eventually("ready", async || {
        (readyz(health).await == 200).then_some(())
    })
    .await;
    assert!(app.calls().is_empty(), "no config, no job");

    let created = Instant::now();
    config_maps
        .create(&PostParams::default(), &config(1, &["a"], &[]))
        .await
        .unwrap();
    acknowledged(&leases, 1).await;
    assert!(
        created.elapsed() < Duration::from_secs(5),
        "{:?}",
        created.elapsed()
    );
    assert_eq!(app.calls(), strings(&["start a"]));
    sim.shutdown().await;
}

/// After a 410 a worker watches from the object as it is: a watch from the resourceVersion of
/// its last read would be older than the history too, and expire at once, over and over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_its_watch_expires_a_worker_watches_from_the_object_as_it_is() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a"], &[]))).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let proxy = Proxy::start(sim.addr()).await;
    let through_proxy = Client::try_from(Config::new(proxy.url.parse().unwrap())).unwrap();
    let app = Recorder::new();
    app.stop_permits.add_permits(100);
    let worker = worker_of(&uid, through_proxy)
        .permit(Duration::from_secs(60))
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    acknowledged(&leases, 1).await;

    // The history no longer reaches the ConfigMap's last change; the watch breaks.
    let before = config_map_watches(&sim).await;
    sim.compact();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.restore();
    tokio::time::sleep(Duration::from_secs(3)).await;
    write_config(&config_maps, config(2, &["b"], &[])).await;
    let written = Instant::now();
    acknowledged(&leases, 2).await;
    assert!(
        written.elapsed() < Duration::from_secs(5),
        "the watch works again: {:?}",
        written.elapsed()
    );
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

/// An API server that turns every request away (429) for a while: the worker's fence reads and
/// Lease writes share one hold, so after the first answers it sends one request at a time, each
/// a quarter permit or more after the one before, and it runs its jobs once it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_turned_away_holds_all_its_requests_together_and_runs_once_served() {
    let (sim, client, uid) = sim_with(Some(config(1, &["a"], &[]))).await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let (shedding, shedding_rx) = watch::channel(true);
    let shed = Shed::default();
    let app = Recorder::new();
    let permit = Duration::from_secs(2);
    let worker = worker_of(&uid, shedding_client(&sim, shedding_rx, shed.clone()))
        .permit(permit)
        .shutdown_on(std::future::pending())
        .build()
        .await
        .unwrap();
    let _run = AbortOnDrop(tokio::spawn(worker.run(app.clone())));
    tokio::time::sleep(Duration::from_secs(8)).await;
    shedding.send_replace(false);
    acknowledged(&leases, 1).await;
    assert_eq!(app.calls(), strings(&["start a"]));

    let sent = shed.lock().unwrap().clone();
    let kinds = |from: usize| -> BTreeMap<bool, usize> {
        let mut kinds = BTreeMap::new();
        for (_, what) in &sent[from..] {
            *kinds.entry(what.contains("/leases")).or_default() += 1;
        }
        kinds
    };
    // The first fence read and the Lease write go together, before any answer.
    assert_eq!(kinds(0).len(), 2, "{sent:?}");
    let first_hold = sent.iter().skip(2).map(|(at, _)| *at);
    let sends: Vec<Instant> = sent
        .iter()
        .take(2)
        .map(|(at, _)| *at)
        .chain(first_hold)
        .collect();
    for pair in sends[1..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= permit / 4 - Duration::from_millis(50),
            "two requests {gap:?} apart while turned away: {sent:?}"
        );
    }
    // One per hold of a quarter to half the permit: 8 s holds 16 at most.
    assert!(
        (4..=2 + 16).contains(&sent.len()),
        "{} requests: {sent:?}",
        sent.len()
    );
    sim.shutdown().await;
}
