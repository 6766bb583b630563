//! What the API server says of itself on a real control plane (its `/metrics`): the requests
//! it answered by verb and resource, the latency of Lease updates, and its own CPU; and etcd's
//! CPU from etcd's `/metrics` where the cluster says where it serves. kube-sim serves no such
//! metrics.

use std::collections::BTreeMap;
use std::path::Path;

use kube::Client;

use crate::process::Requests;

/// One reading of the API server's metrics.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// `apiserver_request_duration_seconds_bucket{resource="leases",verb="PUT"}`, summed over
    /// the other labels: upper bound (seconds) to cumulative count.
    lease_updates: BTreeMap<Bound, f64>,
    /// `apiserver_request_total` by the client's verb and resource (`resource/subresource`).
    requests: BTreeMap<(String, String), f64>,
    /// `process_cpu_seconds_total`.
    cpu_seconds: f64,
    /// etcd's `process_cpu_seconds_total`, if its metrics could be read.
    etcd_cpu_seconds: Option<f64>,
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
    /// Requests answered, by verb and resource, from every client.
    pub requests: Requests,
    /// CPU seconds the API server used.
    pub cpu_seconds: f64,
    /// CPU seconds etcd used, if its metrics could be read at both ends.
    pub etcd_cpu_seconds: Option<f64>,
}

/// Where etcd serves its metrics: `scripts/real-cluster.sh` writes its client URL to `etcd-url`
/// beside the kubeconfig.
pub fn etcd_url(kubeconfig: &Path) -> Option<String> {
    let path = kubeconfig.parent()?.join("etcd-url");
    Some(std::fs::read_to_string(path).ok()?.trim().to_owned())
}

/// Reads the API server's metrics, and etcd's from `etcd` (its client URL) if given; `None`
/// when the API server serves none (kube-sim).
pub async fn sample(client: &Client, etcd: Option<&str>) -> Option<Sample> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    let mut parsed = parse(&text);
    if let Some(url) = etcd {
        parsed.etcd_cpu_seconds = etcd_cpu_seconds(url).await;
    }
    (parsed.cpu_seconds > 0.0).then_some(parsed)
}

async fn etcd_cpu_seconds(url: &str) -> Option<f64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines().find_map(|line| {
        line.strip_prefix("process_cpu_seconds_total ")?
            .parse()
            .ok()
    })
}

/// The client's verb (as kube-rs and kube-sim's log name it) of an `apiserver_request_total`
/// verb: server-side apply is a patch.
fn client_verb(verb: &str) -> String {
    match verb {
        "PUT" => "update".to_owned(),
        "POST" => "create".to_owned(),
        "APPLY" => "patch".to_owned(),
        other => other.to_lowercase(),
    }
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
        } else if series.starts_with("apiserver_request_total{")
            && let (Some(verb), Some(resource)) = (label(series, "verb"), label(series, "resource"))
        {
            let resource = match label(series, "subresource") {
                Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
                _ => resource.to_owned(),
            };
            *sample
                .requests
                .entry((client_verb(verb), resource))
                .or_default() += value;
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
    // Preceded by `{` or `,`: `resource` is not `subresource`.
    let start = ['{', ',']
        .iter()
        .find_map(|sep| series.find(&format!("{sep}{name}=\"")))?
        + name.len()
        + 3;
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
        let requests = self
            .requests
            .iter()
            .map(|(key, n)| {
                let before = earlier.requests.get(key).copied().unwrap_or(0.0);
                (key.clone(), (n - before).round().max(0.0) as u64)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        Window {
            lease_updates: total,
            lease_update_p50_ms: quantile(&buckets, 0.5).map(|s| s * 1000.0),
            lease_update_p99_ms: quantile(&buckets, 0.99).map(|s| s * 1000.0),
            requests: Requests(requests),
            cpu_seconds: self.cpu_seconds - earlier.cpu_seconds,
            etcd_cpu_seconds: self
                .etcd_cpu_seconds
                .zip(earlier.etcd_cpu_seconds)
                .map(|(now, before)| now - before),
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
        let etcd = self
            .etcd_cpu_seconds
            .map_or("etcd's not read".to_owned(), |cpu| {
                format!("etcd {cpu:.1} s ({:.2} cores)", cpu / seconds.max(1e-9))
            });
        format!(
            "API server, {what} ({seconds:.0} s): {:.0} Lease updates ({:.1}/s), latency p50 {} ms / p99 {} ms; CPU {:.1} s ({:.2} cores), {etcd}",
            self.lease_updates,
            self.lease_updates / seconds.max(1e-9),
            ms(self.lease_update_p50_ms),
            ms(self.lease_update_p99_ms),
            self.cpu_seconds,
            self.cpu_seconds / seconds.max(1e-9),
        )
    }
}
