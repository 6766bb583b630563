//! Read-only lookups by job name for one plan: a pool of 100,000 jobs makes one entry per job,
//! so these are sorted vectors (16 bytes of key per entry, or a 4-byte position, no nodes)
//! rather than maps.

/// `(job, value)` pairs sorted by job, then value, without repeats: a job may have several
/// values (the pods that list it), found next to each other.
#[derive(Debug)]
pub(crate) struct ByJob<'a, V> {
    pairs: Vec<(&'a str, V)>,
}

impl<'a, V: Copy + Ord> ByJob<'a, V> {
    /// The table of `pairs`, in any order.
    pub(crate) fn new(mut pairs: Vec<(&'a str, V)>) -> Self {
        pairs.sort_unstable();
        pairs.dedup();
        pairs.shrink_to_fit();
        Self { pairs }
    }

    /// The values of `job`, in order.
    pub(crate) fn get(&self, job: &str) -> impl Iterator<Item = V> + '_ {
        self.entries_of(job).iter().map(|(_, value)| *value)
    }

    /// Every job once, in order, with its values.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a str, impl Iterator<Item = V> + '_)> {
        self.pairs
            .chunk_by(|a, b| a.0 == b.0)
            .map(|group| (group[0].0, group.iter().map(|(_, value)| *value)))
    }

    fn entries_of(&self, job: &str) -> &[(&'a str, V)] {
        let start = self.pairs.partition_point(|(j, _)| *j < job);
        let len = self.pairs[start..].partition_point(|(j, _)| *j == job);
        &self.pairs[start..start + len]
    }
}

/// The positions of a job list, sorted by job name: a job's position by binary search, with 4
/// bytes per job instead of a map from names or a sorted copy of them.
#[derive(Debug)]
pub(crate) struct Positions<'a> {
    jobs: &'a [String],
    by_name: Vec<u32>,
}

impl<'a> Positions<'a> {
    /// The positions of `jobs` (unique, as validated).
    pub(crate) fn new(jobs: &'a [String]) -> Self {
        let count = u32::try_from(jobs.len()).expect("fewer than 4 billion jobs");
        let mut by_name: Vec<u32> = (0..count).collect();
        by_name.sort_unstable_by(|&a, &b| jobs[a as usize].cmp(&jobs[b as usize]));
        Self { jobs, by_name }
    }

    /// The position of `job` in the list, if it is listed.
    pub(crate) fn of(&self, job: &str) -> Option<usize> {
        self.by_name
            .binary_search_by(|&p| self.jobs[p as usize].as_str().cmp(job))
            .ok()
            .map(|at| self.by_name[at] as usize)
    }

    /// Whether `job` is listed.
    pub(crate) fn contains(&self, job: &str) -> bool {
        self.of(job).is_some()
    }

    /// How many jobs are listed.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_has_its_values_in_order_without_repeats() {
        let table = ByJob::new(vec![("b", 2), ("a", 9), ("b", 1), ("b", 2), ("c", 0)]);
        assert_eq!(table.get("b").collect::<Vec<_>>(), [1, 2]);
        assert_eq!(table.get("a").collect::<Vec<_>>(), [9]);
        assert_eq!(table.get("z").count(), 0);
        assert_eq!(table.get("").count(), 0);
        let all: Vec<(&str, Vec<i32>)> = table.iter().map(|(j, v)| (j, v.collect())).collect();
        assert_eq!(all, [("a", vec![9]), ("b", vec![1, 2]), ("c", vec![0])]);
    }

    #[test]
    fn a_job_is_found_at_its_position() {
        let jobs: Vec<String> = ["c", "a", "b"].iter().map(|j| j.to_string()).collect();
        let positions = Positions::new(&jobs);
        assert_eq!(
            ["a", "b", "c", "d", ""].map(|j| positions.of(j)),
            [Some(1), Some(2), Some(0), None, None]
        );
        assert!(positions.contains("c") && !positions.contains("z"));
        assert_eq!(positions.len(), 3);
        assert_eq!(Positions::new(&[]).of("a"), None);
    }
}
