//! What the API server says of itself on a real control plane (its `/metrics`): the latency of
//! the Lease updates the workers send, and its own CPU. kube-sim serves no such metrics.

use std::collections::BTreeMap;

use kube::Client;

/// One reading of the API server's metrics.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// `apiserver_request_duration_seconds_bucket{resource="leases",verb="PUT"}`, summed over
    /// the other labels: upper bound (seconds) to cumulative count.
    lease_updates: BTreeMap<Bound, f64>,
    /// `process_cpu_seconds_total`.
    cpu_seconds: f64,
}

/// A histogram bucket's upper bound, ordered (`+Inf` last).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bound(f64);

impl Eq for Bound {}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What the API server did between two samples.
#[derive(Clone, Debug)]
pub struct Window {
    /// Lease updates answered.
    pub lease_updates: f64,
    /// Their latency's median and 99th percentile, in milliseconds, interpolated within the
    /// histogram's buckets as Prometheus' `histogram_quantile` does.
    pub lease_update_p50_ms: Option<f64>,
    pub lease_update_p99_ms: Option<f64>,
    /// CPU seconds the API server used.
    pub cpu_seconds: f64,
}

/// Reads the API server's metrics; `None` when it serves none (kube-sim).
pub async fn sample(client: &Client) -> Option<Sample> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    let parsed = parse(&text);
    (parsed.cpu_seconds > 0.0).then_some(parsed)
}

fn parse(text: &str) -> Sample {
    let mut sample = Sample::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if series == "process_cpu_seconds_total" {
            sample.cpu_seconds = value;
        } else if series.starts_with("apiserver_request_duration_seconds_bucket{")
            && series.contains("resource=\"leases\"")
            && series.contains("verb=\"PUT\"")
            && let Some(le) = label(series, "le")
        {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            *sample.lease_updates.entry(Bound(bound)).or_default() += value;
        }
    }
    sample
}

/// The value of label `name` in a series `metric{a="x",b="y"}`.
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let start = series.find(&key)? + key.len();
    let end = series[start..].find('"')? + start;
    Some(&series[start..end])
}

impl Sample {
    /// What happened from `earlier` to this sample.
    pub fn since(&self, earlier: &Sample) -> Window {
        let buckets: Vec<(f64, f64)> = self
            .lease_updates
            .iter()
            .map(|(bound, count)| {
                let before = earlier.lease_updates.get(bound).copied().unwrap_or(0.0);
                (bound.0, count - before)
            })
            .collect();
        let total = buckets.last().map_or(0.0, |(_, count)| *count);
        Window {
            lease_updates: total,
            lease_update_p50_ms: quantile(&buckets, 0.5).map(|s| s * 1000.0),
            lease_update_p99_ms: quantile(&buckets, 0.99).map(|s| s * 1000.0),
            cpu_seconds: self.cpu_seconds - earlier.cpu_seconds,
        }
    }
}

/// The `q` quantile of a cumulative histogram `(upper bound, count)`, linear within a bucket
/// (the first bucket from 0); a quantile in the `+Inf` bucket is the last finite bound.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(upper, count) in buckets {
        if count >= rank {
            if upper.is_infinite() {
                return Some(lower);
            }
            let within = count - below;
            let fraction = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return Some(lower + (upper - lower) * fraction);
        }
        (lower, below) = (upper, count);
    }
    Some(lower)
}

impl Window {
    /// One line for the cell's report: `what` over `seconds` of wall time.
    pub fn describe(&self, what: &str, seconds: f64) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        format!(
            "API server, {what} ({seconds:.0} s): {:.0} Lease updates ({:.1}/s), latency p50 {} ms / p99 {} ms; CPU {:.1} s ({:.2} cores)",
            self.lease_updates,
            self.lease_updates / seconds.max(1e-9),
            ms(self.lease_update_p50_ms),
            ms(self.lease_update_p99_ms),
            self.cpu_seconds,
            self.cpu_seconds / seconds.max(1e-9),
        )
    }
}
