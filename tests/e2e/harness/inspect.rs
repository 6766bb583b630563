//! What the assertions see beyond the API: what each pod instance runs, and the requests the
//! operator made. The simulation records both; on a real cluster the first is derived from
//! the API's history and the second read from the API server's audit log.

use std::sync::Arc;

use super::derived_mounts::DerivedMounts;
use super::real_cluster::RealCluster;
use super::sim_inspect::{PodMounts, RequestRecord, SimInspector};

/// The inspection source of one environment.
#[derive(Clone)]
pub enum Inspector {
    /// kube-sim's inspection endpoints.
    Sim(SimInspector),
    /// A real cluster: derived mounts, and its audit log if it keeps one.
    Real(Arc<RealInspector>),
}

/// What a real cluster shows of one environment.
pub struct RealInspector {
    mounts: DerivedMounts,
    cluster: RealCluster,
    /// The namespace of the operator's ServiceAccount (`None`: any namespace).
    accounts_in: Option<String>,
    /// The audit log is the cluster's: the requests before this environment's start (earlier
    /// scenarios') are not its own.
    skip: usize,
}

impl RealInspector {
    fn operator_requests(&self) -> Option<Vec<RequestRecord>> {
        Some(
            self.cluster
                .operator_requests(self.accounts_in.as_deref())?
                .into_iter()
                .skip(self.skip)
                .collect(),
        )
    }
}

impl Inspector {
    /// The inspector of a real cluster, counting only the requests made from now on by the
    /// operator's ServiceAccount of namespace `accounts_in` (`None`: of any namespace).
    pub fn real(
        cluster: RealCluster,
        accounts_in: Option<String>,
        mounts: DerivedMounts,
    ) -> Inspector {
        let skip = cluster
            .operator_requests(accounts_in.as_deref())
            .map_or(0, |r| r.len());
        Inspector::Real(Arc::new(RealInspector {
            mounts,
            cluster,
            accounts_in,
            skip,
        }))
    }

    /// Every live pod instance whose mounts are known, with failures returned.
    pub async fn try_mounts(&self) -> Result<Vec<PodMounts>, String> {
        match self {
            Inspector::Sim(sim) => sim.try_mounts().await,
            Inspector::Real(real) => real.mounts.try_mounts().await,
        }
    }

    /// What the live instances `uids` mounted (on a real cluster, waiting briefly for the
    /// watches to catch up with them).
    pub async fn mounts_of(&self, uids: &[String]) -> Vec<PodMounts> {
        match self {
            Inspector::Sim(sim) => sim.mounts().await,
            Inspector::Real(real) => real.mounts.mounts_of(uids).await,
        }
    }

    /// The operator's requests so far, oldest first; `None` where none are recorded.
    pub async fn operator_requests(&self) -> Option<Vec<RequestRecord>> {
        match self {
            Inspector::Sim(sim) => Some(
                sim.requests()
                    .await
                    .into_iter()
                    .filter(RequestRecord::is_from_operator)
                    .collect(),
            ),
            Inspector::Real(real) => real.operator_requests(),
        }
    }

    /// Like [`Inspector::operator_requests`], without async, for the failure report printed
    /// while a test unwinds.
    pub fn operator_requests_blocking(&self) -> Option<Vec<RequestRecord>> {
        match self {
            Inspector::Sim(sim) => sim.operator_requests_blocking(),
            Inspector::Real(real) => real.operator_requests(),
        }
    }
}
