//! One time base for everything the soak records: seconds since the soak started, for its
//! own observations (monotonic) and for the API server's audit timestamps (wall clock, same
//! machine), so a request can be set against the faults and the lease holders of its time.

use std::str::FromStr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    start_unix_ms: i64,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        let start_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Clock {
            start: Instant::now(),
            start_unix_ms,
        }
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// An RFC 3339 timestamp (the audit log's) as seconds since the start.
    pub fn at(&self, timestamp: &str) -> Option<f64> {
        k8s_openapi::jiff::Timestamp::from_str(timestamp)
            .ok()
            .map(|ts| self.at_timestamp(ts))
    }

    /// A timestamp (a Lease's acquireTime) as seconds since the start.
    pub fn at_timestamp(&self, ts: k8s_openapi::jiff::Timestamp) -> f64 {
        (ts.as_millisecond() - self.start_unix_ms) as f64 / 1000.0
    }
}
