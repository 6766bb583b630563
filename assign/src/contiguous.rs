//! `Contiguous`: the predecessor's layout, corrected.

/// Owner of every job: jobs in spec order cut into `replicas` contiguous chunks, the first
/// `J % N` chunks one job longer, so that chunk `i` starts where chunk `i - 1` ends.
pub(crate) fn owners(job_count: usize, replicas: usize) -> Vec<usize> {
    let (size, longer) = (job_count / replicas, job_count % replicas);
    let mut owners = Vec::with_capacity(job_count);
    for ordinal in 0..replicas {
        let len = size + usize::from(ordinal < longer);
        owners.extend(std::iter::repeat_n(ordinal, len));
    }
    owners
}
