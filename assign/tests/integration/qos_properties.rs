//! Property tests of `assign_with_qos`: dedicated jobs on workers of their own, weighted `Sticky`
//! balance of the shared jobs, and the guarantees of the strategies kept under `spec.qos`.

use crate::common;

use common::*;
use proptest::prelude::*;
use swarm_assign::{
    Assignment, MAX_WEIGHT, Placement, Qos, QosError, Strategy as Assign, assign, assign_with_qos,
    validate_qos,
};

fn sticky(jobs: &[String], replicas: usize, current: Option<&Assignment>, qos: &Qos) -> Placement {
    assign_with_qos(Assign::Sticky, jobs, replicas, current, qos)
}

/// A placement reached from an arbitrary (unbalanced, partly stale) starting point, so that tests
/// do not only start from the layout computed from scratch.
fn settled(
    strategy: Assign,
    jobs: &[String],
    replicas: usize,
    picks: &[usize],
    stale: &[String],
    qos: &Qos,
) -> Placement {
    let mut before: Vec<String> = jobs.to_vec();
    before.extend(stale.iter().filter(|s| !jobs.contains(s)).cloned());
    let start = arbitrary_assignment(&before, replicas, picks);
    assign_with_qos(strategy, jobs, replicas, Some(&start), qos)
}

/// A current config as messy as a hand-edited one: arbitrary loads, jobs no longer in the spec,
/// workers that no longer exist, some jobs held twice.
fn messy_current(
    jobs: &[String],
    replicas: usize,
    picks: &[usize],
    stale: &[String],
    duplicate_every: usize,
) -> Assignment {
    let mut before: Vec<String> = jobs.to_vec();
    before.extend(stale.iter().cloned());
    let mut workers = arbitrary_assignment(&before, replicas, picks).into_workers();
    for (i, job) in jobs.iter().enumerate().step_by(duplicate_every) {
        workers[(i * 7) % replicas].push(job.clone());
    }
    Assignment::new(workers)
}

/// A pool as most properties meet it: jobs, workers, a `qos`, and a messy current config (held
/// twice, stale jobs, arbitrary loads) or none.
#[derive(Clone, Debug)]
struct Situation {
    jobs: Vec<String>,
    replicas: usize,
    qos: Qos,
    current: Option<Assignment>,
}

fn situation() -> impl Strategy<Value = Situation> {
    (
        jobs(0..200),
        1_usize..40,
        1_usize..40,
        prop::collection::vec(any::<usize>(), 0..200),
        prop::collection::vec(job_name(), 0..10),
        1_usize..10,
        qos_picks(),
        any::<bool>(),
    )
        .prop_map(
            |(jobs, replicas, before, picks, stale, duplicate_every, qos, with_current)| {
                let qos = build_qos(&jobs, &qos);
                let current = with_current
                    .then(|| messy_current(&jobs, before, &picks, &stale, duplicate_every));
                Situation {
                    jobs,
                    replicas,
                    qos,
                    current,
                }
            },
        )
}

/// How many dedicated jobs get a worker of their own: all `D` when every job is dedicated
/// (`S = J - D = 0`) and `D <= N`; otherwise one worker at least stays shared (for the shared
/// jobs or for the dedicated jobs left without a worker) and `k = min(D, N - 1)`.
fn served_count(job_count: usize, dedicated: usize, replicas: usize) -> usize {
    if job_count == dedicated && dedicated <= replicas {
        dedicated
    } else {
        dedicated.min(replicas.saturating_sub(1))
    }
}

/// The ordinals that are not dedicated workers, ascending.
fn shared_workers(placement: &Placement) -> Vec<usize> {
    (0..placement.assignment.replicas())
        .filter(|ordinal| !placement.dedicated_workers.contains(ordinal))
        .collect()
}

/// The jobs that are not alone on a dedicated worker (unmet dedicated jobs included), in spec
/// order.
fn shared_jobs<'a>(jobs: &'a [String], placement: &Placement) -> Vec<&'a String> {
    let alone: Vec<&String> = placement
        .dedicated_workers
        .iter()
        .flat_map(|&ordinal| &placement.assignment.workers()[ordinal])
        .collect();
    jobs.iter().filter(|job| !alone.contains(job)).collect()
}

/// The largest weight among the shared jobs (0 without any).
fn heaviest_shared(jobs: &[String], placement: &Placement, qos: &Qos) -> u64 {
    shared_jobs(jobs, placement)
        .into_iter()
        .map(|job| qos.weight(job))
        .max()
        .unwrap_or(0)
}

/// The total weight held by every worker.
fn loads(assignment: &Assignment, qos: &Qos) -> Vec<u64> {
    assignment
        .workers()
        .iter()
        .map(|held| held.iter().map(|job| qos.weight(job)).sum())
        .collect()
}

/// Rule 1: every job exactly once, in spec order within each worker, on `replicas` ordinals
/// (with no ordinal, nothing runs).
fn assert_every_job_once(jobs: &[String], replicas: usize, placement: &Placement) {
    assert_eq!(
        placement.assignment.replicas(),
        replicas,
        "one job list per ordinal"
    );
    if replicas == 0 {
        return;
    }
    assert_exactly_once(jobs, &placement.assignment);
    assert_spec_order(jobs, &placement.assignment);
}

/// Rule 2: the first `k` dedicated jobs run alone, the rest are reported unmet (and still run
/// while there is a worker), and `dedicated_workers` lists exactly the workers of the `k`.
fn assert_dedicated_honoured(jobs: &[String], replicas: usize, qos: &Qos, placement: &Placement) {
    if replicas == 0 {
        assert!(placement.dedicated_workers.is_empty());
        assert_eq!(
            placement.dedicated_unmet, qos.dedicated,
            "no worker: all unmet"
        );
        return;
    }
    let k = served_count(jobs.len(), qos.dedicated.len(), replicas);
    assert_eq!(
        placement.dedicated_unmet,
        qos.dedicated[k..].to_vec(),
        "unmet: the dedicated jobs past the first {k}, in list order"
    );
    let owners = owners(&placement.assignment);
    let mut workers_of_served: Vec<usize> = qos.dedicated[..k]
        .iter()
        .map(|job| {
            let ordinal = owners[job.as_str()];
            assert_eq!(
                placement.assignment.workers()[ordinal],
                vec![job.clone()],
                "served dedicated job {job:?} runs alone on worker {ordinal}"
            );
            ordinal
        })
        .collect();
    workers_of_served.sort_unstable();
    assert_eq!(
        placement.dedicated_workers, workers_of_served,
        "dedicated_workers: exactly the workers of the served dedicated jobs, ascending"
    );
    for job in &placement.dedicated_unmet {
        assert!(
            owners.contains_key(job.as_str()),
            "unmet {job:?} still runs"
        );
    }
}

/// Rule 3: the shared workers' total weights differ by at most the heaviest shared job.
fn assert_weight_balanced(jobs: &[String], qos: &Qos, placement: &Placement) {
    let all = loads(&placement.assignment, qos);
    let shared: Vec<u64> = shared_workers(placement).iter().map(|&o| all[o]).collect();
    let heaviest = heaviest_shared(jobs, placement, qos);
    if let (Some(min), Some(max)) = (shared.iter().min(), shared.iter().max()) {
        assert!(
            max - min <= heaviest,
            "shared loads {shared:?} differ by {} > heaviest shared job {heaviest}",
            max - min
        );
    }
}

/// Rule 4: feeding the placement back changes nothing.
fn assert_fixed_point(
    strategy: Assign,
    jobs: &[String],
    replicas: usize,
    qos: &Qos,
    placement: &Placement,
) {
    let again = assign_with_qos(strategy, jobs, replicas, Some(&placement.assignment), qos);
    assert_eq!(
        &again, placement,
        "{strategy}: reconciling twice writes nothing new"
    );
}

/// The total weight of the jobs in `moved`.
fn moved_weight(moved: &[(&str, usize, usize)], qos: &Qos) -> u64 {
    moved.iter().map(|&(job, _, _)| qos.weight(job)).sum()
}

/// One change to a pool between two reconciles.
#[derive(Clone, Debug)]
enum Edit {
    ScaleUp,
    ScaleDown,
    ScaleTo(usize),
    AddJob {
        position: usize,
        name: String,
        weight: Option<u64>,
    },
    RemoveJob(usize),
    SetWeight(usize, u64),
    ClearWeight(usize),
    Dedicate {
        job: usize,
        position: usize,
    },
    Undedicate(usize),
    ReorderDedicated(u64),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => Just(Edit::ScaleUp),
        3 => Just(Edit::ScaleDown),
        1 => (0_usize..50).prop_map(Edit::ScaleTo),
        3 => (any::<usize>(), job_name(), prop::option::of(job_weight()))
            .prop_map(|(position, name, weight)| Edit::AddJob { position, name, weight }),
        3 => any::<usize>().prop_map(Edit::RemoveJob),
        2 => (any::<usize>(), job_weight()).prop_map(|(job, weight)| Edit::SetWeight(job, weight)),
        1 => any::<usize>().prop_map(Edit::ClearWeight),
        2 => (any::<usize>(), any::<usize>())
            .prop_map(|(job, position)| Edit::Dedicate { job, position }),
        2 => any::<usize>().prop_map(Edit::Undedicate),
        1 => any::<u64>().prop_map(Edit::ReorderDedicated),
    ]
}

/// Applies `edit` to (jobs, replicas, qos), keeping `qos` valid: it names existing jobs only.
fn apply(edit: &Edit, jobs: &mut Vec<String>, replicas: &mut usize, qos: &mut Qos) {
    match edit {
        Edit::ScaleUp => *replicas += 1,
        Edit::ScaleDown => *replicas = replicas.saturating_sub(1).max(1),
        Edit::ScaleTo(n) => *replicas = *n,
        Edit::AddJob {
            position,
            name,
            weight,
        } => {
            let name = if jobs.contains(name) {
                fresh_name(jobs, *position % 1000)
            } else {
                name.clone()
            };
            if let Some(weight) = weight {
                qos.weights.insert(name.clone(), *weight);
            }
            jobs.insert(position % (jobs.len() + 1), name);
        }
        Edit::RemoveJob(position) => {
            if !jobs.is_empty() {
                let job = jobs.remove(position % jobs.len());
                qos.dedicated.retain(|d| *d != job);
                qos.weights.remove(&job);
            }
        }
        Edit::SetWeight(job, weight) => {
            if !jobs.is_empty() {
                qos.weights.insert(jobs[job % jobs.len()].clone(), *weight);
            }
        }
        Edit::ClearWeight(job) => {
            if !jobs.is_empty() {
                qos.weights.remove(&jobs[job % jobs.len()]);
            }
        }
        Edit::Dedicate { job, position } => {
            if !jobs.is_empty() {
                let job = &jobs[job % jobs.len()];
                if !qos.dedicated.contains(job) {
                    let at = position % (qos.dedicated.len() + 1);
                    qos.dedicated.insert(at, job.clone());
                }
            }
        }
        Edit::Undedicate(position) => {
            if !qos.dedicated.is_empty() {
                let at = position % qos.dedicated.len();
                qos.dedicated.remove(at);
            }
        }
        Edit::ReorderDedicated(seed) => shuffle(&mut qos.dedicated, *seed),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn every_job_runs_exactly_once_in_spec_order_under_every_strategy(
        situation in situation(),
    ) {
        let Situation { jobs, replicas, qos, current } = situation;
        let current = current.as_ref();
        for strategy in Assign::ALL {
            let placement = assign_with_qos(strategy, &jobs, replicas, current, &qos);
            assert_every_job_once(&jobs, replicas, &placement);
        }
    }

    #[test]
    fn the_first_dedicated_jobs_workers_allow_run_alone_and_the_rest_are_reported_unmet_but_still_run(
        situation in situation(),
    ) {
        let Situation { jobs, replicas, qos, current } = situation;
        let current = current.as_ref();
        for strategy in Assign::ALL {
            let placement = assign_with_qos(strategy, &jobs, replicas, current, &qos);
            assert_every_job_once(&jobs, replicas, &placement);
            assert_dedicated_honoured(&jobs, replicas, &qos, &placement);
        }
    }

    #[test]
    fn with_no_workers_nothing_is_assigned_and_every_dedicated_job_is_unmet(
        jobs in jobs(0..200),
        before_replicas in 1_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        qos in qos_picks(),
        with_current in any::<bool>(),
    ) {
        let qos = build_qos(&jobs, &qos);
        let current = arbitrary_assignment(&jobs, before_replicas, &picks);
        let current = with_current.then_some(&current);
        for strategy in Assign::ALL {
            let placement = assign_with_qos(strategy, &jobs, 0, current, &qos);
            prop_assert_eq!(placement.assignment.replicas(), 0);
            prop_assert!(placement.dedicated_workers.is_empty());
            prop_assert_eq!(&placement.dedicated_unmet, &qos.dedicated);
        }
    }

    #[test]
    fn weighted_sticky_keeps_the_shared_workers_within_the_heaviest_shared_job_of_each_other(
        situation in situation(),
    ) {
        let Situation { jobs, replicas, qos, current } = situation;
        let current = current.as_ref();
        let placement = sticky(&jobs, replicas, current, &qos);
        assert_every_job_once(&jobs, replicas, &placement);
        assert_weight_balanced(&jobs, &qos, &placement);
    }

    #[test]
    fn feeding_a_placement_back_returns_it_unchanged_under_every_strategy(
        situation in situation(),
    ) {
        let Situation { jobs, replicas, qos, current } = situation;
        let current = current.as_ref();
        for strategy in Assign::ALL {
            let placement = assign_with_qos(strategy, &jobs, replicas, current, &qos);
            assert_fixed_point(strategy, &jobs, replicas, &qos, &placement);
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_placement_whatever_the_listing_order_in_the_current_config(
        jobs in jobs(0..200),
        replicas in 1_usize..40,
        before_replicas in 1_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        stale in prop::collection::vec(job_name(), 0..10),
        duplicate_every in 1_usize..10,
        qos in qos_picks(),
        seed in any::<u64>(),
    ) {
        let qos = build_qos(&jobs, &qos);
        let current = messy_current(&jobs, before_replicas, &picks, &stale, duplicate_every);
        let mut relisted = current.clone().into_workers();
        for (i, held) in relisted.iter_mut().enumerate() {
            shuffle(held, seed ^ i as u64);
        }
        let relisted = Assignment::new(relisted);
        for strategy in Assign::ALL {
            let first = assign_with_qos(strategy, &jobs, replicas, Some(&current), &qos);
            let again = assign_with_qos(strategy, &jobs, replicas, Some(&current), &qos);
            prop_assert_eq!(&first, &again, "{}: same inputs, same placement", strategy);
            let shuffled = assign_with_qos(strategy, &jobs, replicas, Some(&relisted), &qos);
            prop_assert_eq!(&first, &shuffled, "{}: listing order in the config is irrelevant", strategy);
            let scratch = assign_with_qos(strategy, &jobs, replicas, None, &qos);
            prop_assert_eq!(scratch, assign_with_qos(strategy, &jobs, replicas, None, &qos));
        }
    }

    #[test]
    fn scaling_up_by_one_moves_jobs_only_to_the_new_worker_and_about_a_fair_share_of_the_weight(
        jobs in jobs(0..200),
        replicas in 1_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        qos in qos_picks(),
    ) {
        let qos = build_qos(&jobs, &qos);
        let before = settled(Assign::Sticky, &jobs, replicas, &picks, &[], &qos);
        let after = sticky(&jobs, replicas + 1, Some(&before.assignment), &qos);
        assert_every_job_once(&jobs, replicas + 1, &after);
        assert_weight_balanced(&jobs, &qos, &after);
        let moved = moves(&before.assignment, &after.assignment);
        let served_before = qos.dedicated.len() - before.dedicated_unmet.len();
        let served_after = qos.dedicated.len() - after.dedicated_unmet.len();
        if served_after == served_before {
            prop_assert!(
                moved.iter().all(|&(_, _, to)| to == replicas),
                "every move goes to the new worker {}: {:?}", replicas, moved
            );
            prop_assert_eq!(&after.dedicated_workers, &before.dedicated_workers);
            // The new worker ends within the heaviest shared job of T / (M + 1).
            let total: u64 = shared_jobs(&jobs, &before).iter().map(|job| qos.weight(job)).sum();
            let shared_before = shared_workers(&before).len() as i128;
            let heaviest = i128::from(heaviest_shared(&jobs, &before, &qos));
            let moved_weight = i128::from(moved_weight(&moved, &qos));
            prop_assert!(
                (moved_weight * (shared_before + 1) - i128::from(total)).abs()
                    <= heaviest * (shared_before + 1),
                "moved weight {} vs fair share {}/{} (heaviest shared job {})",
                moved_weight, total, shared_before + 1, heaviest
            );
        } else {
            // One more dedicated job served (two when the last two dedicated jobs shared the
            // shared worker, with no other job): the first that waited takes the new worker, and
            // nothing else moves.
            prop_assert!(served_after > served_before);
            let waited = &qos.dedicated[served_before];
            prop_assert_eq!(
                moved.iter().map(|&(job, _, to)| (job, to)).collect::<Vec<_>>(),
                vec![(waited.as_str(), replicas)],
                "only the dedicated job that waited moves, to the new worker"
            );
        }
    }

    #[test]
    fn a_dedicated_job_that_waited_for_a_worker_gets_the_new_worker_and_nothing_else_moves(
        jobs in jobs(20..200),
        replicas in 1_usize..15,
        extra in 0_usize..4,
        seed in any::<u64>(),
        weights in weight_picks(),
        picks in prop::collection::vec(any::<usize>(), 0..200),
    ) {
        // At least as many dedicated jobs as workers, and shared jobs: one worker stays shared
        // and some dedicated job waits.
        let mut order = jobs.clone();
        shuffle(&mut order, seed);
        order.truncate((replicas + extra).min(jobs.len() - 1));
        let qos = build_qos(&jobs, &QosPicks { dedicated: DedicatedPicks::Indices(Vec::new()), weights });
        let qos = Qos { dedicated: order, ..qos };
        prop_assume!(qos.dedicated.len() >= replicas);
        let before = settled(Assign::Sticky, &jobs, replicas, &picks, &[], &qos);
        prop_assert_eq!(before.dedicated_unmet.len(), qos.dedicated.len() + 1 - replicas);
        let after = sticky(&jobs, replicas + 1, Some(&before.assignment), &qos);
        assert_every_job_once(&jobs, replicas + 1, &after);
        assert_dedicated_honoured(&jobs, replicas + 1, &qos, &after);
        assert_weight_balanced(&jobs, &qos, &after);
        let waited = &qos.dedicated[replicas - 1];
        let moved = moves(&before.assignment, &after.assignment);
        prop_assert_eq!(
            moved.iter().map(|&(job, _, to)| (job, to)).collect::<Vec<_>>(),
            vec![(waited.as_str(), replicas)]
        );
    }

    #[test]
    fn adding_a_shared_job_moves_no_other_job(
        jobs in jobs(0..200),
        replicas in 1_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        qos in qos_picks(),
        new_job in job_name(),
        weight in prop::option::of(job_weight()),
        position in any::<usize>(),
    ) {
        let mut qos = build_qos(&jobs, &qos);
        let before = settled(Assign::Sticky, &jobs, replicas, &picks, &[], &qos);
        let new_job = if jobs.contains(&new_job) { fresh_name(&jobs, 0) } else { new_job };
        let mut grown = jobs.clone();
        grown.insert(position % (jobs.len() + 1), new_job.clone());
        if let Some(weight) = weight {
            qos.weights.insert(new_job, weight);
        }
        prop_assert_eq!(validate_qos(&grown, &qos), Ok(()));
        let after = sticky(&grown, replicas, Some(&before.assignment), &qos);
        let moved = moves(&before.assignment, &after.assignment);
        prop_assert!(moved.is_empty(), "adding a job moved {:?}", moved);
        assert_every_job_once(&grown, replicas, &after);
        assert_dedicated_honoured(&grown, replicas, &qos, &after);
        assert_weight_balanced(&grown, &qos, &after);
    }

    #[test]
    fn scaling_down_by_one_moves_only_the_removed_workers_jobs_when_it_was_shared(
        jobs in jobs(0..200),
        replicas in 2_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        qos in qos_picks(),
    ) {
        let qos = build_qos(&jobs, &qos);
        let before = settled(Assign::Sticky, &jobs, replicas, &picks, &[], &qos);
        let after = sticky(&jobs, replicas - 1, Some(&before.assignment), &qos);
        assert_every_job_once(&jobs, replicas - 1, &after);
        assert_weight_balanced(&jobs, &qos, &after);
        let removed = replicas - 1;
        let moved = moves(&before.assignment, &after.assignment);
        let same_served = after.dedicated_unmet == before.dedicated_unmet;
        if same_served && !before.dedicated_workers.contains(&removed) {
            prop_assert!(
                moved.iter().all(|&(_, from, _)| from == removed),
                "only the removed worker's jobs move: {:?}", moved
            );
            prop_assert_eq!(moved.len(), before.assignment.workers()[removed].len());
        } else if same_served {
            // The removed worker ran a dedicated job: it needs a worker of its own, so the
            // lightest shared worker (ties: lowest ordinal) makes way, and nothing else moves.
            let all = loads(&before.assignment, &qos);
            let lightest = shared_workers(&before)
                .into_iter()
                .min_by_key(|&ordinal| (all[ordinal], ordinal))
                .expect("a shared worker stays: the served count did not change");
            prop_assert!(
                moved.iter().all(|&(_, from, _)| from == removed || from == lightest),
                "only the removed worker's and the lightest shared worker's jobs move: {:?}", moved
            );
            prop_assert_eq!(
                moved.len(),
                1 + before.assignment.workers()[lightest].len()
            );
        }
    }

    #[test]
    fn a_neutral_qos_gives_exactly_the_assignment_without_qos(
        jobs in jobs(0..200),
        replicas in 0_usize..40,
        before_replicas in 1_usize..40,
        picks in prop::collection::vec(any::<usize>(), 0..200),
        stale in prop::collection::vec(job_name(), 0..10),
        duplicate_every in 1_usize..10,
        qos in neutral_qos_picks(),
        with_current in any::<bool>(),
    ) {
        let qos = build_qos(&jobs, &qos);
        prop_assert!(qos.is_neutral());
        let current = messy_current(&jobs, before_replicas, &picks, &stale, duplicate_every);
        let current = with_current.then_some(&current);
        for strategy in Assign::ALL {
            let placement = assign_with_qos(strategy, &jobs, replicas, current, &qos);
            prop_assert_eq!(
                placement,
                Placement { assignment: assign(strategy, &jobs, replicas, current), ..Placement::default() }
            );
        }
    }

    #[test]
    fn validate_qos_refuses_unknown_names_repeats_and_out_of_range_weights_naming_the_job(
        jobs in jobs(1..20),
        qos in qos_picks(),
        fault in 0_usize..5,
        pick in any::<usize>(),
        bad_weight in prop_oneof![Just(0_u64), MAX_WEIGHT + 1..=u64::MAX],
    ) {
        let mut qos = build_qos(&jobs, &qos);
        prop_assert_eq!(validate_qos(&jobs, &qos), Ok(()));
        let unknown = fresh_name(&jobs, pick % 1000);
        let job = jobs[pick % jobs.len()].clone();
        let expected = match fault {
            0 => {
                qos.dedicated.insert(pick % (qos.dedicated.len() + 1), unknown.clone());
                QosError::UnknownDedicated { job: unknown }
            }
            1 => {
                qos.weights.insert(unknown.clone(), 2);
                QosError::UnknownWeighted { job: unknown }
            }
            2 => {
                // The repeat comes after the first listing: the error names the job repeated.
                qos.dedicated.retain(|d| *d != job);
                let at = pick % (qos.dedicated.len() + 1);
                qos.dedicated.insert(at, job.clone());
                qos.dedicated.insert(at + 1 + pick % (qos.dedicated.len() - at), job.clone());
                QosError::DuplicateDedicated { job }
            }
            _ => {
                qos.weights.insert(job.clone(), bad_weight);
                QosError::WeightOutOfRange { job, weight: bad_weight }
            }
        };
        let error = validate_qos(&jobs, &qos).unwrap_err();
        prop_assert_eq!(error.job(), expected.job());
        prop_assert_eq!(error, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(32)))]

    #[test]
    fn random_sequences_of_scale_job_weight_and_dedicated_edits_keep_every_guarantee(
        initial in jobs(0..200),
        initial_replicas in 1_usize..40,
        qos in qos_picks(),
        edits in prop::collection::vec(edit(), 1..30),
    ) {
        let mut jobs = initial;
        let mut replicas = initial_replicas;
        let mut qos = build_qos(&jobs, &qos);
        let mut current = sticky(&jobs, replicas, None, &qos).assignment;
        for edit in &edits {
            apply(edit, &mut jobs, &mut replicas, &mut qos);
            prop_assert_eq!(validate_qos(&jobs, &qos), Ok(()), "after {:?}", edit);
            let next = sticky(&jobs, replicas, Some(&current), &qos);
            assert_every_job_once(&jobs, replicas, &next);
            assert_dedicated_honoured(&jobs, replicas, &qos, &next);
            assert_weight_balanced(&jobs, &qos, &next);
            assert_fixed_point(Assign::Sticky, &jobs, replicas, &qos, &next);
            current = next.assignment;
        }
    }
}

#[test]
fn two_dedicated_jobs_on_three_workers_run_alone_on_the_lowest_ordinals_from_scratch() {
    let jobs: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    let qos = Qos {
        dedicated: vec!["d".into(), "b".into()],
        weights: [("a".to_string(), 3)].into_iter().collect(),
    };
    for strategy in Assign::ALL {
        let placement = assign_with_qos(strategy, &jobs, 3, None, &qos);
        assert_eq!(placement.dedicated_workers, vec![0, 1], "{strategy}");
        assert_eq!(placement.assignment.workers()[0], vec!["d".to_string()]);
        assert_eq!(placement.assignment.workers()[1], vec!["b".to_string()]);
        assert_eq!(
            placement.assignment.workers()[2],
            ["a", "c", "e"].map(String::from).to_vec()
        );
        assert!(placement.dedicated_unmet.is_empty());
    }
}

#[test]
fn every_job_dedicated_on_fewer_workers_than_jobs_leaves_one_worker_for_those_that_wait() {
    // Once a panic: with only dedicated jobs and fewer workers than jobs, every worker went to a
    // dedicated job and those left without one had nowhere to run.
    let jobs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let qos = Qos {
        dedicated: ["c", "a", "b"].map(String::from).to_vec(),
        weights: [("b".to_string(), 5)].into_iter().collect(),
    };
    for strategy in Assign::ALL {
        for replicas in 1..=2 {
            let placement = assign_with_qos(strategy, &jobs, replicas, None, &qos);
            assert_every_job_once(&jobs, replicas, &placement);
            assert_dedicated_honoured(&jobs, replicas, &qos, &placement);
        }
        let placement = assign_with_qos(strategy, &jobs, 2, None, &qos);
        assert_eq!(placement.dedicated_workers, vec![0], "{strategy}");
        assert_eq!(
            placement.dedicated_unmet,
            ["a", "b"].map(String::from).to_vec()
        );
        assert_eq!(
            placement.assignment.workers()[1],
            ["a", "b"].map(String::from).to_vec()
        );
    }
}
