//! Scenario 8: a Balanced pool with nothing changing costs no writes at all.

use std::time::Duration;

use crate::harness::observe::observe;
use crate::harness::scenario;

/// The quiet period the issue asks for. A fixed wait is the point here: nothing may happen.
const QUIET: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_pool_makes_no_write_request_for_ten_seconds() {
    scenario!("quiet")
        .run(async |env| {
            let settled = env.install_example().await;
            let mark = env.request_mark().await;

            tokio::time::sleep(QUIET).await;

            let now = observe(env).await.expect("observe the pool");
            assert_eq!(now.phase(), "Balanced");
            assert_eq!(
                now.pool_resource_version(),
                settled.pool_resource_version(),
                "the SwarmPool (status) was written"
            );
            assert_eq!(
                now.config_map_resource_version(),
                settled.config_map_resource_version(),
                "the ConfigMap was written"
            );
            assert_eq!(now.uids(), settled.uids(), "a worker pod was replaced");
            match env.operator_requests_since(mark).await {
                Some(requests) => {
                    let writes: Vec<String> = requests
                        .iter()
                        .filter(|r| r.is_write())
                        .map(|r| r.describe())
                        .collect();
                    assert!(
                        writes.is_empty(),
                        "write requests while nothing changed: {writes:#?}"
                    );
                    eprintln!(
                        "quiet: the operator made {} requests in {QUIET:?}, none a write",
                        requests.len()
                    );
                }
                None => env.note_skipped("write requests in the request log"),
            }
            env.assert_operator_running();
        })
        .await;
}
