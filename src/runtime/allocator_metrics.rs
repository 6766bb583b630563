//! The allocator's own counts on `/metrics`, read at each scrape: how much of the operator's
//! RSS is live heap and how much is freed memory jemalloc still holds. The RSS alone cannot
//! tell a larger plan from pages not yet returned.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use tikv_jemalloc_ctl::{epoch, stats};

/// Label set of `swarm_operator_allocator_bytes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatLabels {
    stat: &'static str,
}

/// jemalloc's global statistics (`stats.*`), refreshed at each scrape. Meaningful only in a
/// binary whose global allocator is jemalloc (the operator's); register it there.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocatorStats;

/// One reading of jemalloc's statistics, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Bytes the program has allocated and not freed: the live heap.
    pub allocated: u64,
    /// Bytes in pages holding live allocations (allocated plus the free space in those pages).
    pub active: u64,
    /// Bytes of jemalloc's own bookkeeping.
    pub metadata: u64,
    /// Bytes in physically resident pages jemalloc maps: active pages, freed pages not yet
    /// returned, and metadata.
    pub resident: u64,
    /// Bytes of address space returned to the system but kept mapped for reuse (not RSS).
    pub retained: u64,
}

impl AllocatorStats {
    /// Refreshes jemalloc's cached statistics and reads them.
    pub fn read(self) -> Result<Reading, tikv_jemalloc_ctl::Error> {
        epoch::advance()?;
        let bytes = |n: usize| n as u64;
        Ok(Reading {
            allocated: bytes(stats::allocated::read()?),
            active: bytes(stats::active::read()?),
            metadata: bytes(stats::metadata::read()?),
            resident: bytes(stats::resident::read()?),
            retained: bytes(stats::retained::read()?),
        })
    }
}

impl Collector for AllocatorStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A failed read leaves the family out rather than failing the whole scrape.
        let Ok(reading) = self.read() else {
            return Ok(());
        };
        let mut family = encoder.encode_descriptor(
            "swarm_operator_allocator_bytes",
            "The allocator's (jemalloc's) statistics: allocated is the live heap; resident minus \
             active and metadata is freed memory not yet returned to the system",
            None,
            MetricType::Gauge,
        )?;
        for (stat, value) in [
            ("allocated", reading.allocated),
            ("active", reading.active),
            ("metadata", reading.metadata),
            ("resident", reading.resident),
            ("retained", reading.retained),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(family.encode_family(&StatLabels { stat })?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The test binary allocates with the system allocator, so jemalloc's figures here are
    // near zero: the values are checked on a running operator, in the kubectl plugin's
    // end-to-end scenario.
    #[test]
    fn every_statistic_is_exported_as_one_family() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(AllocatorStats));
        let text = crate::runtime::metrics::encode(&registry);
        assert!(
            text.contains("# TYPE swarm_operator_allocator_bytes gauge"),
            "{text}"
        );
        for stat in ["allocated", "active", "metadata", "resident", "retained"] {
            assert!(
                text.contains(&format!(
                    "swarm_operator_allocator_bytes{{stat=\"{stat}\"}} "
                )),
                "{stat}: {text}"
            );
        }
    }
}
