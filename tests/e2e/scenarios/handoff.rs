//! The handoff under faults, and the measurement of both handoff modes.
//!
//! Every scenario of the suite runs under the duplicate watch (no job on two live pods, checked
//! when its environment is dropped); these add a worker pod deleted by hand in the middle of a
//! handoff, and the scripted sequence whose numbers docs/reference.md reports.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{kubectl_ns, scale};
use crate::harness::observe::{
    Observed, assert_invariants, balanced, operator_pod_deletes, wait_for,
};
use crate::harness::scenario;
use crate::harness::worker_fleet::Workers;
use crate::harness::worker_fleet::with_readiness_probe;
use crate::harness::{Env, SimSpeed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_deleted_by_hand_mid_handoff_never_runs_a_job_twice_and_is_not_deleted_again() {
    scenario!("handoff-hand-delete")
        .speed(SimSpeed::SLOW)
        .run(async |env| {
            let before = env.install_example().await;
            let sts = env.example.statefulset_name();
            let mark = env.request_mark().await;

            scale(env, 3).await;
            let mid = wait_for(env, "jobs in transit", |o| {
                match o.config.as_ref().map(|c| c.in_transit().len()) {
                    Some(n) if n > 0 => Ok(()),
                    _ => Err("no job in transit yet".into()),
                }
            })
            .await;
            // The second giver: the operator refreshes one worker at a time, so it is still
            // running.
            let giver = format!("{sts}-1");
            kubectl_ns(env, &["delete", "pod", &giver, "--wait=false"]).await;
            eprintln!(
                "handoff-hand-delete: deleted {giver} by hand with {} jobs in transit",
                mid.config().in_transit().len()
            );

            let after = wait_for(env, "Balanced over 3 workers", |o| balanced(o, 3, &sts)).await;
            assert_invariants(env, &after).await;
            assert_eq!(after.config().loads(), [9, 9, 9]);
            assert_ne!(after.pods[&giver].uid, before.pods[&giver].uid);
            match operator_pod_deletes(env, mark).await {
                Some(deletes) => {
                    for (pod, n) in &deletes {
                        assert!(
                            *n <= 1,
                            "{pod} deleted {n} times by the operator: {deletes:?}"
                        );
                    }
                }
                None => env.note_skipped("pod deletions in the request log"),
            }
            env.assert_exclusive();
            env.assert_operator_running();
        })
        .await;
}

/// One step of the scripted sequence.
#[derive(Clone, Copy, Debug)]
enum Change {
    Scale(usize),
    AddJobs(usize),
    RemoveJobs(usize),
}

/// The sequence the handoff table of docs/reference.md measures.
const SEQUENCE: [Change; 5] = [
    Change::Scale(5),
    Change::Scale(2),
    Change::AddJobs(2),
    Change::Scale(4),
    Change::RemoveJobs(2),
];
/// The report's time scale under the two restart-based modes: a 30 s grace takes 1.5 s, and a
/// pod starts 10 s (0.5 s) after it is created, as pods on a real node do (scheduling, image,
/// container start).
const REPORT_SPEED: SimSpeed = SimSpeed {
    time_scale: 0.05,
    pod_ready_delay: Duration::from_secs(10),
};
/// Under `Acknowledge` the workers are real processes whose reactions take real time, so the
/// simulation runs at real speed: every second reported is a wall second.
const REAL_SPEED: SimSpeed = SimSpeed {
    time_scale: 1.0,
    pod_ready_delay: Duration::from_secs(10),
};

/// Longer than the duplicate watch trails the clock.
const WATCH_CATCH_UP: Duration = Duration::from_millis(600);

/// One measured run of the sequence.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// `rollout.handoff`.
    handoff: &'static str,
    /// `rollout.policy: Acknowledge` with a worker process per pod, instead of `DeletePods`.
    acknowledge: bool,
    /// Kill the operator (SIGKILL) at random moments while changes settle, and start it again.
    kill_operator: bool,
}

impl Run {
    fn name(self) -> String {
        let policy = if self.acknowledge {
            "acknowledge"
        } else {
            "deletepods"
        };
        let chaos = if self.kill_operator { "-killed" } else { "" };
        format!(
            "handoff-report-{policy}-{}{chaos}",
            self.handoff.to_lowercase()
        )
    }

    fn speed(self) -> SimSpeed {
        if self.acknowledge {
            REAL_SPEED
        } else {
            REPORT_SPEED
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_report_exclusive_never_runs_a_job_twice() {
    let run = Run {
        handoff: "Exclusive",
        acknowledge: false,
        kill_operator: false,
    };
    let Some(report) = measure(run).await else {
        return;
    };
    assert_eq!(report.duplicate_job_seconds, 0.0, "{report:#?}");
}

/// Overlap's numbers, side by side with Exclusive's. How many duplicates it shows depends on
/// whether new pods start before or after the operator writes (a race on a loaded machine), so
/// only settling is asserted; the watch's detection has its own test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_report_overlap_settles_after_every_change() {
    let run = Run {
        handoff: "Overlap",
        acknowledge: false,
        kill_operator: false,
    };
    measure(run).await;
}

/// The acknowledged handoff on the same sequence, with a real worker process per pod: nobody
/// restarts and no job runs twice. (How short the gaps are is docs/reference.md's measurement,
/// not a timed assertion.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_report_acknowledge_restarts_nobody_and_never_runs_a_job_twice() {
    let run = Run {
        handoff: "Exclusive",
        acknowledge: true,
        kill_operator: false,
    };
    let report = measure(run).await.expect("measured on both tiers");
    assert_eq!(report.duplicate_job_seconds, 0.0, "{report:#?}");
    assert_eq!(report.restarts, 0, "{report:#?}");
}

/// The same, with the operator SIGKILLed at random moments while the changes settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_report_acknowledge_with_the_operator_killed_never_runs_a_job_twice() {
    let run = Run {
        handoff: "Exclusive",
        acknowledge: true,
        kill_operator: true,
    };
    let report = measure(run).await.expect("measured on both tiers");
    assert_eq!(report.duplicate_job_seconds, 0.0, "{report:#?}");
    assert!(report.operator_kills > 0, "{report:#?}");
}

/// What one run of the sequence cost.
#[derive(Debug)]
struct Report {
    duplicate_job_seconds: f64,
    restarts: usize,
    operator_kills: usize,
}

/// Runs the sequence on a pool of 40 jobs over 3 workers with a 30 s termination grace and
/// prints the table; `None` for the restart-based modes against a real cluster (their numbers
/// need kube-sim's mount records).
async fn measure(run: Run) -> Option<Report> {
    let mut scenario = scenario!(run.name()).speed(run.speed());
    if !run.acknowledge {
        scenario = scenario.sim_only("the measurement needs the mount records");
    }
    scenario.run(async |env| measure_on(env, run).await).await
}

/// [`measure`] in the started scenario `env`.
async fn measure_on(env: &mut Env, run: Run) -> Report {
    env.install_crds().await;
    env.start_operator().await;
    if run.acknowledge {
        env.run_workers(Workers::Rust);
    }
    let mut pool = Sequence {
        run,
        sts: env.example.statefulset_name(),
        jobs: (0..40).map(|i| format!("stream:report-{i}")).collect(),
        replicas: 3,
        extra: 0,
        chaos: run.kill_operator.then(Chaos::new),
    };
    let documents = report_documents(env, run, &pool.jobs);
    env.apply("report.yaml", &documents).await;
    let mut settled = pool.wait_settled(env).await;
    // The watch's samples trail the clock (worker reports are read a moment late): let them
    // reach the settled pool before the first mark, and the last change before the end.
    tokio::time::sleep(WATCH_CATCH_UP).await;
    env.restart_longest_unheld();
    let start = env.handoff_stats();

    let mut rows = Vec::new();
    for change in SEQUENCE {
        let (row, next) = pool.measure_change(env, change, &settled).await;
        rows.push(row);
        settled = next;
    }
    let end = env.handoff_stats();
    let kills = pool.chaos.as_ref().map_or(0, |c| c.kills);
    print_table(&run.name(), run.speed(), &rows, &start, &end, kills);
    if run.acknowledge {
        env.fleet().assert_no_crash();
    }
    Report {
        duplicate_job_seconds: end.duplicate_job_seconds - start.duplicate_job_seconds,
        restarts: rows.iter().map(|r| r.restarts).sum(),
        operator_kills: kills,
    }
}

/// The measured pool as the sequence changes it.
struct Sequence {
    run: Run,
    sts: String,
    jobs: Vec<String>,
    replicas: usize,
    /// How many jobs the sequence added so far.
    extra: usize,
    chaos: Option<Chaos>,
}

impl Sequence {
    /// Makes `change` to the pool settled as `settled`, waits for it to settle again and
    /// measures what that cost; returns the row and the settled pool.
    async fn measure_change(
        &mut self,
        env: &mut Env,
        change: Change,
        settled: &Observed,
    ) -> (Row, Observed) {
        let mark = env.request_mark().await;
        let stats_before = env.handoff_stats();
        let begun = Instant::now();
        self.make(env, change).await;
        let next = self.wait_settled(env).await;
        let seconds = begun.elapsed().as_secs_f64();
        tokio::time::sleep(WATCH_CATCH_UP).await;
        assert!(
            next.config().version > settled.config().version,
            "{change:?} made a version"
        );
        assert_invariants(env, &next).await;
        let stats = env.handoff_stats();
        let restarts: usize = operator_pod_deletes(env, mark)
            .await
            .map(|d| d.values().sum())
            .unwrap_or_default();
        let row = Row {
            change,
            seconds,
            versions: next.config().version - settled.config().version,
            restarts,
            duplicate: stats.duplicate_job_seconds - stats_before.duplicate_job_seconds,
            unheld: stats.unheld_job_seconds - stats_before.unheld_job_seconds,
        };
        (row, next)
    }

    /// Scales the StatefulSet, or applies the pool with jobs added or removed.
    async fn make(&mut self, env: &Env, change: Change) {
        match change {
            Change::Scale(n) => {
                self.replicas = n;
                scale(env, n).await;
                return;
            }
            Change::AddJobs(n) => {
                let extra = self.extra;
                self.jobs
                    .extend((0..n).map(|i| format!("stream:report-extra-{}", extra + i)));
                self.extra += n;
            }
            Change::RemoveJobs(n) => {
                self.jobs.drain(..n);
            }
        }
        // Only the pool: re-applying the StatefulSet would undo the last scale.
        let pool: Vec<Value> = report_documents(env, self.run, &self.jobs)
            .into_iter()
            .filter(|d| d["kind"] == "SwarmPool")
            .collect();
        env.apply("report-pool.yaml", &pool).await;
    }

    /// Waits until the pool is settled over the replicas and jobs of now (see [`wait_settled`]).
    async fn wait_settled(&mut self, env: &mut Env) -> Observed {
        let (replicas, jobs) = (self.replicas, self.jobs.len());
        wait_settled(env, &mut self.chaos, replicas, jobs, &self.sts).await
    }
}

struct Row {
    change: Change,
    seconds: f64,
    versions: u64,
    restarts: usize,
    duplicate: f64,
    unheld: f64,
}

fn print_table(
    name: &str,
    speed: SimSpeed,
    rows: &[Row],
    start: &crate::harness::duplicates::HandoffStats,
    end: &crate::harness::duplicates::HandoffStats,
    operator_kills: usize,
) {
    let scale = speed.time_scale;
    let real = |wall: f64| wall / scale;
    let mut out = format!(
        "{name} (time scale {scale}: real-cluster seconds = wall seconds / {scale}):\n\
         | change | wall s | versions | restarts | duplicate job-s (real) | unheld job-s (real) |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        out += &format!(
            "| {:?} | {:.1} | {} | {} | {:.2} ({:.0}) | {:.2} ({:.0}) |\n",
            row.change,
            row.seconds,
            row.versions,
            row.restarts,
            row.duplicate,
            real(row.duplicate),
            row.unheld,
            real(row.unheld)
        );
    }
    let restarts: usize = rows.iter().map(|r| r.restarts).sum();
    let duplicate = end.duplicate_job_seconds - start.duplicate_job_seconds;
    let unheld = end.unheld_job_seconds - start.unheld_job_seconds;
    out += &format!(
        "| total | {:.1} | {} | {restarts} | {duplicate:.2} ({:.0}) | {unheld:.2} ({:.0}) |\n\
         longest time one job stayed unheld: {:.2} s wall ({:.1} s real, {}); jobs ever on two pods: {}; samples: {}; operator kills: {operator_kills}\n",
        rows.iter().map(|r| r.seconds).sum::<f64>(),
        rows.iter().map(|r| r.versions).sum::<u64>(),
        real(duplicate),
        real(unheld),
        end.longest_unheld_seconds,
        real(end.longest_unheld_seconds),
        end.longest_unheld_job,
        end.duplicated_jobs.len(),
        end.samples,
    );
    eprintln!("{out}");
}

/// The example's namespace, pool and workers, with `jobs`, 3 replicas, a 30 s grace and the
/// run's rollout.
fn report_documents(env: &Env, run: Run, jobs: &[String]) -> Vec<Value> {
    env.example
        .documents
        .iter()
        .cloned()
        .map(|mut doc| {
            match doc.get("kind").and_then(Value::as_str) {
                Some("SwarmPool") => {
                    doc["spec"]["jobs"] = json!(jobs);
                    doc["spec"]["rollout"] = json!({ "handoff": run.handoff });
                    if run.acknowledge {
                        doc["spec"]["rollout"]["policy"] = json!("Acknowledge");
                    }
                }
                Some("StatefulSet") => {
                    doc["spec"]["replicas"] = json!(3);
                    doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(30);
                    if run.acknowledge {
                        doc = with_readiness_probe(doc);
                    }
                }
                _ => {}
            }
            doc
        })
        .collect()
}

/// Kills the operator at pseudo-random moments while a change settles.
struct Chaos {
    state: u64,
    kills: usize,
}

impl Chaos {
    fn new() -> Chaos {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("operator kills: seed {seed}");
        Chaos {
            state: seed,
            kills: 0,
        }
    }

    /// The next pause (xorshift64): up to 0.5 s after a change is made, so even a change that
    /// settles in a second meets a kill, then 0.5 to 3 s.
    fn next_pause(&mut self, first: bool) -> Duration {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        if first {
            Duration::from_millis(self.state % 500)
        } else {
            Duration::from_millis(500 + self.state % 2_500)
        }
    }
}

/// Waits until the pool is Balanced over `replicas` workers with `jobs` jobs and nothing in
/// transit; with `chaos`, killing the operator and starting it again meanwhile.
async fn wait_settled(
    env: &mut Env,
    chaos: &mut Option<Chaos>,
    replicas: usize,
    jobs: usize,
    sts: &str,
) -> Observed {
    for kill in 0.. {
        let Some(chaos) = chaos.as_mut() else {
            return settled(env, replicas, jobs, sts).await;
        };
        let pause = chaos.next_pause(kill == 0);
        tokio::select! {
            observed = settled(env, replicas, jobs, sts) => return observed,
            () = tokio::time::sleep(pause) => {}
        }
        env.kill_operator().await;
        chaos.kills += 1;
        env.start_operator().await;
    }
    unreachable!("the loop ends by returning")
}

async fn settled(env: &Env, replicas: usize, jobs: usize, sts: &str) -> Observed {
    wait_for(
        env,
        &format!("Balanced over {replicas} workers with {jobs} jobs"),
        |o| {
            balanced(o, replicas, sts)?;
            let held: usize = o.config().loads().iter().sum();
            if held != jobs || o.status_u64("jobsInTransit") != Some(0) {
                return Err(format!("{held} of {jobs} jobs held"));
            }
            Ok(())
        },
    )
    .await
}
