//! One backoff per worker for an API server that sheds load (429 Too Many Requests). A worker
//! sends three kinds of request, the fence read, the Lease write and the watch; with a backoff
//! each, a worker turned away kept all three coming back on their own schedules, and 10,000
//! workers started together sent an overloaded API server several times their resting rate
//! (see docs/performance.md). Here a 429 on any of them holds all of them: nothing is sent
//! until a random moment a quarter to half the permit later, then one request at a time (a
//! probe, the fence read when one waits: it is what keeps the jobs running) until one is
//! answered without a 429.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use swarm_protocol::fence::shed_retry_delay;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::jitter;

/// The shed state, with no I/O: driven by explicit instants.
#[derive(Debug, Default)]
struct Gate {
    /// Nothing is sent before this instant, and after it one probe at a time; `None`: not shed.
    held_until: Option<Instant>,
    /// A probe is in flight.
    probing: bool,
    /// Fence reads waiting to be sent: the probe is theirs.
    fences_waiting: usize,
}

/// What a request that asks to be sent at some instant is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Send now, with this kind of pass.
    Send(Kind),
    /// Ask again at this instant.
    WaitUntil(Instant),
    /// Ask again once the probe in flight is answered.
    WaitForProbe,
}

/// Whether a request went while the worker was shed (the probe) or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Free,
    Probe,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The API server shed it (429): everything is held until then.
    Shed(Instant),
    /// The API server answered it otherwise (a success or another error).
    Answered,
    /// No answer: a refused or reset connection, a timeout, or the request given up.
    Failed,
}

impl Gate {
    /// The turn of a request asking at `now`; `fence` for a fence read.
    fn turn(&mut self, now: Instant, fence: bool) -> Turn {
        match self.held_until {
            None => Turn::Send(Kind::Free),
            Some(until) if now < until => Turn::WaitUntil(until),
            Some(_) if self.probing || (!fence && self.fences_waiting > 0) => Turn::WaitForProbe,
            Some(_) => {
                self.probing = true;
                Turn::Send(Kind::Probe)
            }
        }
    }

    /// A request of `kind` ended with `outcome`. A probe answered without a 429 ends the hold;
    /// one that got no answer lets the next request probe; a request sent before the hold
    /// began ends nothing, since a 429 came after it was sent.
    fn ended(&mut self, kind: Kind, outcome: Outcome) {
        if kind == Kind::Probe {
            self.probing = false;
        }
        match outcome {
            Outcome::Shed(until) => {
                self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
            }
            Outcome::Answered if kind == Kind::Probe => self.held_until = None,
            Outcome::Answered | Outcome::Failed => {}
        }
    }
}

/// The gate shared by a worker's requests.
#[derive(Debug)]
pub(crate) struct Shed {
    gate: Mutex<Gate>,
    /// Wakes the requests waiting for a probe's answer.
    answered: Notify,
    /// The worker's permit, which scales the hold.
    permit: Duration,
}

impl Shed {
    pub(crate) fn new(permit: Duration) -> Arc<Self> {
        Arc::new(Self {
            gate: Mutex::new(Gate::default()),
            answered: Notify::new(),
            permit,
        })
    }

    /// Waits until a request may be sent; the pass says how it ended.
    pub(crate) async fn admit(self: &Arc<Self>) -> Pass {
        self.wait(false).await
    }

    /// [`Shed::admit`] for a fence read, which goes first once a hold ends.
    pub(crate) async fn admit_fence_read(self: &Arc<Self>) -> Pass {
        self.lock().fences_waiting += 1;
        let waiting = FenceWaiting(self);
        let pass = self.wait(true).await;
        drop(waiting);
        pass
    }

    async fn wait(self: &Arc<Self>, fence: bool) -> Pass {
        loop {
            // Registered before the gate is read, so that an answer between the two wakes it.
            let answered = self.answered.notified();
            let turn = self.lock().turn(Instant::now(), fence);
            match turn {
                Turn::Send(kind) => {
                    return Pass {
                        shed: Arc::clone(self),
                        kind,
                        outcome: Outcome::Failed,
                    };
                }
                Turn::WaitUntil(until) => tokio::time::sleep_until(until).await,
                Turn::WaitForProbe => answered.await,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts a fence read as waiting until it is admitted or given up.
struct FenceWaiting<'a>(&'a Shed);

impl Drop for FenceWaiting<'_> {
    fn drop(&mut self) {
        let mut gate = self.0.lock();
        gate.fences_waiting = gate.fences_waiting.saturating_sub(1);
        drop(gate);
        // A request that deferred to this fence read may probe now.
        self.0.answered.notify_waiters();
    }
}

/// Leave to send one request. Dropped without [`Pass::ended`] (the request given up), it
/// counts as [`Outcome::Failed`].
#[derive(Debug)]
pub(crate) struct Pass {
    shed: Arc<Shed>,
    kind: Kind,
    outcome: Outcome,
}

impl Pass {
    /// How the request ended, from its error if any: a 429 holds every request of the worker a
    /// quarter to half the permit, at random. Returns whether it was shed.
    pub(crate) fn ended(mut self, error: Option<&kube::Error>) -> bool {
        self.outcome = match error {
            Some(error) if crate::source::is_shed(error) => {
                let hold = shed_retry_delay(self.shed.permit, jitter());
                Outcome::Shed(Instant::now() + hold)
            }
            Some(kube::Error::Api(_)) | None => Outcome::Answered,
            Some(_) => Outcome::Failed,
        };
        matches!(self.outcome, Outcome::Shed(_))
    }

    #[cfg(test)]
    fn with(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.shed.lock().ended(self.kind, self.outcome);
        if self.kind == Kind::Probe {
            self.shed.answered.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_shed_request_holds_every_request_then_lets_one_probe_through_at_a_time() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        assert_eq!(gate.turn(t0, false), Turn::Send(Kind::Free));
        assert_eq!(
            gate.turn(t0, true),
            Turn::Send(Kind::Free),
            "not shed: no limit"
        );
        gate.ended(Kind::Free, Outcome::Shed(t0 + 10 * SECOND));
        assert_eq!(
            gate.turn(t0 + SECOND, true),
            Turn::WaitUntil(t0 + 10 * SECOND)
        );
        assert_eq!(gate.turn(t0 + 10 * SECOND, false), Turn::Send(Kind::Probe));
        assert_eq!(gate.turn(t0 + 10 * SECOND, true), Turn::WaitForProbe);
        // The probe is shed too: all wait again.
        gate.ended(Kind::Probe, Outcome::Shed(t0 + 20 * SECOND));
        assert_eq!(
            gate.turn(t0 + 11 * SECOND, false),
            Turn::WaitUntil(t0 + 20 * SECOND)
        );
        assert_eq!(gate.turn(t0 + 20 * SECOND, false), Turn::Send(Kind::Probe));
        // Answered: the hold ends for all.
        gate.ended(Kind::Probe, Outcome::Answered);
        assert_eq!(gate.turn(t0 + 21 * SECOND, false), Turn::Send(Kind::Free));
        assert_eq!(gate.turn(t0 + 21 * SECOND, true), Turn::Send(Kind::Free));
    }

    #[test]
    fn a_request_sent_before_the_hold_does_not_end_it_and_holds_only_lengthen() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        gate.ended(Kind::Free, Outcome::Shed(t0 + 10 * SECOND));
        gate.ended(Kind::Free, Outcome::Answered);
        assert_eq!(gate.turn(t0, false), Turn::WaitUntil(t0 + 10 * SECOND));
        gate.ended(Kind::Free, Outcome::Shed(t0 + 5 * SECOND));
        assert_eq!(gate.turn(t0, false), Turn::WaitUntil(t0 + 10 * SECOND));
    }

    #[test]
    fn a_probe_without_an_answer_lets_the_next_request_probe_and_the_hold_goes_on() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        gate.ended(Kind::Free, Outcome::Shed(t0));
        assert_eq!(gate.turn(t0, false), Turn::Send(Kind::Probe));
        gate.ended(Kind::Probe, Outcome::Failed);
        assert_eq!(gate.turn(t0, false), Turn::Send(Kind::Probe));
        assert_eq!(gate.turn(t0, false), Turn::WaitForProbe);
    }

    #[test]
    fn once_a_hold_ends_a_waiting_fence_read_is_the_probe() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        gate.ended(Kind::Free, Outcome::Shed(t0 + SECOND));
        gate.fences_waiting = 1;
        assert_eq!(gate.turn(t0 + SECOND, false), Turn::WaitForProbe);
        assert_eq!(gate.turn(t0 + SECOND, true), Turn::Send(Kind::Probe));
        gate.fences_waiting = 0;
        gate.ended(Kind::Probe, Outcome::Shed(t0 + 2 * SECOND));
        assert_eq!(gate.turn(t0 + 2 * SECOND, false), Turn::Send(Kind::Probe));
    }

    fn shed_now(pass: Pass, permit: Duration) {
        pass.with(Outcome::Shed(
            Instant::now() + shed_retry_delay(permit, jitter()),
        ));
    }

    /// Three kinds of request against an API server that sheds every one for a minute: with
    /// one gate they send about one request per hold (7.5 to 15 s for a 30 s permit), where
    /// three backoffs of their own would send three or more.
    #[tokio::test(start_paused = true)]
    async fn a_worker_turned_away_sends_one_request_per_hold_whatever_its_kinds() {
        let permit = Duration::from_secs(30);
        let shed = Shed::new(permit);
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let start = Instant::now();
        let tasks: Vec<_> = (0..3)
            .map(|kind| {
                let (shed, sent) = (shed.clone(), sent.clone());
                tokio::spawn(async move {
                    while start.elapsed() < Duration::from_secs(60) {
                        let pass = match kind {
                            0 => shed.admit_fence_read().await,
                            _ => shed.admit().await,
                        };
                        sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        shed_now(pass, permit);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let sent = sent.load(std::sync::atomic::Ordering::SeqCst);
        // The first three go before any answer; then one per hold of at least 7.5 s.
        assert!((4..=3 + 9).contains(&sent), "{sent} requests in a minute");
    }

    #[tokio::test(start_paused = true)]
    async fn once_a_probe_is_answered_the_waiting_requests_go_at_once() {
        let permit = Duration::from_secs(30);
        let shed = Shed::new(permit);
        shed_now(shed.admit().await, permit);
        let probe = shed.admit_fence_read().await;
        let waiting = tokio::spawn({
            let shed = shed.clone();
            async move {
                let _pass = shed.admit().await;
                Instant::now()
            }
        });
        tokio::time::sleep(SECOND).await;
        assert!(!waiting.is_finished(), "waits for the probe");
        let answered_at = Instant::now();
        probe.ended(None);
        assert_eq!(waiting.await.unwrap(), answered_at);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_write_waits_for_the_fence_read_to_probe_first() {
        let permit = Duration::from_secs(30);
        let shed = Shed::new(permit);
        shed_now(shed.admit().await, permit);
        let order = Arc::new(Mutex::new(Vec::new()));
        let write = tokio::spawn({
            let (shed, order) = (shed.clone(), order.clone());
            async move {
                let _pass = shed.admit().await;
                order.lock().unwrap().push("write");
            }
        });
        tokio::task::yield_now().await;
        let read = tokio::spawn({
            let (shed, order) = (shed.clone(), order.clone());
            async move {
                let pass = shed.admit_fence_read().await;
                order.lock().unwrap().push("read");
                tokio::time::sleep(SECOND).await;
                pass.ended(None);
            }
        });
        read.await.unwrap();
        write.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["read", "write"]);
    }
}
