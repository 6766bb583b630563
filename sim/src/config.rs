//! Runtime settings of a simulated control plane.

use std::net::SocketAddr;
use std::time::Duration;

/// How a simulation listens and how fast its simulated time runs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Listen address; port 0 picks a free port.
    pub addr: SocketAddr,
    /// Factor applied to every simulated delay: 0.01 makes a 30 s grace period take 0.3 s.
    /// Readiness probes are not simulated delays: they probe real processes in real time.
    pub time_scale: f64,
    /// How long a pod takes to become Running and Ready, before scaling by `time_scale`.
    pub pod_ready_delay: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            time_scale: 1.0,
            pod_ready_delay: Duration::from_secs(1),
        }
    }
}

impl SimConfig {
    /// Scales a simulated duration by `time_scale` (never negative).
    pub fn scaled(&self, d: Duration) -> Duration {
        d.mul_f64(self.time_scale.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_multiplies_by_time_scale() {
        let config = SimConfig {
            time_scale: 0.01,
            ..SimConfig::default()
        };
        assert_eq!(
            config.scaled(Duration::from_secs(30)),
            Duration::from_millis(300)
        );
    }
}
