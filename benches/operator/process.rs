//! The operator under measurement: its process, its memory and CPU from `/proc`, and its
//! request counters and allocator statistics from `/metrics`.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// A running `swarm-operator run`, killed when dropped.
pub struct OperatorProcess {
    child: Child,
    http_addr: SocketAddr,
    /// `/metrics`, in plain HTTP (`--metrics-insecure`: a local process).
    metrics_addr: SocketAddr,
    /// Largest RSS seen by the sampler since the last [`OperatorProcess::take_peak`], and the
    /// allocator's figures read when it was seen.
    peak: Arc<Mutex<PeakState>>,
    stop_sampler: Arc<Mutex<bool>>,
}

impl OperatorProcess {
    /// Starts the release binary against `kubeconfig`, logging at `level` to `log`.
    pub fn spawn(kubeconfig: &Path, log: &Path, level: &str) -> OperatorProcess {
        let free_port = || {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
            listener.local_addr().expect("local address")
        };
        let (http_addr, metrics_addr) = (free_port(), free_port());
        let out = File::create(log).expect("create the operator log");
        let child = Command::new(env!("CARGO_BIN_EXE_swarm-operator"))
            .args(["run", "--http-addr", &http_addr.to_string()])
            .args([
                "--metrics-addr",
                &metrics_addr.to_string(),
                "--metrics-insecure",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", level)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .expect("spawn swarm-operator");
        let peak = Arc::new(Mutex::new(PeakState::default()));
        let stop_sampler = Arc::new(Mutex::new(false));
        let pid = child.id();
        // Each new largest RSS asks for the allocator's figures at once, so the peak can be
        // split into live heap and freed pages jemalloc still holds.
        let (new_peak, mut new_peaks) = tokio::sync::mpsc::unbounded_channel::<()>();
        {
            let peak = peak.clone();
            let stop = stop_sampler.clone();
            std::thread::spawn(move || {
                while !*stop.lock().expect("sampler lock") {
                    let sockets = sockets_open(pid);
                    if let Some(rss) = rss_kib(pid) {
                        let mut peak = peak.lock().expect("peak lock");
                        peak.most_sockets = peak.most_sockets.max(sockets);
                        if rss > peak.kib {
                            peak.kib = rss;
                            let _ = new_peak.send(());
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        {
            let peak = peak.clone();
            let url = format!("http://{metrics_addr}/metrics");
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                while new_peaks.recv().await.is_some() {
                    while new_peaks.try_recv().is_ok() {}
                    let Ok(response) = http.get(&url).send().await else {
                        continue;
                    };
                    let Ok(text) = response.text().await else {
                        continue;
                    };
                    if let Some(heap) = HeapAtPeak::parse(&text) {
                        peak.lock().expect("peak lock").heap = Some(heap);
                    }
                }
            });
        }
        OperatorProcess {
            child,
            http_addr,
            metrics_addr,
            peak,
            stop_sampler,
        }
    }

    /// Waits until `/readyz` answers 200 (its caches synced: with 10,000 pods and their Leases
    /// that takes a busy control plane tens of seconds); returns how long that took.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> Duration {
        const LIMIT: Duration = Duration::from_secs(300);
        let url = format!("http://{}/readyz", self.http_addr);
        let began = std::time::Instant::now();
        while began.elapsed() < LIMIT {
            if let Some(status) = self.child.try_wait().expect("poll the operator") {
                panic!("the operator exited during start-up: {status}");
            }
            if let Ok(response) = http.get(&url).send().await
                && response.status().is_success()
            {
                return began.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the operator did not report ready within {LIMIT:?}");
    }

    /// Current resident set size in MiB.
    pub fn rss_mib(&self) -> f64 {
        rss_kib(self.child.id()).unwrap_or(0) as f64 / 1024.0
    }

    /// Largest RSS since the last reset, in MiB; resets it to the current RSS.
    pub fn take_peak_mib(&self) -> f64 {
        self.take_peak().rss_mib
    }

    /// Largest RSS since the last reset, with the allocator's figures read when it was seen;
    /// resets it to the current RSS.
    pub fn take_peak(&self) -> Peak {
        let mut peak = self.peak.lock().expect("peak lock");
        let taken = Peak {
            rss_mib: peak.kib as f64 / 1024.0,
            heap: peak.heap.take(),
        };
        peak.kib = rss_kib(self.child.id()).unwrap_or(0);
        taken
    }

    /// The most sockets the operator had open at once so far: under HTTP/1.1 one connection
    /// per request in flight (kept by the client's pool after it), its watches, and the
    /// connections of this benchmark's scrapes of `/metrics`.
    pub fn most_sockets(&self) -> usize {
        self.peak.lock().expect("peak lock").most_sockets
    }

    /// CPU time (user plus system) used so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / TICKS_PER_SECOND
    }

    /// The operator's `swarm_operator_api_requests_total`, by `(verb, resource)`.
    pub async fn requests(&self, http: &reqwest::Client) -> Requests {
        let url = format!("http://{}/metrics", self.metrics_addr);
        let text = http
            .get(&url)
            .send()
            .await
            .expect("scrape /metrics")
            .text()
            .await
            .expect("read /metrics");
        Requests::parse(&text)
    }
}

/// How long a stopped operator gets to exit on its own (a heap profile is written at exit).
const EXIT_GRACE: Duration = Duration::from_secs(30);

impl Drop for OperatorProcess {
    /// Stops the operator as Kubernetes would: SIGTERM, then SIGKILL after a grace period.
    fn drop(&mut self) {
        *self.stop_sampler.lock().expect("sampler lock") = true;
        let terminated = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if terminated {
            let deadline = std::time::Instant::now() + EXIT_GRACE;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the sampler has seen since the last [`OperatorProcess::take_peak`].
#[derive(Default)]
struct PeakState {
    kib: u64,
    heap: Option<HeapAtPeak>,
    /// Never reset: see [`OperatorProcess::most_sockets`].
    most_sockets: usize,
}

/// The largest RSS of a span of time.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    pub rss_mib: f64,
    /// The allocator's figures read right after the sampler saw it (`None`: not read).
    pub heap: Option<HeapAtPeak>,
}

/// jemalloc's figures (`swarm_operator_allocator_bytes`) around an RSS peak, in MiB.
#[derive(Clone, Copy, Debug)]
pub struct HeapAtPeak {
    /// The live heap.
    pub allocated: f64,
    /// Pages holding live allocations.
    pub active: f64,
    /// Pages jemalloc holds resident: active, freed and not yet returned, metadata.
    pub resident: f64,
}

impl HeapAtPeak {
    fn parse(metrics: &str) -> Option<HeapAtPeak> {
        let stat = |name: &str| -> Option<f64> {
            let series = format!("swarm_operator_allocator_bytes{{stat=\"{name}\"}}");
            let bytes: f64 = metrics
                .lines()
                .find_map(|line| line.strip_prefix(series.as_str())?.trim().parse().ok())?;
            Some(bytes / 1_048_576.0)
        };
        Some(HeapAtPeak {
            allocated: stat("allocated")?,
            active: stat("active")?,
            resident: stat("resident")?,
        })
    }
}

/// How many of `pid`'s file descriptors are sockets.
fn sockets_open(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|entry| {
                std::fs::read_link(entry.path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            })
            .count()
    })
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Request counts by `(verb, resource)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests(pub BTreeMap<(String, String), u64>);

impl Requests {
    /// Reads the `swarm_operator_api_requests_total` samples of a Prometheus text exposition.
    pub fn parse(text: &str) -> Requests {
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("swarm_operator_api_requests_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let value: f64 = value.trim().parse().unwrap_or(0.0);
            counts.insert((label("verb"), label("resource")), value as u64);
        }
        Requests(counts)
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &Requests) -> Requests {
        Requests(
            self.0
                .iter()
                .map(|(key, n)| (key.clone(), n - earlier.0.get(key).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    /// Every request except watches, which stay open rather than repeat.
    pub fn calls(&self) -> u64 {
        self.sum(|verb, _| verb != "watch")
    }

    /// Requests that change state.
    pub fn writes(&self) -> u64 {
        self.sum(|verb, _| matches!(verb, "create" | "update" | "patch" | "delete"))
    }

    /// Requests with `verb` on `resource`.
    pub fn of(&self, verb: &str, resource: &str) -> u64 {
        self.sum(|v, r| v == verb && r == resource)
    }

    fn sum(&self, keep: impl Fn(&str, &str) -> bool) -> u64 {
        self.0
            .iter()
            .filter(|((verb, resource), _)| keep(verb, resource))
            .map(|(_, n)| n)
            .sum()
    }

    /// `verb resource: n` pairs, for the detail lines.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|((verb, resource), n)| format!("{verb} {resource}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
