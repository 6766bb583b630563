//! The report file (`SWARM_WORKER_REPORT`): one JSON line each time the set of jobs the worker
//! runs changes or its permit is extended, and one at start, so tests can check what every pod
//! instance ran and when.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use swarm_protocol::report::{ReportLine, timestamp};

use crate::permit::Permit;

/// Appends `line` and a newline to the report at `path` in one write with `O_APPEND`, so lines
/// of pods sharing a file do not interleave.
pub fn append(path: &Path, line: &ReportLine<'_>) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{}\n", line.render()).as_bytes()))
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
