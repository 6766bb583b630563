//! One backoff per worker for an API server that sheds load (429 Too Many Requests). A worker
//! sends three kinds of request, the fence read, the Lease write and the watch; with a backoff
//! each, a worker turned away kept all three coming back on their own schedules, and 10,000
//! workers started together sent an overloaded API server several times their resting rate
//! (see docs/performance.md). Here a 429 on any of them holds all of them: nothing is sent
//! until a random moment a quarter to half the permit later, then one request at a time (a
//! probe) until one is answered without a 429.

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

impl Gate {
    fn turn(&mut self, now: Instant) -> Turn {
        match self.held_until {
            None => Turn::Send(Kind::Free),
            Some(until) if now < until => Turn::WaitUntil(until),
            Some(_) if self.probing => Turn::WaitForProbe,
            Some(_) => {
                self.probing = true;
                Turn::Send(Kind::Probe)
            }
        }
    }

    /// A request of `kind` was answered: shed (`Some(hold)`: held until then) or not. A probe
    /// answered without a 429 ends the hold; a request sent before the hold began does not,
    /// since a 429 came after it was sent.
    fn answered(&mut self, kind: Kind, shed_until: Option<Instant>) {
        if kind == Kind::Probe {
            self.probing = false;
        }
        match shed_until {
            Some(until) => {
                self.held_until = Some(self.held_until.map_or(until, |held| held.max(until)));
            }
            None if kind == Kind::Probe => self.held_until = None,
            None => {}
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

    /// Waits until a request may be sent; the pass says how it was answered.
    pub(crate) async fn admit(self: &Arc<Self>) -> Pass {
        loop {
            // Registered before the gate is read, so that an answer between the two wakes it.
            let answered = self.answered.notified();
            let turn = self.lock().turn(Instant::now());
            match turn {
                Turn::Send(kind) => {
                    return Pass {
                        shed: Arc::clone(self),
                        kind,
                        shed_until: None,
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

/// Leave to send one request. Dropped without [`Pass::shed`] (answered, failed otherwise, or
/// abandoned), it counts as not shed.
#[derive(Debug)]
pub(crate) struct Pass {
    shed: Arc<Shed>,
    kind: Kind,
    shed_until: Option<Instant>,
}

impl Pass {
    /// The request was shed (429): hold every request of the worker a quarter to half the
    /// permit, at random.
    pub(crate) fn shed(mut self) {
        self.shed_until = Some(Instant::now() + shed_retry_delay(self.shed.permit, jitter()));
    }

    /// Records `shed` as the answer.
    pub(crate) fn answered(self, shed: bool) {
        if shed {
            self.shed();
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.shed.lock().answered(self.kind, self.shed_until);
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
        assert_eq!(gate.turn(t0), Turn::Send(Kind::Free));
        assert_eq!(gate.turn(t0), Turn::Send(Kind::Free), "not shed: no limit");
        gate.answered(Kind::Free, Some(t0 + 10 * SECOND));
        assert_eq!(gate.turn(t0 + SECOND), Turn::WaitUntil(t0 + 10 * SECOND));
        assert_eq!(gate.turn(t0 + 10 * SECOND), Turn::Send(Kind::Probe));
        assert_eq!(gate.turn(t0 + 10 * SECOND), Turn::WaitForProbe);
        // The probe is shed too: all wait again.
        gate.answered(Kind::Probe, Some(t0 + 20 * SECOND));
        assert_eq!(
            gate.turn(t0 + 11 * SECOND),
            Turn::WaitUntil(t0 + 20 * SECOND)
        );
        assert_eq!(gate.turn(t0 + 20 * SECOND), Turn::Send(Kind::Probe));
        // Answered: the hold ends for all.
        gate.answered(Kind::Probe, None);
        assert_eq!(gate.turn(t0 + 21 * SECOND), Turn::Send(Kind::Free));
        assert_eq!(gate.turn(t0 + 21 * SECOND), Turn::Send(Kind::Free));
    }

    #[test]
    fn a_request_sent_before_the_hold_does_not_end_it_and_holds_only_lengthen() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        gate.answered(Kind::Free, Some(t0 + 10 * SECOND));
        gate.answered(Kind::Free, None);
        assert_eq!(gate.turn(t0), Turn::WaitUntil(t0 + 10 * SECOND));
        gate.answered(Kind::Free, Some(t0 + 5 * SECOND));
        assert_eq!(gate.turn(t0), Turn::WaitUntil(t0 + 10 * SECOND));
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_request_probe() {
        let t0 = Instant::now();
        let mut gate = Gate::default();
        gate.answered(Kind::Free, Some(t0));
        assert_eq!(gate.turn(t0), Turn::Send(Kind::Probe));
        // Failed without a 429, or dropped: as answered, the hold ends.
        gate.answered(Kind::Probe, None);
        assert_eq!(gate.turn(t0), Turn::Send(Kind::Free));
    }

    /// Three kinds of request against an API server that sheds every one for a minute: with
    /// one gate they send about one request per hold (7.5 to 15 s for a 30 s permit), where
    /// three backoffs of their own would send three or more.
    #[tokio::test(start_paused = true)]
    async fn a_worker_turned_away_sends_one_request_per_hold_whatever_its_kinds() {
        let shed = Shed::new(Duration::from_secs(30));
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let start = Instant::now();
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let (shed, sent) = (shed.clone(), sent.clone());
                tokio::spawn(async move {
                    while start.elapsed() < Duration::from_secs(60) {
                        let pass = shed.admit().await;
                        sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        pass.answered(true);
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
        let shed = Shed::new(Duration::from_secs(30));
        shed.admit().await.shed();
        let probe = shed.admit().await;
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
        probe.answered(false);
        assert_eq!(waiting.await.unwrap(), answered_at);
    }
}
