//! The seeded plan of a soak: what happens when, decided before anything runs, so that one
//! seed always gives the same sequence of load actions and faults (only what the cluster does
//! in response differs between runs).

use std::time::Duration;

/// SplitMix64: tiny, fast and good enough to spread choices; no dependency, so the plan of a
/// seed never changes with a crate upgrade.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5EED_5EED_5EED_5EED)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.next_u64() as usize % items.len()]
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.next_u64() as usize % (i + 1);
            items.swap(i, j);
        }
    }
}

/// Which operator replica a per-replica fault targets, resolved when it is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Leader,
    Standby,
}

/// A fault, with the parameters the seed chose.
#[derive(Clone, Debug)]
pub enum Fault {
    /// SIGKILL kube-apiserver, keep it down, start it again.
    ApiserverRestart { down: Duration },
    /// SIGKILL etcd, keep it down, start it again.
    EtcdRestart { down: Duration },
    /// SIGSTOP etcd, then SIGCONT.
    EtcdFreeze { frozen: Duration },
    /// A FlowSchema that puts the operator's accounts in a priority level with `shares`
    /// nominal concurrency shares, nothing borrowed, and Reject as its limit response. Even 0
    /// shares leave the level a seat: a lone request is served, concurrent ones get 429.
    ApfReject { shares: u32, lasts: Duration },
    /// Latency on one replica's connection to the API server.
    Latency {
        target: Target,
        millis: u64,
        lasts: Duration,
    },
    /// Every connection of one replica reset after `after_millis`.
    ResetPeer {
        target: Target,
        after_millis: u64,
        lasts: Duration,
    },
    /// One replica's connection silently drops everything (longer than the lease).
    Blackhole { target: Target, lasts: Duration },
    /// SIGKILL the leader.
    LeaderKill,
    /// SIGSTOP the leader beyond its lease, then SIGCONT.
    LeaderFreeze { frozen: Duration },
    /// Delete a worker pod of some pool (the `pick`th of the live ones).
    WorkerDelete { pick: u64 },
}

/// The kinds in a fixed order; the seed shuffles it, and the soak cycles through the result,
/// so a short soak covers a seed-dependent subset and a long one every kind several times.
pub const FAULT_KINDS: [&str; 10] = [
    "apiserver-restart",
    "etcd-restart",
    "etcd-freeze",
    "apf-reject",
    "toxic-latency",
    "toxic-reset-peer",
    "toxic-blackhole",
    "leader-kill",
    "leader-freeze",
    "worker-delete",
];

impl Fault {
    /// The kind's name, as the report shows it.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::ApiserverRestart { .. } => FAULT_KINDS[0],
            Fault::EtcdRestart { .. } => FAULT_KINDS[1],
            Fault::EtcdFreeze { .. } => FAULT_KINDS[2],
            Fault::ApfReject { .. } => FAULT_KINDS[3],
            Fault::Latency { .. } => FAULT_KINDS[4],
            Fault::ResetPeer { .. } => FAULT_KINDS[5],
            Fault::Blackhole { .. } => FAULT_KINDS[6],
            Fault::LeaderKill => FAULT_KINDS[7],
            Fault::LeaderFreeze { .. } => FAULT_KINDS[8],
            Fault::WorkerDelete { .. } => FAULT_KINDS[9],
        }
    }

    /// How long the fault is planned to last (the restarts also wait for the component to
    /// serve again, so they take longer).
    pub fn planned(&self) -> Duration {
        match self {
            Fault::ApiserverRestart { down } | Fault::EtcdRestart { down } => *down,
            Fault::EtcdFreeze { frozen } | Fault::LeaderFreeze { frozen } => *frozen,
            Fault::ApfReject { lasts, .. }
            | Fault::Latency { lasts, .. }
            | Fault::ResetPeer { lasts, .. }
            | Fault::Blackhole { lasts, .. } => *lasts,
            Fault::LeaderKill | Fault::WorkerDelete { .. } => Duration::ZERO,
        }
    }

    fn generate(kind: &str, rng: &mut Rng, nth_of_kind: usize, lease: Duration) -> Fault {
        let secs = |rng: &mut Rng, lo, hi| Duration::from_secs(rng.range(lo, hi));
        let target = |rng: &mut Rng| *rng.pick(&[Target::Leader, Target::Standby]);
        let lease = lease.as_secs();
        match kind {
            "apiserver-restart" => Fault::ApiserverRestart {
                down: secs(rng, 5, 15),
            },
            "etcd-restart" => Fault::EtcdRestart {
                down: secs(rng, 5, 10),
            },
            "etcd-freeze" => Fault::EtcdFreeze {
                frozen: secs(rng, 10, 30),
            },
            // Alternate between no share and the smallest one.
            "apf-reject" => Fault::ApfReject {
                shares: u32::from(!nth_of_kind.is_multiple_of(2)),
                lasts: secs(rng, 15, 30),
            },
            "toxic-latency" => Fault::Latency {
                target: target(rng),
                millis: rng.range(1000, 3000),
                lasts: secs(rng, 20, 40),
            },
            "toxic-reset-peer" => Fault::ResetPeer {
                target: target(rng),
                after_millis: rng.range(500, 3000),
                lasts: secs(rng, 10, 20),
            },
            "toxic-blackhole" => Fault::Blackhole {
                target: target(rng),
                lasts: secs(rng, lease + 4, lease + 14),
            },
            "leader-kill" => Fault::LeaderKill,
            "leader-freeze" => Fault::LeaderFreeze {
                frozen: secs(rng, lease + 4, lease + 9),
            },
            "worker-delete" => Fault::WorkerDelete {
                pick: rng.next_u64(),
            },
            other => unreachable!("unknown fault kind {other}"),
        }
    }
}

/// A change a user makes, with the parameters the seed chose.
#[derive(Clone, Debug)]
pub enum Load {
    /// Scale the workload of pool `pool` (an index into the soak's pools) to `replicas`.
    Scale { pool: usize, replicas: u32 },
    /// Add a job to, or remove one of the added jobs from, pool `pool`.
    EditJobs { pool: usize, add: bool, pick: u64 },
    /// `kubectl rollout restart` the workload of pool `pool`.
    RolloutRestart { pool: usize },
    /// Create the transient pool if it does not exist, delete it if it does.
    TogglePool,
}

impl Load {
    /// The kind's name, as the report shows it.
    pub fn kind(&self) -> &'static str {
        match self {
            Load::Scale { .. } => "scale",
            Load::EditJobs { add: true, .. } => "add-job",
            Load::EditJobs { add: false, .. } => "remove-job",
            Load::RolloutRestart { .. } => "rollout-restart",
            Load::TogglePool => "toggle-transient-pool",
        }
    }
}

/// One step of the fault track: a pause, a fault, and a pause for the pools to settle.
#[derive(Clone, Debug)]
pub struct Step {
    pub before_fault: Duration,
    pub fault: Fault,
    pub after_fault: Duration,
}

/// The whole plan: three tracks that run side by side.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Faults, one at a time.
    pub steps: Vec<Step>,
    /// Load actions, each after a pause.
    pub loads: Vec<(Duration, Load)>,
    /// Pauses between two etcd compactions.
    pub compactions: Vec<Duration>,
}

/// What the plan may scale: per pool, the replicas it may have.
pub struct PoolShape {
    pub min: u32,
    pub max: u32,
}

impl Schedule {
    /// The plan of `seed` for a soak of `total`, over pools of `shapes` (index = pool), with
    /// the operator's leader lease of `lease`. Each track is generated until it fills `total`.
    pub fn generate(seed: u64, total: Duration, shapes: &[PoolShape], lease: Duration) -> Schedule {
        let mut rng = Rng::new(seed);
        let mut kinds = FAULT_KINDS;
        rng.shuffle(&mut kinds);
        let mut steps = Vec::new();
        let mut planned = Duration::ZERO;
        while planned < total {
            let n = steps.len();
            let kind = kinds[n % kinds.len()];
            let step = Step {
                before_fault: Duration::from_secs(rng.range(3, 8)),
                fault: Fault::generate(kind, &mut rng, n / kinds.len(), lease),
                after_fault: Duration::from_secs(rng.range(8, 15)),
            };
            planned += step.before_fault + step.fault.planned() + step.after_fault;
            steps.push(step);
        }
        let mut loads = Vec::new();
        let mut planned = Duration::ZERO;
        while planned < total {
            let gap = Duration::from_secs(rng.range(5, 12));
            planned += gap;
            loads.push((gap, Load::generate(&mut rng, shapes)));
        }
        let mut compactions = Vec::new();
        let mut planned = Duration::ZERO;
        while planned < total {
            let gap = Duration::from_secs(rng.range(10, 25));
            planned += gap;
            compactions.push(gap);
        }
        Schedule {
            steps,
            loads,
            compactions,
        }
    }
}

impl Load {
    fn generate(rng: &mut Rng, shapes: &[PoolShape]) -> Load {
        let pool = rng.range(0, shapes.len() as u64 - 1) as usize;
        match rng.range(0, 9) {
            0..=2 => Load::Scale {
                pool,
                replicas: rng.range(shapes[pool].min.into(), shapes[pool].max.into()) as u32,
            },
            // Two adds for one removal; a removal from a pool with no added job adds one
            // instead.
            3..=5 => Load::EditJobs {
                pool,
                add: rng.range(0, 2) != 0,
                pick: rng.next_u64(),
            },
            6 | 7 => Load::RolloutRestart { pool },
            _ => Load::TogglePool,
        }
    }
}
