//! Property tests of the `Sticky` strategy: the five guarantees of the assignment spec.

use crate::common;

use common::*;
use proptest::prelude::*;
use swarm_assign::{Assignment, Strategy as Assign, assign};

fn sticky(jobs: &[String], replicas: usize, current: Option<&Assignment>) -> Assignment {
    assign(Assign::Sticky, jobs, replicas, current)
}

/// A sticky assignment reached from an arbitrary (unbalanced, partly stale) starting point, so
/// that tests do not only start from the canonical layout.
fn settled(jobs: &[String], replicas: usize, picks: &[usize], stale: &[String]) -> Assignment {
    let mut before: Vec<String> = jobs.to_vec();
    before.extend(stale.iter().filter(|s| !jobs.contains(s)).cloned());
    let start = arbitrary_assignment(&before, replicas, picks);
    sticky(jobs, replicas, Some(&start))
}

/// One change to a pool between two reconciles.
#[derive(Clone, Debug)]
enum Edit {
    ScaleUp,
    ScaleDown,
    ScaleTo(usize),
    AddJob { position: usize, name: String },
    RemoveJob(usize),
    ReplaceJobs { remove: usize, add: Vec<String> },
    Reorder(u64),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => Just(Edit::ScaleUp),
        3 => Just(Edit::ScaleDown),
        1 => (1_usize..300).prop_map(Edit::ScaleTo),
        3 => (any::<usize>(), job_name()).prop_map(|(position, name)| Edit::AddJob { position, name }),
        3 => any::<usize>().prop_map(Edit::RemoveJob),
        1 => (0_usize..40, prop::collection::vec(job_name(), 0..40))
            .prop_map(|(remove, add)| Edit::ReplaceJobs { remove, add }),
        1 => any::<u64>().prop_map(Edit::Reorder),
    ]
}

/// Applies `edit` to (jobs, replicas).
fn apply(edit: &Edit, jobs: &mut Vec<String>, replicas: &mut usize) {
    match edit {
        Edit::ScaleUp => *replicas += 1,
        Edit::ScaleDown => *replicas = (*replicas - 1).max(1),
        Edit::ScaleTo(n) => *replicas = *n,
        Edit::AddJob { position, name } => {
            let name = if jobs.contains(name) {
                fresh_name(jobs, *position % 1000)
            } else {
                name.clone()
            };
            jobs.insert(position % (jobs.len() + 1), name);
        }
        Edit::RemoveJob(position) => {
            if !jobs.is_empty() {
                jobs.remove(position % jobs.len());
            }
        }
        Edit::ReplaceJobs { remove, add } => {
            let keep = jobs.len().saturating_sub(*remove);
            jobs.truncate(keep);
            for name in add {
                if !jobs.contains(name) {
                    jobs.push(name.clone());
                }
            }
        }
        Edit::Reorder(seed) => shuffle(jobs, *seed),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_job_is_on_exactly_one_worker_with_perfect_balance_from_any_starting_point(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
        before_replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
        stale in prop::collection::vec(job_name(), 0..20),
        duplicate_every in 1_usize..10,
    ) {
        // A messy current assignment: arbitrary loads, jobs no longer in the spec, workers that
        // no longer exist, and some jobs held twice.
        let mut before: Vec<String> = jobs.clone();
        before.extend(stale);
        let mut workers = arbitrary_assignment(&before, before_replicas, &picks).into_workers();
        for (i, job) in jobs.iter().enumerate().step_by(duplicate_every) {
            workers[(i * 7) % before_replicas].push(job.clone());
        }
        let current = Assignment::new(workers);
        let next = sticky(&jobs, replicas, Some(&current));
        prop_assert_eq!(next.replicas(), replicas);
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
        assert_spec_order(&jobs, &next);
    }

    #[test]
    fn without_a_current_assignment_every_job_is_on_exactly_one_worker_with_perfect_balance(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
    ) {
        let next = sticky(&jobs, replicas, None);
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
        assert_spec_order(&jobs, &next);
    }

    #[test]
    fn a_balanced_exactly_once_assignment_is_returned_unchanged(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
        seed in any::<u64>(),
    ) {
        // Any perfectly balanced layout, not only one Sticky produced: chunk a shuffled list.
        let mut shuffled = jobs.clone();
        shuffle(&mut shuffled, seed);
        let (q, r) = (jobs.len() / replicas, jobs.len() % replicas);
        let mut rest = shuffled.as_slice();
        let mut sizes: Vec<usize> = (0..replicas).map(|i| q + usize::from(i < r)).collect();
        shuffle(&mut sizes, seed.rotate_left(17));
        let chunks: Vec<Vec<String>> = sizes
            .iter()
            .map(|&size| {
                let (chunk, tail) = rest.split_at(size);
                rest = tail;
                chunk.to_vec()
            })
            .collect();
        let current = Assignment::new(chunks);
        let next = sticky(&jobs, replicas, Some(&current));
        prop_assert!(moves(&current, &next).is_empty());
        for (before, after) in current.workers().iter().zip(next.workers()) {
            let mut before = before.clone();
            let mut after = after.clone();
            before.sort();
            after.sort();
            prop_assert_eq!(before, after);
        }
    }

    #[test]
    fn reconciling_twice_writes_nothing_new(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
        stale in prop::collection::vec(job_name(), 0..10),
    ) {
        let once = settled(&jobs, replicas, &picks, &stale);
        let twice = sticky(&jobs, replicas, Some(&once));
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn scaling_up_by_one_moves_exactly_floor_j_over_n_plus_1_jobs_all_to_the_new_worker(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
    ) {
        let before = settled(&jobs, replicas, &picks, &[]);
        let after = sticky(&jobs, replicas + 1, Some(&before));
        let moved = moves(&before, &after);
        prop_assert_eq!(moved.len(), jobs.len() / (replicas + 1));
        prop_assert!(moved.iter().all(|&(_, _, to)| to == replicas), "all moves go to the new worker");
        assert_balanced(jobs.len(), &after);
    }

    #[test]
    fn scaling_down_by_one_moves_only_the_removed_workers_jobs(
        jobs in jobs(0..400),
        replicas in 2_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
    ) {
        let before = settled(&jobs, replicas, &picks, &[]);
        let after = sticky(&jobs, replicas - 1, Some(&before));
        let moved = moves(&before, &after);
        prop_assert_eq!(moved.len(), before.workers()[replicas - 1].len());
        prop_assert!(moved.iter().all(|&(_, from, _)| from == replicas - 1), "only the removed worker's jobs move");
        assert_balanced(jobs.len(), &after);
    }

    #[test]
    fn adding_a_job_moves_no_other_job(
        jobs in jobs(0..400),
        replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
        new_job in job_name(),
        position in any::<usize>(),
    ) {
        let before = settled(&jobs, replicas, &picks, &[]);
        let mut grown = jobs.clone();
        let new_job = if jobs.contains(&new_job) { fresh_name(&jobs, 0) } else { new_job };
        grown.insert(position % (jobs.len() + 1), new_job);
        let after = sticky(&grown, replicas, Some(&before));
        prop_assert!(moves(&before, &after).is_empty());
        assert_exactly_once(&grown, &after);
        assert_balanced(grown.len(), &after);
    }

    #[test]
    fn removing_a_job_moves_at_most_one_other_job(
        jobs in jobs(1..400),
        replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..400),
        position in any::<usize>(),
    ) {
        let before = settled(&jobs, replicas, &picks, &[]);
        let mut shrunk = jobs.clone();
        shrunk.remove(position % jobs.len());
        let after = sticky(&shrunk, replicas, Some(&before));
        prop_assert!(moves(&before, &after).len() <= 1);
        assert_exactly_once(&shrunk, &after);
        assert_balanced(shrunk.len(), &after);
    }

    #[test]
    fn movement_equals_the_brute_force_lower_bound_from_any_exactly_once_start(
        jobs in jobs(0..60),
        replicas in 1_usize..8,
        before_replicas in 1_usize..8,
        picks in prop::collection::vec(0_usize..8, 0..80),
        stale in prop::collection::vec(job_name(), 0..10),
    ) {
        let mut before_jobs = jobs.clone();
        before_jobs.truncate(jobs.len() * 3 / 4);
        before_jobs.extend(stale.into_iter().filter(|s| !jobs.contains(s)));
        let before_jobs = dedup(before_jobs);
        let current = arbitrary_assignment(&before_jobs, before_replicas, &picks);

        // Every way to pick the J % N workers that may hold one more job.
        let (q, r) = (jobs.len() / replicas, jobs.len() % replicas);
        let wanted: Vec<usize> = current
            .workers()
            .iter()
            .map(|held| held.iter().filter(|job| jobs.contains(job)).count())
            .collect();
        let existing: usize = wanted.iter().sum();
        let best_stay = (0_u32..1 << replicas)
            .filter(|mask| mask.count_ones() as usize == r)
            .map(|mask| {
                (0..replicas)
                    .map(|i| wanted.get(i).copied().unwrap_or(0).min(q + usize::from(mask & (1 << i) != 0)))
                    .sum::<usize>()
            })
            .max()
            .expect("some choice exists");
        let brute_force = existing - best_stay;

        let next = sticky(&jobs, replicas, Some(&current));
        assert_exactly_once(&jobs, &next);
        assert_balanced(jobs.len(), &next);
        prop_assert_eq!(lower_bound(&jobs, replicas, &current), brute_force);
        prop_assert_eq!(moves(&current, &next).len(), brute_force);
    }

    #[test]
    fn random_sequences_of_scale_and_job_edits_keep_every_guarantee(
        initial in jobs(0..200),
        initial_replicas in 1_usize..300,
        edits in prop::collection::vec(edit(), 1..10),
    ) {
        let mut jobs = initial;
        let mut replicas = initial_replicas;
        let mut current = sticky(&jobs, replicas, None);
        for edit in &edits {
            let before_replicas = replicas;
            apply(edit, &mut jobs, &mut replicas);
            let bound = lower_bound(&jobs, replicas, &current);
            let next = sticky(&jobs, replicas, Some(&current));
            assert_exactly_once(&jobs, &next);
            assert_balanced(jobs.len(), &next);
            assert_spec_order(&jobs, &next);
            let moved = moves(&current, &next);
            prop_assert_eq!(moved.len(), bound, "movement at the lower bound after {:?}", edit);
            match edit {
                Edit::ScaleUp => {
                    prop_assert_eq!(moved.len(), jobs.len() / replicas);
                    prop_assert!(moved.iter().all(|&(_, _, to)| to == before_replicas));
                }
                Edit::ScaleDown if before_replicas > 1 => {
                    prop_assert!(moved.iter().all(|&(_, from, _)| from == replicas));
                }
                Edit::AddJob { .. } | Edit::Reorder(_) => prop_assert!(moved.is_empty()),
                Edit::RemoveJob(_) => prop_assert!(moved.len() <= 1),
                _ => {}
            }
            prop_assert_eq!(&sticky(&jobs, replicas, Some(&next)), &next, "fixed point");
            current = next;
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_assignment_whatever_the_spec_or_listing_order(
        jobs in jobs(0..300),
        replicas in 1_usize..300,
        before_replicas in 1_usize..300,
        picks in prop::collection::vec(any::<usize>(), 0..300),
        seed in any::<u64>(),
    ) {
        let current = arbitrary_assignment(&jobs[..jobs.len() / 2], before_replicas, &picks);
        let first = sticky(&jobs, replicas, Some(&current));
        prop_assert_eq!(&first, &sticky(&jobs, replicas, Some(&current)));

        // Reordered spec and reordered listings inside the current config: same owners.
        let mut reordered = jobs.clone();
        shuffle(&mut reordered, seed);
        let mut relisted = current.clone().into_workers();
        for (i, held) in relisted.iter_mut().enumerate() {
            shuffle(held, seed ^ i as u64);
        }
        let second = sticky(&reordered, replicas, Some(&Assignment::new(relisted)));
        prop_assert_eq!(owners(&first), owners(&second));
        let scratch_first = sticky(&jobs, replicas, None);
        let scratch_second = sticky(&reordered, replicas, None);
        prop_assert_eq!(owners(&scratch_first), owners(&scratch_second));
    }

    #[test]
    fn from_scratch_equals_all_on_worker_0_then_scaling_up_one_worker_at_a_time(
        jobs in jobs(0..150),
        replicas in 1_usize..40,
    ) {
        let mut stepwise = Assignment::new(vec![jobs.clone()]);
        for n in 2..=replicas {
            stepwise = sticky(&jobs, n, Some(&stepwise));
        }
        prop_assert_eq!(sticky(&jobs, replicas, None), stepwise);
    }

    #[test]
    fn a_config_lost_after_scale_ups_is_rebuilt_identically(
        jobs in jobs(0..200),
        start in 1_usize..50,
        steps in 0_usize..30,
    ) {
        let mut live = sticky(&jobs, start, None);
        for n in start + 1..=start + steps {
            live = sticky(&jobs, n, Some(&live));
        }
        prop_assert_eq!(sticky(&jobs, start + steps, None), live);
    }
}

#[test]
fn jobs_on_more_workers_than_jobs_leave_the_extra_workers_empty() {
    let jobs: Vec<String> = (0..3).map(|i| format!("job-{i}")).collect();
    let next = sticky(&jobs, 5, None);
    assert_exactly_once(&jobs, &next);
    assert_eq!(next.loads().iter().filter(|&&load| load == 1).count(), 3);
    assert_eq!(next.loads().iter().sum::<usize>(), 3);
}

#[test]
fn a_job_held_twice_by_the_current_config_stays_on_its_lowest_ordinal() {
    let jobs: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
    let current = Assignment::new(vec![
        vec!["a".into(), "b".into()],
        vec!["c".into(), "a".into(), "d".into()],
    ]);
    let next = sticky(&jobs, 2, Some(&current));
    assert_eq!(owners(&next)["a"], 0);
    assert_exactly_once(&jobs, &next);
    assert_eq!(next.loads(), vec![2, 2]);
}

#[test]
fn zero_replicas_assign_nothing() {
    let jobs: Vec<String> = ["a", "b"].map(String::from).to_vec();
    for strategy in Assign::ALL {
        assert_eq!(assign(strategy, &jobs, 0, None).replicas(), 0);
    }
}
