//! Pure reconcile planning: the observed state of one pool in, what to do about it out.
//!
//! No client, no clock, no I/O: the controller gathers [`Observed`], calls [`plan`], carries
//! out the [`Plan`] and, when the plan wrote the ConfigMap or asked for a live pod list, plans
//! again on the fresher state. Every decision the operator makes is taken here, so the tests
//! of this module are the tests of the operator's behaviour.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use swarm_assign::worker_config::WorkerConfig;
use swarm_assign::{PlanRequest, validate_jobs};

use crate::conditions::{Verdict, reason};
use crate::crd::{Phase, RolloutPolicy, SwarmPool, SwarmPoolStatus};
use crate::rollout::{
    self, PENDING_REFRESH_ANNOTATION, PendingRefresh, PodDelete, WorkerPod, Workers,
};

/// The ConfigMap key the workers read.
pub const CONFIG_KEY: &str = "config.yml";
/// ConfigMap annotation with the config version, as a decimal string.
pub const VERSION_ANNOTATION: &str = "swarm.io/version";
/// ConfigMap label naming the pool that writes it.
pub const POOL_LABEL: &str = "swarm.io/pool";
/// Standard label naming the tool that manages an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] and the server-side apply field manager.
pub const MANAGER: &str = "swarm-operator";
/// The most data a ConfigMap can hold (keys plus values), as the API server enforces it.
pub const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;
/// The most annotation data an object can hold (keys plus values), as the API server enforces it.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;
/// How long a worker pod may be not Ready before the pool counts as Degraded rather than
/// starting up (the role of a Deployment's progress deadline).
pub const STARTUP_GRACE: SignedDuration = SignedDuration::from_mins(5);
/// Safety-net requeue when nothing is in flight.
pub const REQUEUE_IDLE: Duration = Duration::from_secs(300);
/// Requeue while a rollout waits on pods (watch events normally come first).
pub const REQUEUE_ROLLING: Duration = Duration::from_secs(15);
/// Requeue for a ConfigMap conflict, whose resolution (deleting the other ConfigMap) is not
/// watched.
pub const REQUEUE_CONFLICT: Duration = Duration::from_secs(60);

/// Everything the planner looks at for one pool.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The pool.
    pub pool: &'a SwarmPool,
    /// StatefulSets of the pool's namespace (others are ignored); the selector is applied here.
    pub statefulsets: Vec<&'a StatefulSet>,
    /// Pods of the pool's namespace (only those controlled by the matched StatefulSet count).
    pub pods: Vec<&'a Pod>,
    /// The other SwarmPools of the namespace: of several pools selecting one StatefulSet, only
    /// the oldest manages it.
    pub other_pools: Vec<&'a SwarmPool>,
    /// Whether `pods` was listed from the API server after the last ConfigMap write that
    /// recorded unresolved stale workers (rather than read from the watch cache).
    pub pods_are_live: bool,
    /// The ConfigMap named by the pool, if it exists.
    pub config_map: Option<&'a ConfigMap>,
    /// Uids of pods this operator already asked to delete (terminating, whatever the cache says).
    pub deleting: &'a BTreeSet<String>,
    /// The current time.
    pub now: Timestamp,
}

/// What the controller should do for one pool.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The ConfigMap to server-side apply (only when it differs from the observed one).
    pub apply: Option<ConfigMap>,
    /// The stale-worker bookkeeping must be checked against pods listed live (the cache may lag
    /// behind pods created or replaced around a ConfigMap write): list them and plan again.
    pub needs_live_pods: bool,
    /// Label selector of the matched StatefulSet's pods, for that live list.
    pub pod_selector: Option<String>,
    /// Stale pods to delete now, each with a uid precondition.
    pub deletes: Vec<PodDelete>,
    /// The status to report (patched only when it differs from the pool's).
    pub status: SwarmPoolStatus,
    /// Events to publish about the pool.
    pub events: Vec<PlannedEvent>,
    /// When to reconcile again if nothing else triggers it.
    pub requeue_after: Duration,
}

/// An event about the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: &'static str,
    /// What the operator did or tried.
    pub action: &'static str,
    /// Human-readable note.
    pub note: String,
    /// The pod the event is about besides the pool (name, uid), if any.
    pub related_pod: Option<(String, String)>,
}

/// Why the pool cannot be reconciled as specified.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    reason: &'static str,
    message: String,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// What is known about the pool while planning; the status is built from it either way.
struct Facts {
    statefulset: Option<String>,
    workers: Option<Workers>,
}

/// Plans one reconcile of `observed.pool`.
pub fn plan(observed: &Observed) -> Plan {
    let mut facts = Facts {
        statefulset: None,
        workers: None,
    };
    match plan_valid(observed, &mut facts) {
        Ok(plan) => plan,
        Err(failure) => plan_failure(observed, &facts, failure),
    }
}

fn plan_valid(o: &Observed, facts: &mut Facts) -> Result<Plan, Failure> {
    let pool = o.pool;
    let spec = &pool.spec;
    let namespace = pool.namespace().unwrap_or_default();

    let selector = pool_selector(&spec.selector)?;
    let sts = match_statefulset(&selector, &namespace, &o.statefulsets)?;
    let sts_name = sts.name_any();
    if let Some(owner) = older_pool_selecting(pool, sts, &o.other_pools) {
        return Err(Failure::new(
            reason::STATEFUL_SET_IN_USE,
            format!(
                "StatefulSet {sts_name} is already managed by the older SwarmPool {owner}; a StatefulSet's workers can belong to one pool only"
            ),
        ));
    }
    facts.statefulset = Some(sts_name.clone());

    let replicas = sts
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize;
    let workers = worker_pods(sts, replicas, &o.pods, o.deleting);
    facts.workers = Some(workers.clone());

    validate_jobs(&spec.jobs).map_err(|e| Failure::new(reason::INVALID_JOBS, e.to_string()))?;
    let max_unavailable = rollout::max_unavailable(&spec.rollout.max_unavailable, replicas)
        .map_err(|e| Failure::new(reason::INVALID_MAX_UNAVAILABLE, e.to_string()))?;

    let cm_name = pool.config_map_name();
    if let Some(cm) = o.config_map {
        check_ownership(pool, cm, &cm_name)?;
    }

    // The previous config: what the ConfigMap holds now, else only its version annotation.
    let previous = o.config_map.map(read_previous);
    let unreadable = previous.as_ref().and_then(|p| p.error.clone());
    let previous_config = previous.as_ref().and_then(|p| p.config.clone());
    let outcome = swarm_assign::plan(&PlanRequest {
        statefulset: &sts_name,
        replicas,
        jobs: &spec.jobs,
        strategy: spec.strategy,
        previous: previous_config.as_ref(),
    })
    .map_err(|e| Failure::new(reason::INVALID_JOBS, e.to_string()))?;
    let text = outcome.config.render();
    let size = CONFIG_KEY.len() + text.len();
    if size > CONFIG_MAP_MAX_BYTES {
        return Err(Failure::new(
            reason::CONFIG_MAP_TOO_LARGE,
            format!(
                "config.yml would be {size} bytes for {} jobs; a ConfigMap holds at most {CONFIG_MAP_MAX_BYTES}",
                spec.jobs.len()
            ),
        ));
    }

    // Stale-worker bookkeeping.
    let observed_pending = o
        .config_map
        .and_then(|cm| {
            PendingRefresh::parse(
                cm.annotations()
                    .get(PENDING_REFRESH_ANNOTATION)
                    .map(String::as_str),
            )
            .ok()
        })
        .unwrap_or_default();
    let mut pending = observed_pending.clone();
    pending.retain_workers(&workers);
    let mut needs_live_pods = false;
    match spec.rollout.policy {
        // Workers reload by themselves: nothing to track.
        RolloutPolicy::None => pending = PendingRefresh::default(),
        RolloutPolicy::DeletePods => {
            if o.pods_are_live {
                pending.resolve(&workers);
                pending.drop_replaced(&workers);
            } else if pending.has_unresolved() || !pending.replaced(&workers).is_empty() {
                needs_live_pods = true;
            }
            if outcome.changed {
                pending.mark_unresolved(
                    outcome
                        .movement
                        .workers_touched
                        .iter()
                        .map(String::as_str)
                        .filter(|pod| workers.contains(pod)),
                );
            }
        }
    }

    let bookkeeping = PENDING_REFRESH_ANNOTATION.len() + pending.resolved_size_bound();
    if bookkeeping > ANNOTATIONS_MAX_BYTES {
        return Err(Failure::new(
            reason::CONFIG_MAP_TOO_LARGE,
            format!(
                "the list of {} workers to refresh would be {bookkeeping} bytes of annotations; an object holds at most {ANNOTATIONS_MAX_BYTES}",
                pending.entries().len()
            ),
        ));
    }
    let desired = desired_config_map(pool, &cm_name, &text, outcome.config.version, &pending);
    let outdated = o
        .config_map
        .is_none_or(|cm| !config_map_current(cm, &desired));

    let mut events = Vec::new();
    let paused = spec.paused;
    let apply = (outdated && !paused).then_some(desired);
    if apply.is_some() && outcome.changed {
        events.push(PlannedEvent {
            warning: false,
            reason: reason::REBALANCED,
            action: "WriteConfig",
            note: rebalanced_note(outcome.config.version, &outcome.movement),
            related_pod: None,
        });
    }
    if let (Some(error), Some(_)) = (&unreadable, &apply) {
        events.push(PlannedEvent {
            warning: true,
            reason: reason::CONFIG_UNREADABLE,
            action: "WriteConfig",
            note: format!("ConfigMap {cm_name}: {error}; rebuilt the assignment from scratch"),
            related_pod: None,
        });
    }
    if paused {
        needs_live_pods = false;
    }

    let deletes = if paused
        || apply.is_some()
        || needs_live_pods
        || spec.rollout.policy == RolloutPolicy::None
    {
        Vec::new()
    } else {
        rollout::deletes(&pending, &workers, max_unavailable)
    };
    for d in &deletes {
        events.push(PlannedEvent {
            warning: false,
            reason: reason::REFRESHING_WORKER,
            action: "DeletePod",
            note: format!(
                "deleting pod {} (uid {}) so it restarts on config version {}",
                d.name, d.uid, outcome.config.version
            ),
            related_pod: Some((d.name.clone(), d.uid.clone())),
        });
    }
    let version = o.config_map.and_then(observed_version);

    // Paused: report what is written, not what would be.
    let reported_pending = if paused {
        let mut p = observed_pending;
        p.retain_workers(&workers);
        p
    } else {
        pending
    };
    let stale = reported_pending.stale_workers(&workers);
    let verdict = verdict(
        &workers,
        &stale,
        paused && (outdated || !stale.is_empty()),
        o.now,
    );
    let requeue_after = match verdict.phase {
        Phase::RollingOut | Phase::Pending if !paused => REQUEUE_ROLLING,
        _ => REQUEUE_IDLE,
    };
    let status = SwarmPoolStatus {
        observed_generation: pool.metadata.generation,
        phase: Some(verdict.phase),
        stateful_set: Some(sts_name),
        workers: count(workers.len()),
        ready_workers: count(workers.ready()),
        ready: Some(format!("{}/{}", workers.ready(), workers.len())),
        jobs: count(spec.jobs.len()),
        unassigned_jobs: count(outcome.movement.unassigned.len()),
        version: version.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        stale_workers: stale,
        conditions: verdict.conditions(previous_conditions(pool), pool.metadata.generation, o.now),
    };
    Ok(Plan {
        apply,
        needs_live_pods,
        pod_selector: pod_selector(sts),
        deletes,
        status,
        events,
        requeue_after,
    })
}

fn plan_failure(o: &Observed, facts: &Facts, failure: Failure) -> Plan {
    let pool = o.pool;
    let previous = pool.status.as_ref();
    // Warn on the transition into this failure, not on every reconcile that still sees it.
    let already_reported = previous.is_some_and(|s| {
        s.phase == Some(Phase::Failed)
            && s.conditions
                .iter()
                .any(|c| c.type_ == crate::conditions::READY && c.reason == failure.reason)
    });
    let events = if already_reported {
        Vec::new()
    } else {
        vec![PlannedEvent {
            warning: true,
            reason: failure.reason,
            action: "Reconcile",
            note: failure.message.clone(),
            related_pod: None,
        }]
    };
    // Conflicts end when another object goes away, which is not watched.
    let requeue_after =
        if [reason::CONFIG_MAP_CONFLICT, reason::STATEFUL_SET_IN_USE].contains(&failure.reason) {
            REQUEUE_CONFLICT
        } else {
            REQUEUE_IDLE
        };
    let verdict = Verdict::new(Phase::Failed, failure.reason, failure.message);
    let workers = facts.workers.as_ref();
    let stale = match (workers, o.config_map) {
        (Some(workers), Some(cm)) => {
            let mut p = PendingRefresh::parse(
                cm.annotations()
                    .get(PENDING_REFRESH_ANNOTATION)
                    .map(String::as_str),
            )
            .unwrap_or_default();
            p.retain_workers(workers);
            p.stale_workers(workers)
        }
        _ => Vec::new(),
    };
    let status = SwarmPoolStatus {
        observed_generation: pool.metadata.generation,
        phase: Some(Phase::Failed),
        stateful_set: facts.statefulset.clone(),
        workers: workers.map_or(0, |w| count(w.len())),
        ready_workers: workers.map_or(0, |w| count(w.ready())),
        ready: workers.map(|w| format!("{}/{}", w.ready(), w.len())),
        jobs: count(pool.spec.jobs.len()),
        unassigned_jobs: previous.map_or(0, |s| s.unassigned_jobs),
        version: o
            .config_map
            .and_then(observed_version)
            .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        stale_workers: stale,
        conditions: verdict.conditions(previous_conditions(pool), pool.metadata.generation, o.now),
    };
    Plan {
        apply: None,
        needs_live_pods: false,
        pod_selector: None,
        deletes: Vec::new(),
        status,
        events,
        requeue_after,
    }
}

/// The phase rules, in order:
/// 1. Paused with changes not written or stale workers not refreshed: `Pending` (`Paused`).
/// 2. 0 replicas: `Degraded` (`NoReplicas`).
/// 3. No worker pod exists yet: `Pending` (`WaitingForWorkers`).
/// 4. A worker pod has not been Ready for [`STARTUP_GRACE`] or longer: `Degraded`
///    (`WorkersNotReady`).
/// 5. Stale workers remain: `RollingOut` (`RollingOut`).
/// 6. A worker pod is missing, terminating or not yet Ready: `RollingOut` (`WorkersStarting`).
/// 7. Otherwise: `Balanced`.
fn verdict(
    workers: &Workers,
    stale: &[String],
    paused_with_changes: bool,
    now: Timestamp,
) -> Verdict {
    let n = workers.len();
    if paused_with_changes {
        return Verdict::new(
            Phase::Pending,
            reason::PAUSED,
            "spec.paused holds back changes: nothing is written and no pod is deleted",
        );
    }
    if n == 0 {
        return Verdict::new(
            Phase::Degraded,
            reason::NO_REPLICAS,
            "the StatefulSet has 0 replicas: every job is unassigned",
        );
    }
    if workers.iter().all(|(_, pod)| pod.is_none()) {
        return Verdict::new(
            Phase::Pending,
            reason::WAITING_FOR_WORKERS,
            format!("waiting for the StatefulSet to create its {n} worker pods"),
        );
    }
    let not_ready_too_long: Vec<&str> = workers
        .iter()
        .filter(|(_, pod)| {
            pod.is_some_and(|p| {
                !p.ready
                    && !p.terminating
                    && p.not_ready_since
                        .is_some_and(|since| now.duration_since(since) >= STARTUP_GRACE)
            })
        })
        .map(|(name, _)| name)
        .collect();
    if !not_ready_too_long.is_empty() {
        return Verdict::new(
            Phase::Degraded,
            reason::WORKERS_NOT_READY,
            format!(
                "{}/{n} workers ready; not ready for {}s or more: {}",
                workers.ready(),
                STARTUP_GRACE.as_secs(),
                not_ready_too_long.join(", ")
            ),
        );
    }
    if !stale.is_empty() {
        return Verdict::new(
            Phase::RollingOut,
            reason::ROLLING_OUT,
            format!(
                "{} of {n} workers wait to restart on the new config: {}",
                stale.len(),
                stale.join(", ")
            ),
        );
    }
    if workers.unavailable() > 0 {
        return Verdict::new(
            Phase::RollingOut,
            reason::WORKERS_STARTING,
            format!("{}/{n} workers ready", workers.ready()),
        );
    }
    Verdict::new(
        Phase::Balanced,
        reason::BALANCED,
        format!("{n} workers ready on the current config"),
    )
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn previous_conditions(
    pool: &SwarmPool,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    pool.status
        .as_ref()
        .map_or(&[], |s| s.conditions.as_slice())
}

/// The pool's selector as a [`Selector`]; an empty one would match every StatefulSet.
fn pool_selector(selector: &LabelSelector) -> Result<Selector, Failure> {
    let empty = selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty);
    if empty {
        return Err(Failure::new(
            reason::EMPTY_SELECTOR,
            "spec.selector is empty and would match every StatefulSet; set matchLabels or matchExpressions",
        ));
    }
    Selector::try_from(selector.clone())
        .map_err(|e| Failure::new(reason::INVALID_SELECTOR, format!("spec.selector: {}", e.0)))
}

/// Whether `selector` matches the labels of `sts`.
pub fn selects(selector: &LabelSelector, sts: &StatefulSet) -> bool {
    pool_selector(selector).is_ok_and(|s| s.matches(sts.labels()))
}

fn match_statefulset<'a>(
    selector: &Selector,
    namespace: &str,
    candidates: &[&'a StatefulSet],
) -> Result<&'a StatefulSet, Failure> {
    let mut matched: Vec<&StatefulSet> = candidates
        .iter()
        .copied()
        .filter(|sts| {
            sts.namespace().as_deref() == Some(namespace) && selector.matches(sts.labels())
        })
        .collect();
    matched.sort_by_key(|sts| sts.name_any());
    match matched.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::new(
            reason::STATEFUL_SET_NOT_FOUND,
            format!("no StatefulSet in namespace {namespace} has labels matching {selector}"),
        )),
        many => Err(Failure::new(
            reason::AMBIGUOUS_SELECTOR,
            format!(
                "{} StatefulSets match {selector}: {}; the selector must match exactly one",
                many.len(),
                many.iter()
                    .map(|s| s.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The name of another pool of the namespace that selects `sts` and was created before `pool`
/// (ties broken by name), if any: that pool manages the StatefulSet.
fn older_pool_selecting(
    pool: &SwarmPool,
    sts: &StatefulSet,
    others: &[&SwarmPool],
) -> Option<String> {
    let age = |p: &SwarmPool| {
        (
            p.metadata.creation_timestamp.clone().map(|t| t.0),
            p.name_any(),
        )
    };
    others
        .iter()
        .filter(|other| {
            other.metadata.uid != pool.metadata.uid
                && other.namespace() == pool.namespace()
                && selects(&other.spec.selector, sts)
                && age(other) < age(pool)
        })
        .map(|other| age(other))
        .min()
        .map(|(_, name)| name)
}

/// The workers of `sts` with their pods: only pods the StatefulSet controls (by uid) count.
fn worker_pods(
    sts: &StatefulSet,
    replicas: usize,
    pods: &[&Pod],
    deleting: &BTreeSet<String>,
) -> Workers {
    let sts_uid = sts.metadata.uid.as_deref();
    let controlled = |pod: &Pod| {
        pod.namespace() == sts.namespace()
            && pod
                .owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && Some(r.uid.as_str()) == sts_uid)
    };
    let pods = pods
        .iter()
        .filter(|pod| controlled(pod))
        .map(|pod| (pod.name_any(), worker_pod(pod, deleting)))
        .collect();
    Workers::new(&sts.name_any(), replicas, pods)
}

fn worker_pod(pod: &Pod, deleting: &BTreeSet<String>) -> WorkerPod {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let terminating = pod.metadata.deletion_timestamp.is_some() || deleting.contains(&uid);
    let ready_condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ready = !terminating && ready_condition.is_some_and(|c| c.status == "True");
    let not_ready_since = if ready {
        None
    } else {
        ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .or(pod.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
    };
    WorkerPod {
        uid,
        ready,
        terminating,
        not_ready_since,
    }
}

/// Label selector of the StatefulSet's pods (its `spec.selector`), as a string.
fn pod_selector(sts: &StatefulSet) -> Option<String> {
    let selector = sts.spec.as_ref()?.selector.clone();
    Selector::try_from(selector)
        .ok()
        .filter(|s| !s.selects_all())
        .map(|s| s.to_string())
}

fn check_ownership(pool: &SwarmPool, cm: &ConfigMap, name: &str) -> Result<(), Failure> {
    let pool_uid = pool.metadata.uid.as_deref();
    match cm
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        Some(owner) if Some(owner.uid.as_str()) != pool_uid => Err(Failure::new(
            reason::CONFIG_MAP_CONFLICT,
            format!(
                "ConfigMap {name} is controlled by {} {} (uid {}); delete it or set spec.configMap to another name",
                owner.kind, owner.name, owner.uid
            ),
        )),
        _ => Ok(()),
    }
}

/// What the ConfigMap says about the previous config.
struct Previous {
    config: Option<WorkerConfig>,
    error: Option<String>,
}

fn read_previous(cm: &ConfigMap) -> Previous {
    let text = cm.data.as_ref().and_then(|d| d.get(CONFIG_KEY));
    match text.map(|t| WorkerConfig::parse(t)) {
        Some(Ok(config)) => Previous {
            config: Some(config),
            error: None,
        },
        parsed => {
            let error = match parsed {
                Some(Err(e)) => Some(format!("{CONFIG_KEY} is unreadable ({e})")),
                _ => None,
            };
            // Keep the version moving forward from what the annotation says, with no workloads
            // to stick to.
            let config = annotation_version(cm).map(|v| WorkerConfig::new(v, []));
            Previous { config, error }
        }
    }
}

fn annotation_version(cm: &ConfigMap) -> Option<u64> {
    cm.annotations()
        .get(VERSION_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// The config version in the ConfigMap: `version` of `config.yml`, else the annotation.
fn observed_version(cm: &ConfigMap) -> Option<u64> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(CONFIG_KEY))
        .and_then(|t| WorkerConfig::parse(t).ok())
        .map(|c| c.version)
        .or_else(|| annotation_version(cm))
}

fn desired_config_map(
    pool: &SwarmPool,
    name: &str,
    text: &str,
    version: u64,
    pending: &PendingRefresh,
) -> ConfigMap {
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGER.to_owned()),
        (POOL_LABEL.to_owned(), pool.name_any()),
    ]);
    let annotations = BTreeMap::from([
        (VERSION_ANNOTATION.to_owned(), version.to_string()),
        (PENDING_REFRESH_ANNOTATION.to_owned(), pending.render()),
    ]);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: pool.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), text.to_owned())])),
        ..ConfigMap::default()
    }
}

/// Whether `observed` already holds everything `desired` sets: the config, our labels and
/// annotations, and the controller reference. Fields others added are not ours to compare.
fn config_map_current(observed: &ConfigMap, desired: &ConfigMap) -> bool {
    let subset = |want: Option<&BTreeMap<String, String>>,
                  have: Option<&BTreeMap<String, String>>| {
        want.into_iter()
            .flatten()
            .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
    };
    let owned = desired.owner_references().iter().all(|want| {
        observed
            .owner_references()
            .iter()
            .any(|have| have.uid == want.uid && have.controller == Some(true))
    });
    subset(desired.data.as_ref(), observed.data.as_ref())
        && subset(
            desired.metadata.labels.as_ref(),
            observed.metadata.labels.as_ref(),
        )
        && subset(
            desired.metadata.annotations.as_ref(),
            observed.metadata.annotations.as_ref(),
        )
        && owned
}

fn rebalanced_note(version: u64, movement: &swarm_assign::Movement) -> String {
    if movement.workers == 0 {
        return format!(
            "config version {version}: {} jobs unassigned, the StatefulSet has 0 replicas",
            movement.unassigned.len()
        );
    }
    format!(
        "config version {version}: {} jobs on {} workers ({}..{} each), {} jobs moved, {} workers changed",
        movement.jobs,
        movement.workers,
        movement.min_load,
        movement.max_load,
        movement.jobs_moved,
        movement.workers_touched.len()
    )
}
