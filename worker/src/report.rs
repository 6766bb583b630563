//! The report file (`SWARM_WORKER_REPORT`): one JSON line each time the set of jobs the worker
//! runs changes or its permit is extended, and one at start, so tests can check what every pod
//! instance ran and when.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::permit::Permit;

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportLine<'a> {
    /// `POD_NAME`.
    pub pod: &'a str,
    /// `POD_UID`: tells pod instances of one name apart.
    pub uid: &'a str,
    /// The config version the jobs belong to; `None` before the first one.
    pub version: Option<u64>,
    /// The jobs that run (or are about to start) once this line is written.
    pub running: &'a [String],
    /// When the line was written: RFC 3339 in UTC with nanoseconds.
    pub at: String,
    /// Until when the jobs' permit holds (same format), if it is held: the jobs do no work
    /// after it, though they may still run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl ReportLine<'_> {
    /// The line as JSON, without the newline.
    pub fn render(&self) -> String {
        serde_json::to_string(self).expect("strings and integers always serialize to JSON")
    }
}

/// Appends `line` and a newline to the report at `path` in one write with `O_APPEND`, so lines
/// of pods sharing a file do not interleave.
pub fn append(path: &Path, line: &ReportLine<'_>) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{}\n", line.render()).as_bytes()))
}

/// RFC 3339 in UTC with nine fractional digits, so lines of one run sort by time as text.
pub fn timestamp(at: Timestamp) -> String {
    format!("{at:.9}")
}

/// Appends lines to the report file, when there is one.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    path: Option<PathBuf>,
    pod: String,
    uid: String,
    permit: Permit,
}

impl Report {
    pub(crate) fn new(path: Option<PathBuf>, pod: &str, uid: &str, permit: Permit) -> Self {
        Self {
            path,
            pod: pod.to_string(),
            uid: uid.to_string(),
            permit,
        }
    }

    /// Appends one line. A report that cannot be written is logged, not fatal: it is for tests
    /// and must not stop a worker from running its jobs.
    pub(crate) fn write(&self, version: Option<u64>, running: &[String]) {
        let Some(path) = &self.path else {
            return;
        };
        let now = Timestamp::now();
        let until = self.permit.until().map(|until| {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            timestamp(now + SignedDuration::try_from(left).unwrap_or(SignedDuration::MAX))
        });
        let line = ReportLine {
            pod: &self.pod,
            uid: &self.uid,
            version,
            running,
            at: timestamp(now),
            until,
        };
        let result = append(path, &line);
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "cannot write the worker report");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_line_has_the_protocol_fields_and_a_nanosecond_utc_time() {
        let at: Timestamp = "2026-03-01T10:00:00.5Z".parse().unwrap();
        let running = vec!["a".to_string(), "b".to_string()];
        let line = ReportLine {
            pod: "w-0",
            uid: "u-1",
            version: Some(4),
            running: &running,
            at: timestamp(at),
            until: None,
        };
        assert_eq!(
            line.render(),
            r#"{"pod":"w-0","uid":"u-1","version":4,"running":["a","b"],"at":"2026-03-01T10:00:00.500000000Z"}"#
        );
    }

    #[test]
    fn a_line_before_the_first_version_has_a_null_version() {
        let line = ReportLine {
            pod: "w-0",
            uid: "u-1",
            version: None,
            running: &[],
            at: timestamp(Timestamp::UNIX_EPOCH),
            until: None,
        };
        let value: serde_json::Value = serde_json::from_str(&line.render()).unwrap();
        assert_eq!(value["version"], serde_json::Value::Null);
        assert_eq!(value["running"], serde_json::json!([]));
        assert_eq!(value["at"], "1970-01-01T00:00:00.000000000Z");
    }

    #[test]
    fn lines_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.jsonl");
        let report = Report::new(Some(path.clone()), "w-0", "u-1", Permit::default());
        report.write(None, &[]);
        report.write(Some(1), &["a".to_string()]);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["version"], 1);
        assert_eq!(lines[1]["running"], serde_json::json!(["a"]));
    }
}
