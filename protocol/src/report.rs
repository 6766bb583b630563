//! The report line: what a worker appends to its report file (`SWARM_WORKER_REPORT`) at start,
//! each time the set of jobs it runs changes or its permit is extended, and when it stops, so
//! that tests can check what every pod instance ran and when. Every worker writes exactly this
//! JSON, field for field.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

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

/// RFC 3339 in UTC with nine fractional digits, so lines of one run sort by time as text.
pub fn timestamp(at: Timestamp) -> String {
    format!("{at:.9}")
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
}
