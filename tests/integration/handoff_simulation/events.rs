//! Real time under `Acknowledge`: every worker process's timers, fence reads and Lease writes,
//! each taking effect on the API server at its own instant between its send and its answer,
//! and the kubelets' probes and node Lease renewals, in the order they happen; and the faults
//! that delay or stop them. After each instant, whether some job does work on two instances.

use super::cluster::{Cluster, Link, PodInstance};
use super::process::{self, NEVER, PERMIT, Read};
use swarm_protocol::fence;

/// The kubelet probes each worker's readiness this often (`periodSeconds: 5`,
/// `failureThreshold: 1`).
const PROBE_PERIOD: u64 = 5_000;
/// The kubelet renews its node's Lease this often.
const NODE_RENEW_PERIOD: u64 = 10_000;
/// Request delays, in milliseconds: most are this short ...
const FAST: u64 = 300;
/// ... one in eight takes up to this long (a slow link, a busy API server).
const SLOW: u64 = 12_000;

impl Cluster {
    /// `ms` milliseconds of real time pass, every event in its order.
    pub fn advance(&mut self, ms: u64) {
        let target = self.millis + ms;
        for _ in 0..1_000_000 {
            match self.next_event().filter(|&t| t <= target) {
                Some(at) => {
                    self.account(at);
                    self.millis = at;
                    self.fire(at);
                    self.watch_duplicates();
                }
                None => {
                    self.account(target);
                    self.millis = target;
                    return;
                }
            }
        }
        panic!(
            "the model does not advance at {} ms: {self:#?}",
            self.millis
        );
    }

    /// The earliest instant at which something happens, not before now.
    fn next_event(&self) -> Option<u64> {
        if !self.acknowledge {
            return None;
        }
        let from = self.kubelet_from;
        let renewals =
            (0..self.nodes.len()).map(|n| next_at(from, NODE_RENEW_PERIOD, node_offset(n)));
        let probes = self
            .pods
            .iter()
            .map(|p| next_at(from, PROBE_PERIOD, probe_offset(p)));
        let workers = self
            .pods
            .iter()
            .filter_map(|pod| pod.process.as_ref().filter(|p| !p.exited))
            .filter_map(|process| {
                let read = process.read.as_ref();
                let server = read.filter(|r| r.shown.is_none() && !r.fails);
                let server = server.map(|r| r.linearize_at);
                if process.paused {
                    return server;
                }
                let retry = process
                    .lease_retry_at
                    .filter(|_| process.lease.is_none() && process.lease_next.is_some());
                let awake = [
                    read.map(|r| r.answer_at().min(r.timeout_at)),
                    process.read_due(),
                    process
                        .fence
                        .until()
                        .map(|u| process::real_at(process.rate, u)),
                    process.lease.map(|l| l.at),
                    retry,
                ];
                awake.into_iter().flatten().chain(server).min()
            });
        renewals
            .chain(probes)
            .chain(workers)
            .map(|t| t.max(self.millis))
            .filter(|&t| t != NEVER)
            .min()
    }

    /// Everything due at `at`.
    fn fire(&mut self, at: u64) {
        if self.kubelet_from <= at {
            self.kubelets(at);
            self.kubelet_from = at + 1;
        }
        for i in 0..self.pods.len() {
            if self.pods[i].process.as_ref().is_some_and(|p| !p.exited) {
                self.worker(i, at);
            }
        }
    }

    /// The worker of pod `i` at `at`: its read takes effect, is answered or times out; its
    /// Lease write lands; it acts on its fence; it sends what is due.
    fn worker(&mut self, i: usize, at: u64) {
        self.linearize_read(i, at);
        let (link, down) = (self.pods[i].link, self.etcd_down);
        if self.pods[i].process.as_ref().unwrap().paused {
            return;
        }
        self.answer_read(i, at);
        self.land_lease(i, at);
        let pod = &mut self.pods[i];
        let process = pod.process.as_mut().unwrap();
        process.act(at);
        if process.lease.is_none()
            && process.lease_next.is_some()
            && process.lease_retry_at.is_some_and(|r| r <= at)
        {
            let acked = process.lease_next.take().unwrap();
            process.lease_retry_at = None;
            let fails = link != Link::Up || down;
            let delay = self.draw(FAST, SLOW);
            let process = self.pods[i].process.as_mut().unwrap();
            process.lease = Some(process::LeaseWrite {
                acked,
                at: at + delay,
                fails,
            });
        }
        if self.pods[i]
            .process
            .as_ref()
            .unwrap()
            .read_due()
            .is_some_and(|due| due <= at)
        {
            self.send_read(i, at);
        }
    }

    /// A fence read of pod `i` sent at `at`.
    fn send_read(&mut self, i: usize, at: u64) {
        let link = self.pods[i].link;
        let process = self.pods[i].process.as_mut().unwrap();
        if process.bugs.cached_read
            && let Some(cached) = process.cache.clone()
        {
            let now = process.now(at);
            process.answered(at, cached, now);
            return;
        }
        let sent = process.now(at);
        let timeout_at = process::real_at(process.rate, sent + fence::read_timeout(PERMIT));
        let (delay, answer_after) = (self.draw(FAST, SLOW), self.draw(FAST, SLOW));
        let linearize_at = match link {
            Link::Up | Link::Fail => at + delay,
            Link::Hang => NEVER,
        };
        let process = self.pods[i].process.as_mut().unwrap();
        process.read = Some(Read {
            sent,
            linearize_at,
            answer_after,
            shown: None,
            timeout_at,
            fails: link == Link::Fail,
        });
    }

    /// The read of pod `i` takes effect on the API server at `at`, if due: it shows the entry
    /// as it is then, or fails, or hangs (cut off, or etcd unreachable).
    fn linearize_read(&mut self, i: usize, at: u64) {
        let (link, down) = (self.pods[i].link, self.etcd_down);
        let entry = self.entry(&self.pods[i].name());
        let Some(read) = self.pods[i].process.as_mut().unwrap().read.as_mut() else {
            return;
        };
        if read.shown.is_some() || read.fails || read.linearize_at > at {
            return;
        }
        match link {
            Link::Fail => read.fails = true,
            Link::Hang => read.linearize_at = NEVER,
            Link::Up if down => read.linearize_at = NEVER,
            Link::Up => read.shown = Some(entry),
        }
    }

    /// The answer to the read of pod `i` reaches it at `at`, if due: a refused link fails it,
    /// a hanging one loses it (the worker waits for its timeout).
    fn answer_read(&mut self, i: usize, at: u64) {
        let link = self.pods[i].link;
        let process = self.pods[i].process.as_mut().unwrap();
        let Some(read) = process.read.as_mut() else {
            return;
        };
        let answer = read.answer_at();
        if read.fails || (answer <= at && answer < read.timeout_at && link == Link::Fail) {
            if answer <= at {
                process.read = None;
                process.read_failed(at);
            }
        } else if answer <= at && answer < read.timeout_at && link == Link::Up {
            let read = process.read.take().unwrap();
            process.answered(at, read.shown.unwrap(), read.sent);
        } else if answer <= at && answer < read.timeout_at {
            read.shown = None;
            read.linearize_at = NEVER;
        } else if read.timeout_at <= at {
            process.read = None;
            process.read_failed(at);
        }
    }

    /// The Lease write of pod `i` lands at `at`, if due (a cut link or etcd fails it).
    fn land_lease(&mut self, i: usize, at: u64) {
        let (link, down, uid, name) = {
            let pod = &self.pods[i];
            (pod.link, self.etcd_down, pod.uid.clone(), pod.name())
        };
        let process = self.pods[i].process.as_mut().unwrap();
        let Some(write) = process.lease.as_mut().filter(|w| w.at <= at) else {
            return;
        };
        write.fails |= link != Link::Up || down;
        let Some(acked) = process.lease_done(at) else {
            return;
        };
        let previous = self.leases.get(&name).filter(|l| l.holder == uid);
        let acked = acked.or_else(|| previous.and_then(|l| l.acked));
        let record = super::cluster::LeaseRecord {
            holder: uid,
            acked,
            renewed: at,
        };
        self.leases.insert(name, record);
    }

    /// The kubelets at `at`: each node not cut off renews its Lease on its period, and probes
    /// its pods, writing a pod's Ready condition when it changes (etcd permitting).
    fn kubelets(&mut self, at: u64) {
        let down = self.etcd_down;
        for (n, node) in self.nodes.values_mut().enumerate() {
            if !node.cut && !down && at % NODE_RENEW_PERIOD == node_offset(n) {
                node.renewed = at;
            }
        }
        for pod in &mut self.pods {
            let cut = self.nodes.get(&pod.node).is_none_or(|n| n.cut);
            if cut || down || at % PROBE_PERIOD != probe_offset(pod) {
                continue;
            }
            let ready = pod.gone_at.is_none() && pod.process.as_ref().is_some_and(|p| p.ready(at));
            if ready != pod.ready {
                pod.ready = ready;
                pod.ready_since = at;
            }
        }
    }

    /// Adds the time since the last instant to the duplicated time, if some job ran twice.
    fn account(&mut self, at: u64) {
        if let Some(since) = self.duplicated_since {
            self.duplicate_millis += at.saturating_sub(since.max(self.millis));
        }
    }

    /// Notes whether some job does work on two instances now (after every event at this
    /// instant).
    fn watch_duplicates(&mut self) {
        if !self.exclusive {
            return;
        }
        let twice = self.holders().into_iter().find(|(_, pods)| pods.len() > 1);
        let Some((job, pods)) = twice else {
            self.duplicated_since = None;
            return;
        };
        let who: Vec<String> = pods.iter().map(|p| describe(p)).collect();
        let what = format!(
            "job {job} runs on {} live pods at {} ms: {}",
            pods.len(),
            self.millis,
            who.join(", ")
        );
        self.duplicate.get_or_insert(what);
        self.duplicated_since.get_or_insert(self.millis);
    }

    /// The watches of the workers in `mask` deliver: each worker's informer takes its
    /// ConfigMap as it is, and the worker reads at once (an event proves nothing).
    pub fn sync(&mut self, mask: u8) {
        self.sync_where(|i| i < 8 && mask & (1 << i) != 0);
    }

    /// Every watch delivers.
    pub fn sync_all(&mut self) {
        self.sync_where(|_| true);
    }

    fn sync_where(&mut self, delivered: impl Fn(usize) -> bool) {
        let at = self.millis;
        for i in 0..self.pods.len() {
            let entry = self.entry(&self.pods[i].name());
            let pod = &mut self.pods[i];
            let Some(process) = pod.process.as_mut() else {
                continue;
            };
            if !delivered(i) || pod.link != Link::Up || process.paused || process.exited {
                continue;
            }
            process.cache = Some(entry);
            process.fence.watched(process.now(at));
        }
        self.advance(0);
    }

    /// SIGSTOP of the worker process of pod `index`.
    pub fn pause(&mut self, index: usize) {
        if let Some(process) = self.process_at(index) {
            process.paused = true;
        }
    }

    /// SIGCONT of the worker process of pod `index`: every permit is checked before any job
    /// works again.
    pub fn resume(&mut self, index: usize) {
        let at = self.millis;
        if let Some(process) = self.process_at(index).filter(|p| p.paused) {
            process.resume(at);
        }
        self.advance(0);
    }

    /// The worker of pod `index` loses the API server (`link`), or regains it (`Link::Up`).
    pub fn cut(&mut self, index: usize, link: Link) {
        let Some(uid) = self.pod_at(index).map(|p| p.uid.clone()) else {
            return;
        };
        let pod = self.pods.iter_mut().find(|p| p.uid == uid).unwrap();
        pod.link = link;
        self.advance(0);
    }

    /// Node `n`'s kubelet is cut off from the API server (it stops renewing the node's Lease
    /// and writing pod status), and with `pods` so are the workers on it; or it is back.
    pub fn cut_node(&mut self, n: usize, cut: bool, pods: bool) {
        let name = super::cluster::node_name(n % super::cluster::NODES);
        if let Some(node) = self.nodes.get_mut(&name) {
            node.cut = cut;
        }
        for pod in self.pods.iter_mut().filter(|p| p.node == name) {
            if pods || !cut {
                pod.link = if cut { Link::Fail } else { Link::Up };
            }
        }
        self.advance(0);
    }

    /// The API server loses etcd (every request hangs), or regains it: what hung takes effect.
    pub fn etcd(&mut self, down: bool) {
        self.etcd_down = down;
        if !down {
            let at = self.millis;
            for pod in &mut self.pods {
                let link = pod.link;
                let read = pod.process.as_mut().and_then(|p| p.read.as_mut());
                if let Some(read) = read.filter(|r| r.linearize_at == NEVER && link == Link::Up) {
                    read.linearize_at = at;
                }
            }
        }
        self.advance(0);
    }

    /// Every fault ends: processes resume, links, nodes and etcd heal.
    pub fn heal(&mut self) {
        let at = self.millis;
        self.etcd_down = false;
        for node in self.nodes.values_mut() {
            node.cut = false;
        }
        for pod in &mut self.pods {
            pod.link = Link::Up;
            if let Some(process) = pod.process.as_mut() {
                if let Some(read) = process.read.as_mut().filter(|r| r.linearize_at == NEVER) {
                    read.linearize_at = at;
                }
                if process.paused {
                    process.resume(at);
                }
            }
        }
        self.advance(0);
    }

    fn process_at(&mut self, index: usize) -> Option<&mut process::Process> {
        let uid = self.pod_at(index)?.uid.clone();
        let pod = self.pods.iter_mut().find(|p| p.uid == uid)?;
        pod.process.as_mut()
    }
}

/// The first instant at or after `from` that is `offset` into a `period`.
fn next_at(from: u64, period: u64, offset: u64) -> u64 {
    let start = from - from % period;
    if start + offset >= from {
        start + offset
    } else {
        start + period + offset
    }
}

/// When in its period node `n`'s kubelet renews the node's Lease.
fn node_offset(n: usize) -> u64 {
    n as u64 * 3_331 % NODE_RENEW_PERIOD
}

/// When in its period the kubelet probes `pod`.
fn probe_offset(pod: &PodInstance) -> u64 {
    pod.uid_number() * 1_237 % PROBE_PERIOD
}

fn describe(pod: &PodInstance) -> String {
    format!("{} ({})", pod.name(), pod.uid)
}
