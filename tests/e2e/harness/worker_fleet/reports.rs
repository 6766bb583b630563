//! The report files of a fleet's workers (`SWARM_WORKER_REPORT`): what each pod instance
//! says it runs, and since when; the duplicate watch reads them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::json;

/// How far behind the clock the watch reads the reports: a worker writes its line before it
/// starts a job and after it stopped one, and a line older than this is surely on disk.
const REPORT_LAG: Duration = Duration::from_millis(300);

/// The report files of a fleet's workers, one per pod instance: what each instance ran, and
/// since when.
#[derive(Clone, Debug)]
pub struct Reports {
    pub(super) dir: PathBuf,
}

/// One line of a report (see the worker protocol in docs/worker-protocol.md).
#[derive(Debug, Deserialize)]
struct Line {
    pod: String,
    uid: String,
    #[serde(default)]
    version: Option<u64>,
    running: Vec<String>,
    at: String,
    /// Until when the jobs' permit holds: they do no work after it (they check it before each
    /// unit of work), though they may still run.
    #[serde(default)]
    until: Option<String>,
    /// Set on the lines the fleet writes, not the worker.
    #[serde(default)]
    by: Option<String>,
}

impl Line {
    /// The jobs this line says work at `at`: none once its permit has lapsed.
    fn working_at(self, at: Timestamp) -> Vec<String> {
        let lapsed = self
            .until
            .as_deref()
            .and_then(|until| Timestamp::from_str(until).ok())
            .is_some_and(|until| until < at);
        if lapsed { Vec::new() } else { self.running }
    }
}

impl Reports {
    /// The reports in `dir`, one `<pod uid>.jsonl` per pod instance.
    pub fn new(dir: PathBuf) -> Reports {
        Reports { dir }
    }

    /// The report file of pod instance `uid`.
    pub fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.jsonl"))
    }

    /// Appends an empty line for an instance whose process is gone: it runs nothing from now on.
    pub(super) fn record_exit(&self, pod: &str, uid: &str) {
        self.append(pod, uid, &[], "exited");
    }

    /// Appends an empty line for a process just stopped (SIGSTOP).
    pub(super) fn record_pause(&self, pod: &str, uid: &str) {
        self.append(pod, uid, &[], "paused");
    }

    /// Appends, for a process about to continue (SIGCONT), the jobs it last reported itself,
    /// with the permit it last reported: they may work again until it lapses.
    pub(super) fn record_resume(&self, pod: &str, uid: &str) {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .find(|line| line.by.is_none());
        let until = last.as_ref().and_then(|line| line.until.clone());
        let running = last.map(|line| line.running).unwrap_or_default();
        self.append_until(pod, uid, &running, until, "resumed");
    }

    /// Appends a line the fleet writes on the process's behalf (`by` says why).
    fn append(&self, pod: &str, uid: &str, running: &[String], by: &str) {
        self.append_until(pod, uid, running, None, by);
    }

    fn append_until(
        &self,
        pod: &str,
        uid: &str,
        running: &[String],
        until: Option<String>,
        by: &str,
    ) {
        let mut line = json!({
            "pod": pod,
            "uid": uid,
            "version": null,
            "running": running,
            "at": format!("{:.9}", Timestamp::now()),
            "by": format!("e2e fleet: {by}"),
        });
        if let Some(until) = until {
            line["until"] = until.into();
        }
        let appended = File::options()
            .create(true)
            .append(true)
            .open(self.path(uid))
            .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
        if let Err(error) = appended {
            panic!("cannot append to the report of {pod} ({uid}): {error}");
        }
    }

    /// Job -> the pod instances (`pod (uid)`) that ran it a little while ago ([`REPORT_LAG`]),
    /// when every line up to then is surely written.
    pub fn held(&self) -> Option<BTreeMap<String, Vec<String>>> {
        let at = Timestamp::try_from(SystemTime::now() - REPORT_LAG).ok()?;
        let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir).ok()?.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            if let Some(line) = latest_before(&text, at) {
                let (pod, uid) = (line.pod.clone(), line.uid.clone());
                for job in line.working_at(at) {
                    held.entry(job).or_default().push(format!("{pod} ({uid})"));
                }
            }
        }
        Some(held)
    }
}

/// A line a worker wrote itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerLine {
    /// When it was written.
    pub at: Timestamp,
    /// The config version its jobs belong to.
    pub version: Option<u64>,
    /// The jobs that run from then on.
    pub running: Vec<String>,
}

impl Reports {
    /// The lines instance `uid`'s worker wrote itself, in order.
    pub fn worker_lines(&self, uid: &str) -> Vec<WorkerLine> {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .filter(|line| line.by.is_none())
            .filter_map(|line| {
                Some(WorkerLine {
                    at: Timestamp::from_str(&line.at).ok()?,
                    version: line.version,
                    running: line.running,
                })
            })
            .collect()
    }

    /// The job sets instance `uid`'s worker itself reported at or after `since`.
    pub fn written_by_worker_since(&self, uid: &str, since: Timestamp) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(self.path(uid)).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Line>(line).ok())
            .filter(|line| line.by.is_none())
            .filter(|line| Timestamp::from_str(&line.at).is_ok_and(|at| at >= since))
            .map(|line| line.running)
            .collect()
    }
}

/// The last complete line of one report written at or before `at`.
fn latest_before(text: &str, at: Timestamp) -> Option<Line> {
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Line>(line).ok())
        .find(|line| Timestamp::from_str(&line.at).is_ok_and(|written| written <= at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_as_of_a_moment_and_python_timestamps_parse() {
        let text = concat!(
            r#"{"pod":"w-0","uid":"u","version":null,"running":[],"at":"2026-01-01T00:00:00.000000000Z"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","version":3,"running":["a","b"],"at":"2026-01-01T00:00:01.500000Z"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","version":4,"running":["b"],"at":"2026-01-01T00:00:03+00:00"}"#,
            "\n",
            r#"{"pod":"w-0","uid":"u","vers"#,
        );
        let at = |s: &str| Timestamp::from_str(s).unwrap();
        assert!(latest_before(text, at("2025-12-31T23:59:59Z")).is_none());
        let running = |s: &str| latest_before(text, at(s)).unwrap().running;
        assert!(running("2026-01-01T00:00:01Z").is_empty());
        assert_eq!(running("2026-01-01T00:00:02Z"), ["a", "b"]);
        assert_eq!(running("2026-01-01T00:00:09Z"), ["b"]);
    }

    #[test]
    fn jobs_whose_permit_lapsed_do_no_work() {
        let text = r#"{"pod":"w-0","uid":"u","version":3,"running":["a"],"at":"2026-01-01T00:00:01Z","until":"2026-01-01T00:00:09Z"}"#;
        let at = |s: &str| Timestamp::from_str(s).unwrap();
        let working = |s: &str| latest_before(text, at(s)).unwrap().working_at(at(s));
        assert_eq!(working("2026-01-01T00:00:08Z"), ["a"]);
        assert!(working("2026-01-01T00:00:10Z").is_empty());
    }
}
