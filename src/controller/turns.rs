//! The turns of reconciles (`--max-concurrent-reconciles` of them), handed out in the order
//! asked: kube-runtime's own bound keeps the waiting pools in a hash set and takes the first in
//! its iteration order, so under load the same pools won every free slot; tokio's semaphore
//! queues them fairly.
//!
//! A reconcile lends its turn out while it writes a large batch: the first rollout of a
//! 1,000-worker pool writes for minutes, and the pools behind it (a failover, a scale) would
//! wait all that time for a turn to plan in, though the writes themselves share a bound of
//! their own.

use std::future::Future;

use tokio::sync::{Semaphore, SemaphorePermit};

/// The turns of reconciles.
pub(super) struct Turns(Semaphore);

/// One reconcile's turn; dropped, it goes to the next in line.
pub(super) struct Turn<'a> {
    turns: &'a Turns,
    permit: Option<SemaphorePermit<'a>>,
}

impl Turns {
    pub(super) fn new(count: usize) -> Self {
        Turns(Semaphore::new(count))
    }

    /// Waits for a turn, behind every reconcile that asked before.
    pub(super) async fn take(&self) -> Turn<'_> {
        Turn {
            turns: self,
            permit: Some(self.permit().await),
        }
    }

    async fn permit(&self) -> SemaphorePermit<'_> {
        self.0.acquire().await.expect("the turns are never closed")
    }
}

impl Turn<'_> {
    /// Runs `work` with the turn lent to the next in line, then waits for a turn again.
    pub(super) async fn lent_during<F: Future>(&mut self, work: F) -> F::Output {
        self.permit = None;
        let output = work.await;
        self.permit = Some(self.turns.permit().await);
        output
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn a_lent_turn_lets_the_next_reconcile_plan_and_is_taken_back_in_line() {
        let turns = Arc::new(Turns::new(1));
        let mut writer = turns.take().await;
        let (writes_done, wait_for_writes) = oneshot::channel::<()>();
        let (planned, wait_for_plan) = oneshot::channel::<()>();
        let other = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move {
                let _turn = turns.take().await;
                planned.send(()).unwrap();
                // Holds its turn until the writer has finished writing.
                tokio::time::sleep(Duration::from_millis(50)).await;
            })
        };
        let writes = async {
            // The other reconcile plans while the writes go on.
            wait_for_plan.await.unwrap();
            writes_done.send(()).unwrap();
        };
        tokio::time::timeout(Duration::from_secs(10), writer.lent_during(writes))
            .await
            .expect("the other reconcile got no turn while the writer wrote");
        wait_for_writes.await.unwrap();
        assert!(other.is_finished(), "the writer waited for its turn back");
        assert_eq!(turns.0.available_permits(), 0, "the writer holds it again");
        drop(writer);
        assert_eq!(turns.0.available_permits(), 1);
    }
}
