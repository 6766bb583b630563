//! Property tests of the slot table (`SlotTable::rebind`): the positions a Deployment pool's
//! pods hold, and the guarantees of `Sticky` carried over from ordinals to slots.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use swarm_assign::{Assignment, Slot, SlotTable, Strategy as Assign, assign};
use swarm_protocol::config::{WorkerConfig, Workload};

/// Pod names a table and the candidates draw from.
const PODS: usize = 16;

fn pod(i: usize) -> String {
    format!("web-5d8f7-p{i:02}")
}

/// A table as a previous rebind leaves it: distinct pods holding the slots, some slots never
/// taken, some with predecessors.
#[derive(Clone, Debug)]
struct Situation {
    table: SlotTable,
    replicas: usize,
    /// Live, non-terminating pods in order of preference.
    candidates: Vec<String>,
}

fn situation() -> impl Strategy<Value = Situation> {
    (
        proptest::collection::vec((any::<bool>(), any::<bool>()), 0..9),
        0..10usize,
        proptest::collection::vec(any::<bool>(), PODS),
        any::<u64>(),
    )
        .prop_map(|(shape, replicas, live, seed)| {
            // Heads are p00.., predecessors p08..; each name used once.
            let slots = shape
                .iter()
                .enumerate()
                .map(|(i, &(taken, inherited))| {
                    let mut pods = Vec::new();
                    if taken && inherited {
                        pods.push(pod(PODS / 2 + i % (PODS / 2)));
                    }
                    if taken {
                        pods.push(pod(i));
                    }
                    Slot { pods }
                })
                .collect();
            let mut candidates: Vec<String> = (0..PODS).filter(|&i| live[i]).map(pod).collect();
            shuffle(&mut candidates, seed);
            Situation {
                table: SlotTable::new(slots),
                replicas,
                candidates,
            }
        })
}

fn refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

fn heads(table: &SlotTable) -> Vec<Option<&str>> {
    table.slots().iter().map(Slot::pod).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(512)))]

    /// Every candidate holds exactly one slot or is idle; no pod heads two slots; idle pods wait
    /// only while no slot is free.
    #[test]
    fn every_candidate_holds_one_slot_or_waits_for_one(s in situation()) {
        let rebound = s.table.rebind(s.replicas, &refs(&s.candidates));
        let live: BTreeSet<&str> = s.candidates.iter().map(String::as_str).collect();
        let occupied: Vec<&str> = heads(&rebound.table)
            .into_iter()
            .flatten()
            .filter(|p| live.contains(p))
            .collect();
        let unique: BTreeSet<&str> = occupied.iter().copied().collect();
        prop_assert_eq!(unique.len(), occupied.len(), "a pod holds two slots");
        let idle: BTreeSet<&str> = rebound.idle.iter().map(String::as_str).collect();
        prop_assert!(unique.is_disjoint(&idle));
        let all: BTreeSet<&str> = unique.union(&idle).copied().collect();
        prop_assert_eq!(all, live.clone());
        if !rebound.idle.is_empty() {
            prop_assert_eq!(occupied.len(), rebound.table.len(), "idle pods with a free slot");
        }
    }

    /// A table edited by hand so that one pod heads several slots still gives each pod one slot
    /// at most: the pod keeps its first, and the others are free for the pods that wait.
    #[test]
    fn a_pod_heading_two_slots_in_an_edited_table_keeps_only_the_first(
        s in situation(),
        from in any::<prop::sample::Index>(),
        to in any::<prop::sample::Index>(),
    ) {
        prop_assume!(!s.table.is_empty());
        let mut slots = s.table.slots().to_vec();
        let (from, to) = (from.index(slots.len()), to.index(slots.len()));
        prop_assume!(from != to);
        let Some(head) = slots[from].pod().map(str::to_owned) else {
            return Ok(());
        };
        slots[to].pods.push(head.clone());
        let first = slots[from.min(to)].clone();
        let rebound = SlotTable::new(slots).rebind(s.replicas, &refs(&s.candidates));
        let heads: Vec<&str> = heads(&rebound.table).into_iter().flatten().collect();
        let unique: BTreeSet<&str> = heads.iter().copied().collect();
        prop_assert_eq!(unique.len(), heads.len(), "a pod heads two slots: {:?}", heads);
        if s.candidates.contains(&head) {
            let kept = rebound.table.slot_of(&head).expect("a live pod keeps a slot");
            prop_assert_eq!(&rebound.table.slots()[kept], &first, "it keeps its first slot");
        }
    }

    /// The table has `replicas` slots; more only while every slot is held by a live pod (a
    /// scale-down waits for the ReplicaSet to delete pods rather than evicting one).
    #[test]
    fn the_table_has_replicas_slots_unless_live_pods_hold_more(s in situation()) {
        let rebound = s.table.rebind(s.replicas, &refs(&s.candidates));
        let live: BTreeSet<&str> = s.candidates.iter().map(String::as_str).collect();
        let free = heads(&rebound.table)
            .into_iter()
            .filter(|p| !p.is_some_and(|p| live.contains(p)))
            .count();
        if rebound.table.len() > s.replicas {
            prop_assert_eq!(free, 0);
        } else {
            prop_assert_eq!(rebound.table.len(), s.replicas);
        }
        prop_assert_eq!(
            rebound.table.len() + rebound.removed.len(),
            s.table.len().max(s.replicas),
            "slots are only added up to replicas or removed"
        );
        for slot in &rebound.removed {
            prop_assert!(!slot.pod().is_some_and(|p| live.contains(p)), "removed an occupied slot");
        }
    }

    /// A live pod that held a slot keeps it, with its predecessors, in the same relative order;
    /// a free slot a pod takes remembers the pods before it.
    #[test]
    fn slots_are_sticky_and_remember_their_pods(s in situation()) {
        let rebound = s.table.rebind(s.replicas, &refs(&s.candidates));
        let live: BTreeSet<&str> = s.candidates.iter().map(String::as_str).collect();
        let kept: Vec<&Slot> = s
            .table
            .slots()
            .iter()
            .filter(|slot| slot.pod().is_some_and(|p| live.contains(p)))
            .collect();
        let still: Vec<&Slot> = rebound
            .table
            .slots()
            .iter()
            .filter(|slot| kept.iter().any(|k| k.pod() == slot.pod()))
            .collect();
        prop_assert_eq!(kept, still);
        // Every slot that survives keeps its lineage as a prefix.
        // Free slots go highest first: take each removed one off the end.
        let mut survivors: Vec<&Slot> = s.table.slots().iter().collect();
        for gone in &rebound.removed {
            let at = survivors.iter().rposition(|slot| *slot == gone).unwrap();
            survivors.remove(at);
        }
        for (before, after) in survivors.iter().zip(rebound.table.slots()) {
            prop_assert!(after.pods.starts_with(&before.pods), "{before:?} -> {after:?}");
            prop_assert!(after.pods.len() <= before.pods.len() + 1);
        }
    }

    /// New pods take the free slots lowest first, in the order of preference.
    #[test]
    fn new_pods_take_the_lowest_free_slots_in_order(s in situation()) {
        let rebound = s.table.rebind(s.replicas, &refs(&s.candidates));
        let live: BTreeSet<&str> = s.candidates.iter().map(String::as_str).collect();
        let slotted_before: BTreeSet<&str> = heads(&s.table)
            .into_iter()
            .flatten()
            .filter(|p| live.contains(p))
            .collect();
        let newcomers: Vec<&str> = s
            .candidates
            .iter()
            .map(String::as_str)
            .filter(|p| !slotted_before.contains(p))
            .collect();
        let placed: Vec<(usize, &str)> = heads(&rebound.table)
            .into_iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p?)))
            .filter(|(_, p)| newcomers.contains(p))
            .collect();
        let order: Vec<&str> = placed.iter().map(|&(_, p)| p).collect();
        prop_assert_eq!(&order[..], &newcomers[..placed.len()], "slots ascending in preference order");
        prop_assert_eq!(&rebound.idle, &newcomers[placed.len()..].iter().map(|p| p.to_string()).collect::<Vec<_>>());
    }

    /// The same inputs give the same table, and a rebound table is a fixed point.
    #[test]
    fn rebinding_is_deterministic_and_settles_at_once(s in situation()) {
        let candidates = refs(&s.candidates);
        let once = s.table.rebind(s.replicas, &candidates);
        prop_assert_eq!(&once, &s.table.rebind(s.replicas, &candidates));
        let twice = once.table.rebind(s.replicas, &candidates);
        prop_assert_eq!(twice.table, once.table);
        prop_assert!(twice.removed.is_empty());
        prop_assert_eq!(twice.idle, once.idle);
    }

    /// The slot table survives the ConfigMap: it reads back as written.
    #[test]
    fn the_table_round_trips_through_json(s in situation()) {
        let text = serde_json::to_string(&s.table).unwrap();
        let back: SlotTable = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, s.table);
    }
}

/// A settled Deployment pool: `replicas` pods holding slots 0.., the jobs assigned by `Sticky`.
struct Pool {
    jobs: Vec<String>,
    table: SlotTable,
    config: WorkerConfig,
    next_pod: usize,
}

impl Pool {
    fn new(jobs: Vec<String>, replicas: usize) -> Pool {
        let pods: Vec<String> = (0..replicas).map(pod).collect();
        let rebound = SlotTable::default().rebind(replicas, &refs(&pods));
        let assignment = assign(Assign::Sticky, &jobs, replicas, None);
        let config = config_of(&rebound.table, &assignment);
        Pool {
            jobs,
            table: rebound.table,
            config,
            next_pod: replicas,
        }
    }

    /// One plan over the live `pods`: rebind, assign from the slots' current jobs, publish.
    /// Returns the assignment before and after, in the new slot order.
    fn plan(&mut self, replicas: usize, pods: &[String]) -> (Assignment, Assignment) {
        let rebound = self.table.rebind(replicas, &refs(pods));
        let current = rebound.current(&self.config);
        let next = assign(
            Assign::Sticky,
            &self.jobs,
            rebound.table.len(),
            Some(&current),
        );
        self.config = config_of(&rebound.table, &next);
        self.table = rebound.table;
        (current, next)
    }

    fn live(&self) -> Vec<String> {
        self.table
            .slots()
            .iter()
            .filter_map(|s| s.pod().map(str::to_owned))
            .collect()
    }

    fn fresh_pod(&mut self) -> String {
        self.next_pod += 1;
        format!("web-6c9a1-n{:03}", self.next_pod)
    }

    fn jobs_of(&self, pod: &str) -> BTreeSet<String> {
        self.config
            .workload(pod)
            .map(|w| w.jobs.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The config listing every slot's pod with its jobs (the handoff aside).
fn config_of(table: &SlotTable, assignment: &Assignment) -> WorkerConfig {
    let workloads = table
        .slots()
        .iter()
        .zip(assignment.workers())
        .filter_map(|(slot, jobs)| {
            let workload = Workload {
                version: 1,
                jobs: jobs.clone(),
            };
            Some((slot.pod()?.to_owned(), workload))
        });
    WorkerConfig::new(1, workloads)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// A pod replaced by another (a delete, a rollout restart): the new pod inherits exactly its
    /// jobs, and no other job moves.
    #[test]
    fn a_replacement_pod_inherits_its_slot_and_nothing_else_moves(
        jobs in jobs(0..60),
        replicas in 1..8usize,
        victim in any::<prop::sample::Index>(),
    ) {
        let mut pool = Pool::new(jobs.clone(), replicas);
        let mut live = pool.live();
        let gone = live.remove(victim.index(live.len()));
        let held = pool.jobs_of(&gone);
        let before: BTreeMap<String, BTreeSet<String>> =
            live.iter().map(|p| (p.clone(), pool.jobs_of(p))).collect();
        let newcomer = pool.fresh_pod();
        live.push(newcomer.clone());
        let (current, next) = pool.plan(replicas, &live);
        prop_assert!(moves(&current, &next).is_empty());
        prop_assert_eq!(pool.jobs_of(&newcomer), held);
        for (p, jobs) in before {
            prop_assert_eq!(pool.jobs_of(&p), jobs);
        }
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
    }

    /// Scale-up N -> N+1: only the new pod receives jobs, as few as balance needs; scale-down
    /// N -> N-1 of whichever pod the ReplicaSet deletes: only that pod's jobs move.
    #[test]
    fn scaling_moves_the_fewest_jobs_over_slots(
        jobs in jobs(0..60),
        replicas in 1..8usize,
        victim in any::<prop::sample::Index>(),
    ) {
        let mut pool = Pool::new(jobs.clone(), replicas);
        let mut live = pool.live();
        let newcomer = pool.fresh_pod();
        live.push(newcomer.clone());
        let (current, next) = pool.plan(replicas + 1, &live);
        let moved = moves(&current, &next);
        prop_assert_eq!(moved.len(), lower_bound(&jobs, replicas + 1, &current));
        let slot = pool.table.slot_of(&newcomer).unwrap();
        prop_assert!(moved.iter().all(|&(_, _, to)| to == slot));
        assert_balanced(jobs.len(), &next);

        let gone = live.remove(victim.index(live.len()));
        let held = pool.jobs_of(&gone);
        let (current, next) = pool.plan(replicas, &live);
        let moved: BTreeSet<&str> = moves(&current, &next).iter().map(|&(job, _, _)| job).collect();
        let held: BTreeSet<&str> = held.iter().map(String::as_str).collect();
        prop_assert_eq!(moved, held);
        prop_assert_eq!(pool.table.len(), replicas);
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
    }
}

#[test]
fn a_scale_down_waits_for_the_replicaset_to_pick_the_pods() {
    let table = SlotTable::new(vec![
        Slot {
            pods: vec!["a".into()],
        },
        Slot {
            pods: vec!["b".into()],
        },
        Slot {
            pods: vec!["c".into()],
        },
    ]);
    // Replicas went 3 -> 2 but every pod still runs: nobody is evicted yet.
    let waiting = table.rebind(2, &["a", "b", "c"]);
    assert_eq!(waiting.table, table);
    // The ReplicaSet deleted "a": its slot goes, "b" and "c" keep theirs.
    let done = table.rebind(2, &["b", "c"]);
    assert_eq!(heads(&done.table), [Some("b"), Some("c")]);
    assert_eq!(
        done.removed,
        [Slot {
            pods: vec!["a".into()]
        }]
    );
}

#[test]
fn a_surplus_pod_waits_idle_then_takes_the_slot_its_predecessor_frees() {
    let table = SlotTable::default().rebind(2, &["a", "b"]).table;
    // maxSurge: a third pod while "a" and "b" run.
    let surge = table.rebind(2, &["a", "b", "n"]);
    assert_eq!(surge.idle, ["n"]);
    // "a" terminates: "n" takes its slot and inherits what "a" held.
    let rolled = surge.table.rebind(2, &["b", "n"]);
    assert_eq!(rolled.table.slots()[0].pods, ["a", "n"]);
    assert!(rolled.idle.is_empty());
    let config = WorkerConfig::new(
        3,
        [
            (
                "b".to_owned(),
                Workload {
                    version: 1,
                    jobs: vec!["j2".into()],
                },
            ),
            ("n".to_owned(), Workload::default()),
        ],
    )
    .with_transit([("a".to_owned(), vec!["j1".to_owned()])]);
    assert_eq!(
        rolled.current(&config).workers(),
        [vec!["j1".to_owned()], vec!["j2".to_owned()]]
    );
}
