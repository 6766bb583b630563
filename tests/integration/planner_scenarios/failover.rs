//! Under `Acknowledge`, workers out of the pool (NotReady past the grace, on a node whose Lease
//! is silent): their jobs are revoked, and granted elsewhere once they acknowledge or their
//! revoke wait is over, never before.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use swarm_operator::api::conditions::reason;
use swarm_operator::api::crd::{Phase, UnavailableReason};
use swarm_operator::state::revokes::RevokeLog;
use swarm_protocol::config::WorkerConfig;

use super::acknowledge::{acknowledging, in_transit_from};
use super::world::{World, loads, node, set_ready, transit_jobs};
use crate::fixtures::ready_status;

/// The jobs `pod` holds in `config`.
fn jobs_of(config: &WorkerConfig, pod: &str) -> BTreeSet<String> {
    let workload = config.workload(pod);
    workload
        .map(|w| w.jobs.iter().cloned().collect())
        .unwrap_or_default()
}

/// Marks worker `ordinal`'s pod NotReady (Ready) from now, as the kubelet writes it.
fn ready_from_now(world: &mut World, ordinal: usize, ready: bool) {
    let now = world.now;
    set_ready(world.pod_mut(ordinal), ready, now);
}

/// Every job of `jobs` is held by exactly one worker of `config`, none of them `not`.
fn held_once_elsewhere(config: &WorkerConfig, jobs: &BTreeSet<String>, not: &str) {
    for job in jobs {
        let holders: Vec<&str> = config
            .workloads()
            .filter(|(_, w)| w.jobs.contains(job))
            .map(|(pod, _)| pod)
            .collect();
        assert_eq!(holders.len(), 1, "{job} on one worker: {holders:?}");
        assert_ne!(holders[0], not, "{job} moved");
    }
}

/// The revoke wait of the workers' default permit and the pool's default grace.
fn revoke_wait() -> SignedDuration {
    let wait = swarm_protocol::fence::revoke_wait(
        swarm_protocol::fence::DEFAULT_PERMIT,
        Duration::from_secs(2),
    );
    SignedDuration::try_from(wait).unwrap()
}

#[test]
fn under_acknowledge_a_worker_not_ready_past_the_grace_loses_its_jobs_after_the_revoke_wait() {
    let mut world = acknowledging(3);
    let before = world.config();
    let held = jobs_of(&before, "swarm-worker-1");
    ready_from_now(&mut world, 1, false);
    world.reconcile();
    assert_eq!(world.config(), before, "within rollout.leaseGraceSeconds");

    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    let revoked = world.config();
    assert!(jobs_of(&revoked, "swarm-worker-1").is_empty());
    assert_eq!(
        in_transit_from(&revoked, "swarm-worker-1"),
        held,
        "revoked, not granted: its last read's permit may still hold"
    );
    let status = world.pool.status.clone().unwrap();
    let unavailable: Vec<_> = status
        .unavailable_workers
        .iter()
        .map(|w| (&w.pod[..], w.reason))
        .collect();
    assert_eq!(
        unavailable,
        [("swarm-worker-1", UnavailableReason::NotReady)]
    );
    assert!(world.all_reasons.contains(&reason::WORKER_UNAVAILABLE));
    assert!(world.deleted.is_empty(), "failover deletes no pod");

    // Its jobs go to the others once the wait is over; theirs stay where they are.
    world.now += revoke_wait() + SignedDuration::from_secs(1);
    world.reconcile();
    let after = world.config();
    held_once_elsewhere(&after, &held, "swarm-worker-1");
    for pod in ["swarm-worker-0", "swarm-worker-2"] {
        assert!(
            jobs_of(&before, pod).is_subset(&jobs_of(&after, pod)),
            "{pod} keeps its jobs"
        );
    }

    // Ready again: a member again, and it gets a share back once the others let go.
    ready_from_now(&mut world, 1, true);
    for _ in 0..4 {
        world.ack_all();
        world.reconcile();
    }
    let back = world.config();
    assert_eq!(loads(&back), [9, 9, 9]);
    assert!(transit_jobs(&back).is_empty());
    let status = world.pool.status.clone().unwrap();
    assert!(status.unavailable_workers.is_empty());
    assert!(world.all_reasons.contains(&reason::WORKER_AVAILABLE));
    assert_eq!(status.phase, Some(Phase::Balanced));
}

#[test]
fn under_acknowledge_no_worker_is_taken_out_while_every_nodes_lease_is_behind_at_once() {
    let mut world = acknowledging(3);
    let before = world.config();
    world.node_leases = (0..3).map(|o| (node(o), world.now)).collect();
    // A minute without a renewal the operator sees, of any node: its view is behind, not every
    // kubelet gone.
    world.now += SignedDuration::from_secs(60);
    world.reconcile();
    let status = world.pool.status.clone().unwrap();
    assert!(status.unavailable_workers.is_empty(), "{status:?}");
    assert_eq!(world.config(), before, "nothing revoked");
    assert!(world.deleted.is_empty());
}

#[test]
fn under_acknowledge_a_worker_on_a_node_whose_lease_is_silent_is_taken_out_of_the_pool() {
    let mut world = acknowledging(3);
    let held = jobs_of(&world.config(), "swarm-worker-2");
    let renewed_at = world.now;
    world.node_leases = (0..3).map(|o| (node(o), renewed_at)).collect();
    world.now += SignedDuration::from_secs(19);
    world.node_leases[0].1 = world.now;
    world.node_leases[1].1 = world.now;
    world.reconcile();
    assert!(
        world
            .pool
            .status
            .clone()
            .unwrap()
            .unavailable_workers
            .is_empty(),
        "19 s: not yet"
    );

    // node-2's kubelet has not renewed for 20 s while the others did: its worker is out, its
    // jobs revoked.
    world.now += SignedDuration::from_secs(1);
    world.node_leases[0].1 = world.now;
    world.node_leases[1].1 = world.now;
    world.reconcile();
    let revoked = world.config();
    assert_eq!(in_transit_from(&revoked, "swarm-worker-2"), held);
    let status = world.pool.status.clone().unwrap();
    let out = &status.unavailable_workers[0];
    assert_eq!(
        (&out.pod[..], out.reason),
        ("swarm-worker-2", UnavailableReason::NodeLeaseSilent)
    );
    assert_eq!(out.since.as_ref().map(|t| t.0), Some(renewed_at));

    // The node renews again: the worker is a member again.
    world.node_leases[2].1 = world.now;
    world.reconcile();
    assert!(
        world
            .pool
            .status
            .clone()
            .unwrap()
            .unavailable_workers
            .is_empty()
    );
}

/// A pool of 3 acknowledging workers whose swarm-worker-1 has been NotReady for the grace: its
/// jobs revoked (in transit from it). Returns the world, those jobs and the revoking config.
fn revoked_from_a_not_ready_worker() -> (World, BTreeSet<String>, WorkerConfig) {
    let mut world = acknowledging(3);
    let held = jobs_of(&world.config(), "swarm-worker-1");
    ready_from_now(&mut world, 1, false);
    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    let revoked = world.config();
    assert_eq!(in_transit_from(&revoked, "swarm-worker-1"), held);
    (world, held, revoked)
}

#[test]
fn under_acknowledge_a_revoke_is_freed_by_the_holders_acknowledgement_at_once() {
    let (mut world, held, revoked) = revoked_from_a_not_ready_worker();

    // Still reading though the kubelet says NotReady: it saw the revoke and acknowledges it.
    world.ack(1, revoked.version);
    world.reconcile();
    held_once_elsewhere(&world.config(), &held, "swarm-worker-1");
}

#[test]
fn under_acknowledge_a_revoke_is_never_granted_before_the_wait_even_across_operator_restarts() {
    let (mut world, held, revoked) = revoked_from_a_not_ready_worker();

    // Just short of the wait (33.2 s): nothing is granted; an older acknowledgement frees
    // nothing either.
    world.ack(1, revoked.version - 1);
    world.now += SignedDuration::from_secs(33);
    world.reconcile();
    assert_eq!(in_transit_from(&world.config(), "swarm-worker-1"), held);

    // The operator restarts 20 s into a wait: its new process knows nothing, so the wait
    // starts again when it first sees the revoke.
    let mut world = acknowledging(3);
    ready_from_now(&mut world, 1, false);
    world.now += SignedDuration::from_secs(2);
    world.reconcile();
    world.now += SignedDuration::from_secs(20);
    world.revokes = RevokeLog::default();
    world.reconcile();
    world.now += SignedDuration::from_secs(20);
    world.reconcile();
    assert_eq!(
        in_transit_from(&world.config(), "swarm-worker-1"),
        held,
        "40 s after the revoke, 20 s after the restart"
    );
    world.now += SignedDuration::from_secs(14);
    world.reconcile();
    held_once_elsewhere(&world.config(), &held, "swarm-worker-1");
}

#[test]
fn under_acknowledge_a_not_ready_pod_whose_container_just_restarted_keeps_its_jobs() {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus};
    let mut world = acknowledging(3);
    let before = world.config();
    // The kubelet restarted the crashed worker in its pod: NotReady until its first read.
    let now = world.now;
    let status = world.pod_mut(1).status.as_mut().unwrap();
    *status = ready_status(false, now);
    status.container_statuses = Some(vec![ContainerStatus {
        name: "worker".into(),
        restart_count: 1,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(now)),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }]);
    world.now += SignedDuration::from_secs(14);
    world.reconcile();
    assert_eq!(
        world.config(),
        before,
        "within 15 s of its start it counts as starting"
    );

    world.now += SignedDuration::from_secs(1);
    world.reconcile();
    assert!(
        jobs_of(&world.config(), "swarm-worker-1").is_empty(),
        "then it is out"
    );
}
