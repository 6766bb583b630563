//! Waiting for the cluster to reach a state, without fixed sleeps.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a scenario waits for the operator and the controllers to converge. Generous on
/// purpose: the suite shares two cores with the simulations and operators of parallel tests.
pub const CONVERGE: Duration = Duration::from_secs(90);

const INTERVAL: Duration = Duration::from_millis(100);

/// Polls `check` until it returns `Ok`, and returns that value. `check` explains in its `Err`
/// what it is still waiting for; after `timeout` the test fails with the last explanation.
pub async fn eventually_within<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if start.elapsed() >= timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last observation: {last}")
            }
            Err(_) => tokio::time::sleep(INTERVAL).await,
        }
    }
}

/// [`eventually_within`] with the suite's [`CONVERGE`] timeout.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    eventually_within(what, CONVERGE, check).await
}
