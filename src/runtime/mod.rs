//! What runs around the controller: leader election, the HTTP endpoints, metrics and who may
//! read them, the serving certificate, the caches' health, retry delays and telemetry. The
//! controller uses it; it uses nothing of the controller.

pub mod allocator_metrics;
pub mod api_requests;
pub mod cache_health;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_review;
pub mod pool_metrics;
pub mod retry;
pub mod telemetry;
pub mod tls;
