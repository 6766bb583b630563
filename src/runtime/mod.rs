//! What runs around the controller: leader election, the HTTP endpoints, metrics and
//! telemetry.

pub mod allocator_metrics;
pub mod api_requests;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod pool_metrics;
pub mod telemetry;
