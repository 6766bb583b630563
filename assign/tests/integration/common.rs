//! Generators and checks shared by the property tests.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use swarm_assign::{Assignment, MAX_WEIGHT, Qos};

/// The 27 stream jobs of the predecessor's example configuration, in its order.
const EXAMPLE_JOBS: [&str; 27] = [
    "stream:xxrtve1",
    "stream:xxrtve2",
    "stream:zrtve2:new",
    "stream:zrtve1:new",
    "stream:zrtve0:new",
    "stream:cctv0:updated",
    "stream:history:new",
    "stream:foo:new",
    "stream:xxctv3:new",
    "stream:cctv3:updated",
    "stream:xxctv0:updated",
    "stream:xxctv10:updated",
    "stream:xxctv11:updated",
    "stream:xxctv12:updated",
    "stream:xxctv13:updated",
    "stream:xxctv14:updated",
    "stream:yxctv1:updated",
    "stream:yxctv2:updated",
    "stream:yxctv3:updated",
    "stream:xabcn0:updated",
    "stream:xacb01:updated",
    "stream:xacb02:updated",
    "stream:xacb03:updated",
    "stream:xacb04:updated",
    "stream:sportnews0:updated",
    "stream:cars:new",
    "stream:cars:updated",
];

pub fn example_jobs() -> Vec<String> {
    EXAMPLE_JOBS.map(String::from).to_vec()
}

/// A job name: stream-like, any printable unicode, or long (200..400 chars).
pub fn job_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "stream:[a-z]{1,8}[0-9]{0,3}(:new|:updated)?",
        2 => "\\PC{1,12}",
        // Long names, built by repetition: generating 300 random characters each is slow.
        1 => ("[a-z:/é漢]{1,4}", "[0-9]{1,6}", 60_usize..120)
            .prop_map(|(part, tag, times)| format!("{}{tag}", part.repeat(times))),
    ]
}

/// A list of distinct job names of length in `len`, in random order.
pub fn jobs(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(job_name(), len).prop_map(dedup)
}

/// Removes repeated names, keeping the first occurrence.
pub fn dedup(names: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .into_iter()
        .filter(|name| seen.insert(name.clone()))
        .collect()
}

/// A name guaranteed to be absent from `jobs`.
pub fn fresh_name(jobs: &[String], seed: usize) -> String {
    (seed..)
        .map(|n| format!("fresh-job-{n}"))
        .find(|name| !jobs.contains(name))
        .expect("an unused name exists")
}

/// Owner of every job; panics if a job is held twice (so callers assert exactly-once first).
pub fn owners(assignment: &Assignment) -> HashMap<&str, usize> {
    let mut owners = HashMap::new();
    for (ordinal, held) in assignment.workers().iter().enumerate() {
        for job in held {
            assert!(
                owners.insert(job.as_str(), ordinal).is_none(),
                "{job} held twice"
            );
        }
    }
    owners
}

/// Every job of `jobs` is held by exactly one worker and nothing else is held.
pub fn assert_exactly_once(jobs: &[String], assignment: &Assignment) {
    let owners = owners(assignment);
    assert_eq!(owners.len(), jobs.len(), "every job held, nothing else");
    for job in jobs {
        assert!(
            owners.contains_key(job.as_str()),
            "{job:?} is held by no worker"
        );
    }
}

/// Every worker holds floor(J/N) or ceil(J/N) jobs.
pub fn assert_balanced(job_count: usize, assignment: &Assignment) {
    let n = assignment.replicas();
    let (low, high) = (job_count / n, job_count.div_ceil(n));
    for (ordinal, held) in assignment.workers().iter().enumerate() {
        assert!(
            (low..=high).contains(&held.len()),
            "worker {ordinal} holds {} jobs, expected {low}..={high}",
            held.len()
        );
    }
}

/// Within each worker, jobs appear in spec order.
pub fn assert_spec_order(jobs: &[String], assignment: &Assignment) {
    let position: HashMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, job)| (job.as_str(), i))
        .collect();
    for held in assignment.workers() {
        let positions: Vec<usize> = held.iter().map(|job| position[job.as_str()]).collect();
        assert!(positions.is_sorted(), "jobs of a worker follow spec order");
    }
}

/// Jobs present before and after whose owner changed, with their (old, new) owner.
pub fn moves<'a>(before: &'a Assignment, after: &'a Assignment) -> Vec<(&'a str, usize, usize)> {
    let old = owners(before);
    let mut moved: Vec<(&str, usize, usize)> = owners(after)
        .into_iter()
        .filter_map(|(job, new)| old.get(job).filter(|&&o| o != new).map(|&o| (job, o, new)))
        .collect();
    moved.sort_unstable();
    moved
}

/// An assignment of `jobs` (each exactly once) over `replicas` workers with arbitrary loads,
/// driven by `picks` (one ordinal hint per job).
pub fn arbitrary_assignment(jobs: &[String], replicas: usize, picks: &[usize]) -> Assignment {
    let mut workers = vec![Vec::new(); replicas];
    for (i, job) in jobs.iter().enumerate() {
        let pick = picks.get(i).copied().unwrap_or(i);
        workers[pick % replicas].push(job.clone());
    }
    Assignment::new(workers)
}

/// The fewest moves any perfectly balanced assignment of `jobs` over `replicas` workers needs
/// from `current` (which holds each job at most once): every job on a removed worker moves, and
/// a worker keeps at most its target, where the `J % N` larger targets go to whichever workers
/// keep the most.
pub fn lower_bound(jobs: &[String], replicas: usize, current: &Assignment) -> usize {
    let wanted: HashSet<&str> = jobs.iter().map(String::as_str).collect();
    let mut existing = 0;
    let mut kept: Vec<usize> = vec![0; replicas];
    for (ordinal, held) in current.workers().iter().enumerate() {
        for _ in held.iter().filter(|job| wanted.contains(job.as_str())) {
            existing += 1;
            if ordinal < replicas {
                kept[ordinal] += 1;
            }
        }
    }
    let (q, r) = (jobs.len() / replicas, jobs.len() % replicas);
    kept.sort_unstable_by(|a, b| b.cmp(a));
    let stay: usize = kept
        .iter()
        .enumerate()
        .map(|(rank, &k)| k.min(q + usize::from(rank < r)))
        .sum();
    existing - stay
}

/// Shuffles `items` deterministically from `seed` (Fisher-Yates over xorshift64*).
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let random = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let j = usize::try_from(random % (i as u64 + 1)).expect("fits");
        items.swap(i, j);
    }
}

/// A job weight: mostly 1 to 10, now and then a large one up to [`MAX_WEIGHT`].
pub fn job_weight() -> impl Strategy<Value = u64> {
    prop_oneof![
        12 => 1_u64..=10,
        1 => 11_u64..=1_000,
        1 => 1_000_u64..=MAX_WEIGHT,
    ]
}

/// Which jobs a generated [`Qos`] dedicates, before the job list is known.
#[derive(Clone, Debug)]
pub enum DedicatedPicks {
    /// The jobs at these indices (modulo the job count), repeats dropped, in this order.
    Indices(Vec<usize>),
    /// Every job but `shared` of them, in an order shuffled from `seed`.
    AllBut { seed: u64, shared: usize },
}

/// The raw material of a valid [`Qos`] over a job list not yet known (see [`build_qos`]).
#[derive(Clone, Debug)]
pub struct QosPicks {
    pub dedicated: DedicatedPicks,
    /// `weights[i]` is the weight of the `i`-th job, if listed (jobs past the end weigh 1).
    pub weights: Vec<Option<u64>>,
}

/// Dedicated lists from none to every job (few, many, all but a few, all), and weights that are
/// absent, all 1, or mixed.
pub fn qos_picks() -> impl Strategy<Value = QosPicks> {
    let dedicated = prop_oneof![
        2 => Just(DedicatedPicks::Indices(Vec::new())),
        4 => prop::collection::vec(any::<usize>(), 1..8).prop_map(DedicatedPicks::Indices),
        2 => prop::collection::vec(any::<usize>(), 0..200).prop_map(DedicatedPicks::Indices),
        2 => (any::<u64>(), 0_usize..3)
            .prop_map(|(seed, shared)| DedicatedPicks::AllBut { seed, shared }),
    ];
    (dedicated, weight_picks()).prop_map(|(dedicated, weights)| QosPicks { dedicated, weights })
}

/// Weights of the jobs by position: none listed, some listed as 1, or mixed.
pub fn weight_picks() -> impl Strategy<Value = Vec<Option<u64>>> {
    prop_oneof![
        1 => Just(Vec::new()),
        1 => prop::collection::vec(prop::option::of(Just(1_u64)), 0..200),
        4 => prop::collection::vec(prop::option::weighted(0.7, job_weight()), 0..200),
    ]
}

/// A neutral [`Qos`]: no dedicated job, every listed weight 1.
pub fn neutral_qos_picks() -> impl Strategy<Value = QosPicks> {
    prop::collection::vec(prop::option::of(Just(1_u64)), 0..200).prop_map(|weights| QosPicks {
        dedicated: DedicatedPicks::Indices(Vec::new()),
        weights,
    })
}

/// The valid [`Qos`] that `picks` describe over `jobs` (every name in `jobs`, no repeat).
pub fn build_qos(jobs: &[String], picks: &QosPicks) -> Qos {
    let dedicated = if jobs.is_empty() {
        Vec::new()
    } else {
        match &picks.dedicated {
            DedicatedPicks::Indices(indices) => dedup(
                indices
                    .iter()
                    .map(|i| jobs[i % jobs.len()].clone())
                    .collect(),
            ),
            DedicatedPicks::AllBut { seed, shared } => {
                let mut all = jobs.to_vec();
                shuffle(&mut all, *seed);
                all.split_off((*shared).min(all.len()))
            }
        }
    };
    let weights = jobs
        .iter()
        .zip(&picks.weights)
        .filter_map(|(job, weight)| weight.map(|weight| (job.clone(), weight)))
        .collect();
    Qos { dedicated, weights }
}

/// The number of cases of a property test: `PROPTEST_CASES` when set, else `default`.
/// (`ProptestConfig::with_cases` alone ignores the variable.)
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}
