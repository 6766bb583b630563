//! The per-worker layout of a pool's config (`rollout.policy: Acknowledge`): each worker reads
//! only its own slice, so a version change sends watch traffic only to the workers whose slice
//! changed, and no object grows with the pool.
//!
//! - The pool's ConfigMap `<name>` holds the rollout records (annotations) and `index.yml`: the
//!   config version and, for every worker with a slice, the version its slice was written at.
//! - Worker `<pod>` reads ConfigMap `<name>.<pod>` (labels `swarm.io/pool`, `swarm.io/worker`),
//!   whose `config.yml` is the whole config's format cut to that pod: its entry of `workloads`
//!   and of `transit`, and as `version` the config version the slice last changed at.
//!
//! The index is written first and the slices after it, so a crash or a deposed leader can leave
//! a slice behind its index entry, with a write of it possibly still in flight. Such a slice is
//! *unsettled*: it is fenced (re-applied over the resourceVersion read, so an older write in
//! flight can no longer land) before the planner trusts what it shows. Within one write, slices
//! that lose jobs are written before slices that gain any: a crash in between leaves a job in
//! nobody's slice, never in two.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use swarm_protocol::config::{CONFIG_KEY, WorkerConfig, Workload};
use swarm_protocol::names::{
    FENCED_AT_ANNOTATION, MANAGED_BY_LABEL, MANAGER, POOL_LABEL, WORKER_LABEL,
};
use swarm_protocol::slices::{INDEX_KEY, Index, slice_name};

use crate::api::crd::SwarmPool;
use crate::api::failure::{Failure, FailureReason};
use crate::state::config_map::CONFIG_MAP_MAX_BYTES;
use crate::state::records::Holders;
use crate::state::slice_summary::SliceSummary;

/// The index of a pool ConfigMap in this layout, if it is one.
pub fn index_of(main: &ConfigMap) -> Option<Result<Index, serde_yaml::Error>> {
    Some(Index::parse(main.data.as_ref()?.get(INDEX_KEY)?))
}

/// One worker's slice as a ConfigMap shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The config version the slice was written at.
    pub version: u64,
    /// The pod's workload, if the slice has one.
    pub workload: Option<Workload>,
    /// The jobs in transit from the pod.
    pub transit: Vec<String>,
    /// The index version a write of which this slice was fenced against.
    pub fenced_at: Option<u64>,
}

impl Slice {
    /// The slice in `cm` for `pod`; an unreadable one holds nothing at version 0.
    pub fn read(cm: &SliceSummary, pod: &str) -> Slice {
        let config = cm
            .config
            .as_deref()
            .and_then(|text| WorkerConfig::parse(text).ok());
        let fenced_at = cm.fenced_at;
        match config {
            Some(config) => Slice::of(&config, pod, config.version, fenced_at),
            None => Slice {
                version: 0,
                workload: None,
                transit: Vec::new(),
                fenced_at,
            },
        }
    }

    /// The slice of `config` for `pod`, at `version`.
    fn of(config: &WorkerConfig, pod: &str, version: u64, fenced_at: Option<u64>) -> Slice {
        Slice {
            version,
            workload: config.workload(pod).cloned(),
            transit: config
                .transit()
                .find(|(from, _)| *from == pod)
                .map(|(_, jobs)| jobs.to_vec())
                .unwrap_or_default(),
            fenced_at,
        }
    }

    /// Whether two slices list the same jobs, whatever their versions.
    fn same_content(&self, other: &Slice) -> bool {
        self.workload == other.workload && self.transit == other.transit
    }

    /// Whether this slice lists a job (run or in transit) that `before` does not.
    fn gains_over(&self, before: Option<&Slice>) -> bool {
        let had: BTreeSet<&str> = before
            .into_iter()
            .flat_map(|s| s.jobs())
            .map(String::as_str)
            .collect();
        self.jobs().any(|job| !had.contains(job.as_str()))
    }

    fn jobs(&self) -> impl Iterator<Item = &String> {
        self.workload
            .iter()
            .flat_map(|w| w.jobs.iter())
            .chain(&self.transit)
    }

    /// The `config.yml` text of this slice for `pod`.
    pub fn render(&self, pod: &str) -> String {
        WorkerConfig::new(
            self.version,
            self.workload.clone().map(|w| (pod.to_owned(), w)),
        )
        .with_transit([(pod.to_owned(), self.transit.clone())])
        .render()
    }
}

/// What a slice shows besides its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SliceHead {
    version: u64,
    fenced_at: Option<u64>,
}

/// The slices of one pool as observed: pod name to its ConfigMap.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// Each slice's ConfigMap, and its version and fence (read once: a pool may have
    /// thousands).
    by_pod: BTreeMap<String, (&'a SliceSummary, SliceHead)>,
    /// Each slice's jobs as read, until [`assemble`] moves them into the config the slices make
    /// up (a pool of 100,000 jobs would hold them twice).
    listed: Option<BTreeMap<String, Slice>>,
    /// The others given, by name: not this pool's slices, never written over.
    others: BTreeMap<String, &'a SliceSummary>,
}

impl<'a> Observed<'a> {
    /// The slices among `config_maps` that belong to the pool's ConfigMap `name`: labelled
    /// with a worker and named after it.
    pub fn of(name: &str, config_maps: impl IntoIterator<Item = &'a SliceSummary>) -> Self {
        let mut observed = Observed::default();
        let mut listed = BTreeMap::new();
        for cm in config_maps {
            let pod = cm
                .worker
                .as_ref()
                .filter(|pod| cm.name() == Some(slice_name(name, pod).as_str()));
            match pod {
                Some(pod) => {
                    let slice = Slice::read(cm, pod);
                    let head = SliceHead {
                        version: slice.version,
                        fenced_at: slice.fenced_at,
                    };
                    observed.by_pod.insert(pod.clone(), (cm, head));
                    listed.insert(pod.clone(), slice);
                }
                None => {
                    observed.others.insert(cm.name_any(), cm);
                }
            }
        }
        observed.listed = Some(listed);
        observed
    }

    /// The ConfigMap of `pod`'s slice, if there is one.
    pub fn get(&self, pod: &str) -> Option<&'a SliceSummary> {
        self.by_pod.get(pod).map(|(cm, _)| *cm)
    }

    /// What `pod`'s slice says, if there is one. Once [`assemble`] took the slices' jobs into
    /// its config, they are cut from `assembled`, that config; without it, read again.
    pub fn slice(&self, pod: &str, assembled: Option<&WorkerConfig>) -> Option<Slice> {
        let (cm, head) = self.by_pod.get(pod)?;
        if let Some(listed) = &self.listed {
            return listed.get(pod).cloned();
        }
        Some(match assembled {
            Some(config) => Slice::of(config, pod, head.version, head.fenced_at),
            None => Slice::read(cm, pod),
        })
    }

    /// The config version `pod`'s slice was written at, if there is one.
    pub fn version(&self, pod: &str) -> Option<u64> {
        self.by_pod.get(pod).map(|(_, head)| head.version)
    }

    /// Every slice: pod name and ConfigMap.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &'a SliceSummary)> {
        self.by_pod.iter().map(|(pod, (cm, _))| (pod.as_str(), *cm))
    }
}

/// The config the slices make up with their index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assembled {
    /// The config: the index's version, and every observed slice's workload and transit.
    pub config: WorkerConfig,
    /// Workers whose slice shows neither the version the index records nor a fence at it: a
    /// write of theirs may have been lost or may still land.
    pub unsettled: BTreeSet<String>,
}

/// The config of `index` and the observed `slices`. A slice the index does not list still
/// counts (its worker may run what it shows), and is deleted or rewritten by the next write.
/// The slices' jobs move into the config: read them from it after (see [`Observed::slice`]).
pub fn assemble(index: &Index, slices: &mut Observed) -> Assembled {
    let unsettled = index
        .workers
        .iter()
        .filter(|(pod, version)| {
            slices.by_pod.get(*pod).is_none_or(|(_, head)| {
                head.version != **version && head.fenced_at != Some(**version)
            })
        })
        .map(|(pod, _)| pod.clone())
        .collect();
    let mut workloads = Vec::new();
    let mut transit = Vec::new();
    let listed = match slices.listed.take() {
        Some(listed) => listed,
        // Taken by an earlier assembly: read the slices again.
        None => slices
            .by_pod
            .iter()
            .map(|(pod, (cm, _))| (pod.clone(), Slice::read(cm, pod)))
            .collect(),
    };
    for (pod, slice) in listed {
        if let Some(workload) = slice.workload {
            workloads.push((pod.clone(), workload));
        }
        transit.push((pod, slice.transit));
    }
    Assembled {
        config: WorkerConfig::new(index.version, workloads).with_transit(transit),
        unsettled,
    }
}

/// Pods whose holder record waits for the acknowledgement of a version later than their slice
/// shows (the write of that version never landed, and its slice was fenced as it was): their
/// slice must be written again, at a new version the worker can acknowledge.
pub fn lagging(holders: &Holders, slices: &Observed) -> BTreeSet<String> {
    holders
        .entries()
        .iter()
        .filter(|(_, holder)| !holder.gone)
        .filter(|(pod, holder)| {
            let shown = slices.version(pod);
            shown
                .zip(holder.version)
                .is_some_and(|(shown, waited)| shown < waited)
        })
        .map(|(pod, _)| pod.clone())
        .collect()
}

/// The pods `config` has a slice for: every pod with a workload or jobs in transit. Their
/// slices are cut one at a time ([`Slice::of`]): all at once they would copy the whole config.
fn slice_pods(config: &WorkerConfig) -> BTreeSet<&str> {
    config
        .workloads()
        .map(|(pod, _)| pod)
        .chain(config.transit().map(|(pod, _)| pod))
        .collect()
}

/// The writes that bring the slices to `config`, in their order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SliceWrites {
    /// Written first: fences, and slices that gain no job.
    pub first: Vec<ConfigMap>,
    /// Slices no worker needs any more (their observed copies), deleted with the first.
    pub deletes: Vec<SliceSummary>,
    /// Written once all of `first` and `deletes` went through: slices that gain a job.
    pub then: Vec<ConfigMap>,
}

impl SliceWrites {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty() && self.deletes.is_empty() && self.then.is_empty()
    }
}

/// The index and the slice writes for `config` over the observed slices (whose jobs
/// `assembled` holds once assembled, see [`Observed::slice`]). A slice whose content is
/// unchanged (and not in `rewrite`) keeps its version; any other is written at `version`,
/// which must be new: the caller makes it `config`'s version when some slice changes (a slice
/// rewritten carries a version the index has not recorded for it before).
pub(crate) fn desired(
    pool: &SwarmPool,
    name: &str,
    config: &WorkerConfig,
    (observed, assembled): (&Observed, Option<&WorkerConfig>),
    rewrite: &BTreeSet<String>,
    version: u64,
) -> Result<(Index, SliceWrites), Failure> {
    let mut index = Index {
        version: config.version,
        workers: BTreeMap::new(),
    };
    let mut writes = SliceWrites::default();
    for pod in slice_pods(config) {
        check_ownership(pool, name, pod, observed)?;
        let slice = Slice::of(config, pod, version, None);
        let before = observed.slice(pod, assembled);
        if let Some(before) = &before
            && before.same_content(&slice)
            && !rewrite.contains(pod)
        {
            index.workers.insert(pod.to_owned(), before.version);
            continue;
        }
        index.workers.insert(pod.to_owned(), version);
        let cm = slice_config_map(pool, name, pod, &slice)?;
        if slice.gains_over(before.as_ref()) {
            writes.then.push(cm);
        } else {
            writes.first.push(cm);
        }
    }
    writes.deletes = observed
        .iter()
        .filter(|(pod, _)| !index.workers.contains_key(*pod))
        .map(|(_, cm)| cm.clone())
        .collect();
    Ok((index, writes))
}

/// The fences the unsettled slices need: each re-applied as observed (a missing one created
/// empty) with the index version it is fenced at, so that a write of that version still in
/// flight, made over an older resourceVersion, can no longer land.
pub(crate) fn fences(
    pool: &SwarmPool,
    name: &str,
    index: &Index,
    (observed, assembled): (&Observed, Option<&WorkerConfig>),
    unsettled: &BTreeSet<String>,
) -> Result<SliceWrites, Failure> {
    let first = unsettled
        .iter()
        .filter_map(|pod| Some((pod, *index.workers.get(pod)?)))
        .map(|(pod, at)| {
            let mut slice = observed.slice(pod, assembled).unwrap_or(Slice {
                version: 0,
                workload: None,
                transit: Vec::new(),
                fenced_at: None,
            });
            slice.fenced_at = Some(at);
            slice_config_map(pool, name, pod, &slice)
        })
        .collect::<Result<_, _>>()?;
    Ok(SliceWrites {
        first,
        ..SliceWrites::default()
    })
}

/// A ConfigMap at the name of `pod`'s slice that is not the pool's is never written over.
fn check_ownership(
    pool: &SwarmPool,
    name: &str,
    pod: &str,
    observed: &Observed,
) -> Result<(), Failure> {
    let slice = slice_name(name, pod);
    let foreign = match (observed.get(pod), observed.others.get(&slice)) {
        (_, Some(_)) => true,
        (Some(cm), None) => cm
            .controller_uid
            .as_ref()
            .is_some_and(|uid| Some(uid) != pool.metadata.uid.as_ref()),
        (None, None) => false,
    };
    if foreign {
        return Err(Failure::new(
            FailureReason::ConfigMapConflict,
            format!(
                "ConfigMap {slice}, worker {pod}'s own under rollout.policy: Acknowledge, exists and is not this pool's; delete or rename it"
            ),
        ));
    }
    Ok(())
}

/// The ConfigMap of `pod`'s slice, owned by the pool.
fn slice_config_map(
    pool: &SwarmPool,
    name: &str,
    pod: &str,
    slice: &Slice,
) -> Result<ConfigMap, Failure> {
    let text = slice.render(pod);
    let size = CONFIG_KEY.len() + text.len();
    if size > CONFIG_MAP_MAX_BYTES {
        return Err(Failure::new(
            FailureReason::ConfigMapTooLarge,
            format!(
                "worker {pod}'s config.yml would be {size} bytes; one worker's ConfigMap holds at most {CONFIG_MAP_MAX_BYTES}: add workers"
            ),
        ));
    }
    let annotations = slice
        .fenced_at
        .map(|at| BTreeMap::from([(FENCED_AT_ANNOTATION.to_owned(), at.to_string())]));
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(slice_name(name, pod)),
            namespace: pool.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned()),
                (POOL_LABEL.to_owned(), pool.name_any()),
                (WORKER_LABEL.to_owned(), pod.to_owned()),
            ])),
            annotations,
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> SwarmPool {
        let mut pool = SwarmPool::new(
            "p",
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "w"}},
                "jobs": ["a", "b", "c"],
            }))
            .unwrap(),
        );
        pool.metadata.namespace = Some("ns".into());
        pool.metadata.uid = Some("pool-uid".into());
        pool
    }

    fn workload(version: u64, jobs: &[&str]) -> Workload {
        Workload {
            version,
            jobs: jobs.iter().map(|j| j.to_string()).collect(),
        }
    }

    /// `w-0` runs `a`, `w-1` runs `b` and has `c` in transit, at version `version`.
    fn config(version: u64) -> WorkerConfig {
        WorkerConfig::new(
            version,
            [
                ("w-0".to_owned(), workload(version, &["a"])),
                ("w-1".to_owned(), workload(version, &["b"])),
            ],
        )
        .with_transit([("w-1".to_owned(), vec!["c".to_owned()])])
    }

    /// The index that records every slice of `cms` at the version it shows.
    fn index_of(cms: &[SliceSummary]) -> Index {
        let observed = Observed::of("p-config", cms);
        let workers: BTreeMap<String, u64> = observed
            .iter()
            .map(|(pod, _)| (pod.to_owned(), observed.version(pod).unwrap()))
            .collect();
        Index {
            version: workers.values().copied().max().unwrap_or(0),
            workers,
        }
    }

    /// The ConfigMaps a write of `config` over nothing creates, as the operator reads them.
    fn written(config: &WorkerConfig) -> (Index, Vec<SliceSummary>) {
        let (index, writes) = desired(
            &pool(),
            "p-config",
            config,
            (&Observed::default(), None),
            &BTreeSet::new(),
            config.version,
        )
        .unwrap();
        let cms = writes.first.iter().chain(&writes.then);
        (index, cms.map(SliceSummary::from).collect())
    }

    #[test]
    fn each_worker_gets_its_own_slice_and_the_slices_make_up_the_config() {
        let (index, cms) = written(&config(3));
        let names: Vec<_> = cms.iter().map(|cm| cm.name().unwrap()).collect();
        assert_eq!(names, ["p-config.w-0", "p-config.w-1"]);
        assert_eq!(
            index.workers,
            BTreeMap::from([("w-0".into(), 3), ("w-1".into(), 3)])
        );
        let w1 = cms[1].config.as_ref().unwrap();
        assert!(!w1.contains("w-0"), "{w1}");
        let assembled = assemble(&index, &mut Observed::of("p-config", &cms));
        assert_eq!(assembled.config, config(3));
        assert!(assembled.unsettled.is_empty());
        // Another pool's ConfigMaps, and ones not named after their worker, are not slices.
        let mut stray = cms[0].clone();
        stray.metadata.name = Some("other.w-0".into());
        assert!(Observed::of("p-config", [&stray]).get("w-0").is_none());
        // A ConfigMap of someone else's at a slice's name is never written over.
        let mut theirs = cms[0].clone();
        (theirs.pool, theirs.worker) = (None, None);
        let error = desired(
            &pool(),
            "p-config",
            &config(4),
            (&Observed::of("p-config", [&theirs]), None),
            &BTreeSet::new(),
            4,
        )
        .unwrap_err();
        assert_eq!(error.reason, FailureReason::ConfigMapConflict);
        assert!(error.message.contains("p-config.w-0"), "{}", error.message);
    }

    #[test]
    fn only_changed_slices_are_written_and_those_that_gain_a_job_go_last() {
        let (_, cms) = written(&config(3));
        let observed = Observed::of("p-config", &cms);
        // `c` goes from transit to w-0: w-1 loses it, w-0 gains it.
        let next = WorkerConfig::new(
            4,
            [
                ("w-0".to_owned(), workload(4, &["a", "c"])),
                ("w-1".to_owned(), workload(3, &["b"])),
            ],
        );
        let (index, writes) = desired(
            &pool(),
            "p-config",
            &next,
            (&observed, None),
            &BTreeSet::new(),
            4,
        )
        .unwrap();
        let names = |cms: &[ConfigMap]| cms.iter().map(|cm| cm.name_any()).collect::<Vec<_>>();
        assert_eq!(names(&writes.first), ["p-config.w-1"]);
        assert_eq!(names(&writes.then), ["p-config.w-0"]);
        assert!(writes.deletes.is_empty());
        assert_eq!(index.workers["w-0"], 4);

        // The same once the slices are assembled: their jobs are then read from the config.
        let mut assembled_from = observed.clone();
        let assembled = assemble(&index_of(&cms), &mut assembled_from).config;
        let after_assembly = desired(
            &pool(),
            "p-config",
            &next,
            (&assembled_from, Some(&assembled)),
            &BTreeSet::new(),
            4,
        )
        .unwrap();
        assert_eq!(after_assembly, (index, writes));

        // Unchanged: nothing to write, and each slice keeps its version.
        let (index, writes) = desired(
            &pool(),
            "p-config",
            &config(3),
            (&assembled_from, Some(&assembled)),
            &BTreeSet::new(),
            4,
        )
        .unwrap();
        assert!(writes.is_empty());
        assert_eq!(index.workers["w-1"], 3);
    }

    #[test]
    fn a_worker_with_nothing_left_has_its_slice_deleted() {
        let (_, cms) = written(&config(3));
        let observed = Observed::of("p-config", &cms);
        let next = WorkerConfig::new(4, [("w-0".to_owned(), workload(4, &["a", "b", "c"]))]);
        let (index, writes) = desired(
            &pool(),
            "p-config",
            &next,
            (&observed, None),
            &BTreeSet::new(),
            4,
        )
        .unwrap();
        assert_eq!(writes.deletes.len(), 1);
        assert_eq!(writes.deletes[0].name_any(), "p-config.w-1");
        assert!(!index.workers.contains_key("w-1"));
    }

    #[test]
    fn a_slice_behind_its_index_is_unsettled_until_fenced_and_then_counts_as_it_shows() {
        let (mut index, cms) = written(&config(3));
        // A write of version 4 to w-1 was recorded in the index but never landed (yet).
        index.workers.insert("w-1".into(), 4);
        index.version = 4;
        // w-2's first slice never landed at all.
        index.workers.insert("w-2".into(), 4);
        let mut observed = Observed::of("p-config", &cms);
        let assembled = assemble(&index, &mut observed);
        assert_eq!(
            assembled.unsettled,
            BTreeSet::from(["w-1".to_owned(), "w-2".to_owned()])
        );
        let fences = fences(
            &pool(),
            "p-config",
            &index,
            (&observed, Some(&assembled.config)),
            &assembled.unsettled,
        )
        .unwrap();
        assert_eq!(fences.first.len(), 2);
        // The fence keeps what the slice shows: a worker must not acknowledge the version it
        // never read.
        let fenced: Vec<SliceSummary> = fences.first.iter().map(SliceSummary::from).collect();
        let fenced_w1 = Slice::read(&fenced[0], "w-1");
        assert_eq!(fenced_w1.version, 3);
        assert_eq!(fenced_w1.transit, ["c"]);
        assert_eq!(fenced_w1.fenced_at, Some(4));
        let fenced_w2 = Slice::read(&fenced[1], "w-2");
        assert_eq!((fenced_w2.version, fenced_w2.workload), (0, None));

        let after = [cms[0].clone(), fenced[0].clone(), fenced[1].clone()];
        let settled = assemble(&index, &mut Observed::of("p-config", &after));
        assert!(settled.unsettled.is_empty());
        assert_eq!(settled.config.workload("w-1"), Some(&workload(3, &["b"])));
    }

    #[test]
    fn a_slice_too_large_for_one_config_map_fails_naming_the_worker() {
        let jobs: Vec<String> = (0..40_000).map(|i| format!("job-{i:012}")).collect();
        let big = WorkerConfig::new(1, [("w-0".to_owned(), Workload { version: 1, jobs })]);
        let error = desired(
            &pool(),
            "p-config",
            &big,
            (&Observed::default(), None),
            &BTreeSet::new(),
            1,
        )
        .unwrap_err();
        assert!(error.message.contains("worker w-0"), "{}", error.message);
    }
}
