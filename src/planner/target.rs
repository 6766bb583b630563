//! The target assignment as the handoff reads it: the ordinal of each job of the spec, by the
//! job's position in the spec. An [`swarm_assign::Assignment`] holds a copy of every job name; a pool of
//! 100,000 jobs would keep that copy (about 4 MiB) through the whole handoff, next to the
//! spec, the previous config and the handoff's own tables.

#[cfg(test)]
use swarm_assign::Assignment;
use swarm_assign::Owners;

#[cfg(test)]
use crate::planner::by_job::Positions;

/// No ordinal: the job is not in the assignment (a pool without workers).
const NONE: u32 = u32::MAX;

/// Where the assignment wants each job of the spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The ordinal of each job, by its position in the spec ([`NONE`]: none).
    owners: Vec<u32>,
    /// How many jobs each ordinal gets.
    loads: Vec<usize>,
}

impl Target {
    /// The target the strategy placed by spec position.
    pub fn from_owners(owners: &Owners) -> Target {
        let mut loads = vec![0; owners.replicas()];
        let owners = owners
            .iter()
            .map(|ordinal| match ordinal {
                Some(ordinal) => {
                    loads[ordinal] += 1;
                    to_u32(ordinal)
                }
                None => NONE,
            })
            .collect();
        Target { owners, loads }
    }

    /// The target `assignment` of the jobs `spec` (unique, as validated). The planner builds its
    /// target from the owners; tests write theirs as job lists. A job the assignment
    /// lists that is not in the spec is left out; one it lists twice counts twice in its load
    /// (the strategies list each job once).
    #[cfg(test)]
    pub fn of(spec: &[String], assignment: &Assignment) -> Target {
        let positions = Positions::new(spec);
        let mut owners = vec![NONE; spec.len()];
        let mut loads = vec![0; assignment.replicas()];
        for (ordinal, jobs) in assignment.workers().iter().enumerate() {
            for position in jobs.iter().filter_map(|job| positions.of(job)) {
                owners[position] = to_u32(ordinal);
                loads[ordinal] += 1;
            }
        }
        Target { owners, loads }
    }

    /// The number of ordinals.
    pub fn replicas(&self) -> usize {
        self.loads.len()
    }

    /// The ordinal the job at `position` of the spec goes to, if any.
    pub fn owner(&self, position: usize) -> Option<usize> {
        self.owners
            .get(position)
            .filter(|&&ordinal| ordinal != NONE)
            .map(|&ordinal| ordinal as usize)
    }

    /// How many jobs `ordinal` gets.
    pub fn load(&self, ordinal: usize) -> usize {
        self.loads.get(ordinal).copied().unwrap_or(0)
    }

    /// The jobs of every ordinal, in spec order, borrowed from `spec` (the spec it was made of).
    pub fn workers<'s>(&self, spec: &'s [String]) -> Vec<Vec<&'s str>> {
        let mut workers: Vec<Vec<&str>> =
            self.loads.iter().map(|&n| Vec::with_capacity(n)).collect();
        for (position, job) in spec.iter().enumerate() {
            if let Some(ordinal) = self.owner(position) {
                workers[ordinal].push(job);
            }
        }
        workers
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 4 billion jobs and workers")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn each_job_of_the_spec_has_the_ordinal_the_assignment_gives_it() {
        let spec = strings(&["d", "b", "a", "c"]);
        let assignment = Assignment::new(vec![strings(&["d", "a"]), vec![], strings(&["b", "c"])]);
        let target = Target::of(&spec, &assignment);
        assert_eq!(target.replicas(), 3);
        let owners: Vec<Option<usize>> = (0..spec.len()).map(|p| target.owner(p)).collect();
        assert_eq!(owners, vec![Some(0), Some(2), Some(0), Some(2)]);
        assert_eq!((target.load(0), target.load(1), target.load(2)), (2, 0, 2));
        assert_eq!(
            target.workers(&spec),
            vec![vec!["d", "a"], vec![], vec!["b", "c"]]
        );
    }

    #[test]
    fn jobs_outside_the_assignment_or_the_spec_have_no_owner() {
        let spec = strings(&["a", "b"]);
        let target = Target::of(&spec, &Assignment::new(vec![strings(&["b", "gone"])]));
        assert_eq!(
            (target.owner(0), target.owner(1), target.owner(2)),
            (None, Some(0), None)
        );
        assert_eq!(target.load(0), 1, "a job not in the spec is not counted");
        let none = Target::of(&spec, &Assignment::default());
        assert_eq!((none.replicas(), none.owner(0)), (0, None));
        assert_eq!(none.workers(&spec), Vec::<Vec<&str>>::new());
    }

    #[test]
    fn a_placement_by_position_is_the_target_of_its_assignment() {
        use std::collections::BTreeSet;
        use swarm_assign::{Qos, Strategy, place_over_members};

        let spec: Vec<String> = (0..50).map(|i| format!("job-{i}")).collect();
        let qos = Qos::default();
        for (replicas, absent) in [
            (4, BTreeSet::new()),
            (4, BTreeSet::from([1])),
            (0, BTreeSet::new()),
        ] {
            let placed = place_over_members(Strategy::Sticky, &spec, replicas, &absent, None, &qos);
            let by_owners = Target::from_owners(&placed.owners);
            let by_names = Target::of(&spec, &placed.owners.assignment(&spec));
            assert_eq!(by_owners.replicas(), replicas);
            for position in 0..spec.len() {
                assert_eq!(by_owners.owner(position), by_names.owner(position));
            }
            for ordinal in 0..replicas {
                assert_eq!(by_owners.load(ordinal), by_names.load(ordinal));
            }
            assert_eq!(by_owners.workers(&spec), by_names.workers(&spec));
        }
    }
}
