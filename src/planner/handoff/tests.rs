//! The `Exclusive` and `Overlap` handoffs on small configs, and the published jobs they read.

use super::*;
use crate::state::records::Holder;
use swarm_assign::{Assignment, pod_name};

const STS: &str = "w";
static NO_PODS: BTreeSet<String> = BTreeSet::new();

fn jobs(names: &[&str]) -> Vec<String> {
    names.iter().map(|j| j.to_string()).collect()
}

fn config(workers: &[&[&str]], transit: &[(&str, &[&str])]) -> WorkerConfig {
    let workloads = workers.iter().enumerate().map(|(i, held)| {
        let workload = swarm_protocol::config::Workload {
            version: 1,
            jobs: jobs(held),
        };
        (pod_name(STS, i), workload)
    });
    WorkerConfig::new(1, workloads)
        .with_transit(transit.iter().map(|(pod, j)| (pod.to_string(), jobs(j))))
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).unwrap()
}

struct Case {
    spec: Vec<String>,
    target: Assignment,
    previous: WorkerConfig,
    holders: Holders,
    pods: PodIndex,
    live: bool,
}

impl Case {
    fn run(&self) -> Owned {
        owned(hand_off(&HandoffInput {
            mode: Handoff::Exclusive,
            roster: &Roster::statefulset(STS, self.target.replicas()),
            jobs: &self.spec,
            target: &Target::of(&self.spec, &self.target),
            previous: Some(&self.previous),
            holders: Some(&self.holders),
            pods: &self.pods,
            revokes: None,
            terminating: &NO_PODS,
            unready: &NO_PODS,
            pods_are_live: self.live,
            now: at(10),
        }))
    }
}

/// An outcome with the jobs held copied, so that it outlives its input.
struct Owned {
    held: Vec<Vec<String>>,
    rest: HandoffOutcome<'static>,
}

impl std::ops::Deref for Owned {
    type Target = HandoffOutcome<'static>;

    fn deref(&self) -> &Self::Target {
        &self.rest
    }
}

fn owned(out: HandoffOutcome) -> Owned {
    let (held, rest) = out.take_held();
    let held = held
        .into_iter()
        .map(|jobs| jobs.into_iter().map(str::to_owned).collect())
        .collect();
    Owned { held, rest }
}

fn holders(entries: &[(&str, &str)]) -> Holders {
    Holders {
        entries: entries
            .iter()
            .map(|(pod, uid)| {
                let holder = Holder {
                    uid: uid.to_string(),
                    revoked_at: at(0),
                    gone: false,
                    version: None,
                };
                (pod.to_string(), holder)
            })
            .collect(),
    }
}

#[test]
fn a_moving_job_is_revoked_and_its_old_worker_becomes_an_unresolved_holder() {
    let case = Case {
        spec: jobs(&["a", "b"]),
        target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
        previous: config(&[&["a", "b"], &[]], &[]),
        holders: Holders::default(),
        pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
        live: false,
    };
    let out = case.run();
    assert_eq!(out.held, vec![jobs(&["a"]), vec![]]);
    assert_eq!(out.transit["w-0"], jobs(&["b"]));
    assert_eq!(out.holders.entries["w-0"].uid, "");
    assert!(out.needs_live_pods, "the holder must be resolved live");
    assert_eq!((out.revoked, out.jobs_in_transit), (1, 1));
    assert!(out.awaiting_grants.contains("w-1"));
}

#[test]
fn a_job_is_granted_only_once_a_live_list_shows_its_holder_gone() {
    let mut case = Case {
        spec: jobs(&["a", "b"]),
        target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
        previous: config(&[&["a"], &[]], &[("w-0", &["b"])]),
        holders: holders(&[("w-0", "u0")]),
        pods: PodIndex::new([("w-0", "u0-new"), ("w-1", "u1")]),
        live: false,
    };
    let cached = case.run();
    assert!(cached.needs_live_pods, "the cache alone never grants");
    assert!(cached.held[1].is_empty());

    case.live = true;
    let out = case.run();
    assert_eq!(out.held[1], jobs(&["b"]));
    assert!(out.transit.is_empty() && out.holders.entries.is_empty());
    assert_eq!(out.granted.len(), 1);
    assert_eq!(out.granted[0].after_seconds, 10.0);

    case.pods = PodIndex::new([("w-0", "u0"), ("w-1", "u1")]);
    let still_there = case.run();
    assert!(
        still_there.held[1].is_empty(),
        "a terminating holder is live"
    );
}

#[test]
fn a_holder_without_a_pod_at_resolution_frees_its_jobs() {
    let case = Case {
        spec: jobs(&["a"]),
        target: Assignment::new(vec![jobs(&["a"])]),
        previous: config(&[&[]], &[("w-3", &["a"])]),
        holders: holders(&[("w-3", "")]),
        pods: PodIndex::new([("w-0", "u0")]),
        live: true,
    };
    assert_eq!(case.run().held[0], jobs(&["a"]));
}

#[test]
fn a_job_going_back_to_its_own_holder_is_granted_at_once() {
    let case = Case {
        spec: jobs(&["a"]),
        target: Assignment::new(vec![jobs(&["a"])]),
        previous: config(&[&[]], &[("w-0", &["a"])]),
        holders: holders(&[("w-0", "u0")]),
        pods: PodIndex::new([("w-0", "u0")]),
        live: true,
    };
    assert_eq!(
        case.run().held[0],
        jobs(&["a"]),
        "one instance per pod name"
    );
}

#[test]
fn a_worker_gets_its_jobs_in_one_grant_once_all_are_free() {
    let mut case = Case {
        spec: jobs(&["a", "b", "c"]),
        target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"]), jobs(&["c"])]),
        previous: config(&[&["a"], &[], &[]], &[("w-3", &["b"]), ("w-4", &["c"])]),
        holders: holders(&[("w-3", "u3"), ("w-4", "u4")]),
        pods: PodIndex::new([("w-4", "u4")]),
        live: true,
    };
    case.target = Assignment::new(vec![jobs(&["a"]), jobs(&["b", "c"]), vec![]]);
    let out = case.run();
    assert!(
        out.held[1].is_empty(),
        "b is free but c is not: w-1 waits for both"
    );
    assert_eq!(out.jobs_in_transit, 2);
    assert!(out.holders.entries["w-3"].gone);

    // Once w-4 is gone too, both are granted in one step.
    let mut next = Case {
        previous: config(&[&["a"], &[], &[]], &[("w-3", &["b"]), ("w-4", &["c"])]),
        holders: out.holders.clone(),
        pods: PodIndex::new([]),
        ..case
    };
    next.live = true;
    let out = next.run();
    assert_eq!(out.held[1], jobs(&["b", "c"]));
    assert_eq!(out.granted.len(), 2);
}

#[test]
fn a_removed_job_waits_for_its_holder_if_it_comes_back() {
    // Removed from the spec: it is in transit from w-0, unseen by the status.
    let removed = Case {
        spec: jobs(&["a"]),
        target: Assignment::new(vec![jobs(&["a"]), vec![]]),
        previous: config(&[&["a", "b"], &[]], &[]),
        holders: Holders::default(),
        pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
        live: true,
    };
    let out = removed.run();
    assert_eq!(out.transit["w-0"], jobs(&["b"]));
    assert_eq!(out.jobs_in_transit, 0);

    // Back in the spec before w-0 restarted: not granted to w-1 while w-0 may run it.
    let back = Case {
        spec: jobs(&["a", "b"]),
        target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
        previous: config(&[&["a"], &[]], &[("w-0", &["b"])]),
        holders: out.holders.clone(),
        pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
        live: true,
    };
    let out = back.run();
    assert!(out.held[1].is_empty());
    assert_eq!(out.jobs_in_transit, 1);
}

#[test]
fn a_receiver_that_still_runs_a_removed_job_is_not_a_holder_to_refresh_first() {
    // w-1 runs the removed job c and receives b from w-0: it restarts once, after the grant.
    let case = Case {
        spec: jobs(&["a", "b"]),
        target: Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
        previous: config(&[&["a", "b"], &["c"]], &[]),
        holders: Holders::default(),
        pods: PodIndex::new([("w-0", "u0"), ("w-1", "u1")]),
        live: true,
    };
    let out = case.run();
    assert_eq!(out.transit["w-1"], jobs(&["c"]));
    assert!(
        out.holders.entries.contains_key("w-1"),
        "c waits for w-1's pod"
    );
    assert_eq!(out.holder_pods, BTreeSet::from(["w-0".to_owned()]));
    assert!(out.awaiting_grants.contains("w-1"), "w-1 is held back");
}

/// The config after "a" (slot 0) held x and had z revoked, and "b" holds y.
fn a_held_x_and_z_b_holds_y() -> WorkerConfig {
    WorkerConfig::new(
        1,
        [("a", &["x"][..]), ("b", &["y"][..])].map(|(pod, held)| {
            let workload = swarm_protocol::config::Workload {
                version: 1,
                jobs: jobs(held),
            };
            (pod.to_owned(), workload)
        }),
    )
    .with_transit([("a".to_owned(), jobs(&["z"]))])
}

#[test]
fn jobs_for_a_free_slot_wait_in_transit_until_a_pod_takes_it() {
    // Slot 0's pod "a" terminated; no pod has taken the slot yet.
    let roster = Roster::new(vec![None, Some("b".into())], vec![]);
    let spec = jobs(&["x", "y", "z"]);
    let target = Target::of(
        &spec,
        &Assignment::new(vec![jobs(&["x", "z"]), jobs(&["y"])]),
    );
    let previous = a_held_x_and_z_b_holds_y();
    let input = |holders: &Holders, pods: &PodIndex| {
        owned(hand_off(&HandoffInput {
            mode: Handoff::Exclusive,
            roster: &roster,
            jobs: &spec,
            target: &target,
            previous: Some(&previous),
            holders: Some(holders),
            pods,
            revokes: None,
            terminating: &NO_PODS,
            unready: &NO_PODS,
            pods_are_live: true,
            now: at(10),
        }))
    };
    // "a" is gone: nothing blocks x and z, but the slot has no pod to publish them under.
    let out = input(&holders(&[("a", "ua")]), &PodIndex::default());
    assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
    assert_eq!(out.transit["a"], jobs(&["x", "z"]), "the slot keeps them");
    assert_eq!(out.jobs_in_transit, 2);
    assert!(out.granted.is_empty());
}

#[test]
fn overlap_publishes_nothing_for_a_free_slot() {
    let out = owned(hand_off(&HandoffInput {
        mode: Handoff::Overlap,
        roster: &Roster::new(vec![None, Some("b".into())], vec!["c".into()]),
        jobs: &jobs(&["x", "y"]),
        target: &Target::of(
            &jobs(&["x", "y"]),
            &Assignment::new(vec![jobs(&["x"]), jobs(&["y"])]),
        ),
        previous: None,
        holders: None,
        pods: &PodIndex::default(),
        revokes: None,
        terminating: &NO_PODS,
        unready: &NO_PODS,
        pods_are_live: false,
        now: at(0),
    }));
    assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
    assert!(out.transit.is_empty(), "x was never held: nothing to keep");
}

#[test]
fn overlap_keeps_a_free_slots_jobs_in_transit_by_the_pod_that_held_them() {
    // "a" held x and z and is gone; z was already waiting from an earlier plan.
    let previous = a_held_x_and_z_b_holds_y();
    let out = owned(hand_off(&HandoffInput {
        mode: Handoff::Overlap,
        roster: &Roster::new(vec![None, Some("b".into())], Vec::new()),
        jobs: &jobs(&["x", "y", "z"]),
        target: &Target::of(
            &jobs(&["x", "y", "z"]),
            &Assignment::new(vec![jobs(&["x", "z"]), jobs(&["y"])]),
        ),
        previous: Some(&previous),
        holders: None,
        pods: &PodIndex::default(),
        revokes: None,
        terminating: &NO_PODS,
        unready: &NO_PODS,
        pods_are_live: false,
        now: at(0),
    }));
    assert_eq!(out.held, vec![vec![], jobs(&["y"])]);
    assert_eq!(out.transit["a"], jobs(&["x", "z"]), "the slot keeps them");
    assert_eq!(out.jobs_in_transit, 2);
    assert!(out.holders.entries().is_empty() && !out.needs_live_pods);
}

#[test]
fn overlap_publishes_the_target_at_once() {
    let out = owned(hand_off(&HandoffInput {
        mode: Handoff::Overlap,
        roster: &Roster::statefulset(STS, 2),
        jobs: &jobs(&["a", "b"]),
        target: &Target::of(
            &jobs(&["a", "b"]),
            &Assignment::new(vec![jobs(&["a"]), jobs(&["b"])]),
        ),
        previous: Some(&config(&[&["a", "b"], &[]], &[])),
        holders: None,
        pods: &PodIndex::default(),
        revokes: None,
        terminating: &NO_PODS,
        unready: &NO_PODS,
        pods_are_live: false,
        now: at(0),
    }));
    assert_eq!(out.held, vec![jobs(&["a"]), jobs(&["b"])]);
    assert!(out.transit.is_empty() && !out.needs_live_pods);
}

#[test]
fn published_jobs_are_found_by_position_with_every_pod_that_lists_them() {
    let spec = jobs(&["a", "b", "c"]);
    // w-0 lists a and b; w-1 lists a again (a hand edit), b twice and a job that left the spec.
    let previous = config(&[&["a", "b"], &["gone", "a", "b", "b"]], &[]);
    let positions = Positions::new(&spec);
    let published = Published::of(Some(&previous), &positions);
    let (w0, w1) = (pod_name(STS, 0), pod_name(STS, 1));
    assert_eq!(published.get(0, "a").as_slice(), [w0.as_str(), w1.as_str()]);
    assert_eq!(published.get(1, "b").as_slice(), [w0.as_str(), w1.as_str()]);
    assert!(published.get(2, "c").is_empty());
    let left: Vec<(&str, Vec<&str>)> = published
        .others
        .iter()
        .filter(|(job, _)| !positions.contains(job))
        .map(|(job, pods)| (job, pods.collect()))
        .collect();
    assert_eq!(left, [("gone", vec![w1.as_str()])]);
    assert!(Published::of(None, &positions).get(0, "a").is_empty());
}
