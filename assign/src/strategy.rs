//! `spec.strategy`: how a SwarmPool's jobs are spread over its workers.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the jobs of a pool are assigned to the ordinals of its StatefulSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum Strategy {
    /// Perfect balance (every worker holds floor(J/N) or ceil(J/N) jobs) with the fewest possible
    /// moves from the assignment now in the ConfigMap: scaling N to N+1 moves exactly
    /// floor(J/(N+1)) jobs, all to the new worker; adding a job moves no other job.
    #[default]
    Sticky,
    /// Jump consistent hash of the job name: a pure function of (job, N) that workers can compute
    /// themselves; balanced only on average.
    Consistent,
    /// Jobs in spec order cut into contiguous chunks, the first J % N chunks one job longer: the
    /// layout of the predecessor project, without its overlap and loss.
    Contiguous,
}

impl Strategy {
    /// Every strategy, in declaration order.
    pub const ALL: [Strategy; 3] = [Strategy::Sticky, Strategy::Consistent, Strategy::Contiguous];

    /// The name used in `spec.strategy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Sticky => "Sticky",
            Strategy::Consistent => "Consistent",
            Strategy::Contiguous => "Contiguous",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
