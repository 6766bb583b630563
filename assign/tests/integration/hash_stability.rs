//! The hash and the assignments derived from it are fixed across releases and platforms:
//! changing them would move jobs on upgrade and break workers that compute their share.

use swarm_assign::hash::{job_hash, jump_hash};
use swarm_assign::{Strategy, assign};

use crate::common;

#[test]
fn job_hash_is_xxhash64_with_seed_0() {
    assert_eq!(job_hash(""), 0xEF46_DB37_51D8_E999);
    assert_eq!(job_hash("abc"), 0x44BC_2CF5_AD77_0999);
}

#[test]
fn jump_hash_matches_the_reference_vectors() {
    for (key, buckets, bucket) in [
        (1, 1, 0),
        (42, 57, 43),
        (0xDEAD_10CC, 1, 0),
        (0xDEAD_10CC, 666, 361),
        (256, 1024, 520),
    ] {
        assert_eq!(jump_hash(key, buckets), bucket, "key {key} over {buckets}");
    }
    assert_eq!(jump_hash(42, 0), 0);
}

#[test]
fn the_example_jobs_on_3_workers_are_laid_out_by_sticky_as_in_every_release() {
    let sticky = assign(Strategy::Sticky, &common::example_jobs(), 3, None);
    assert_eq!(
        sticky.workers(),
        [
            vec![
                "stream:xxrtve1",
                "stream:zrtve2:new",
                "stream:history:new",
                "stream:foo:new",
                "stream:yxctv1:updated",
                "stream:xabcn0:updated",
                "stream:xacb01:updated",
                "stream:sportnews0:updated",
                "stream:cars:updated",
            ],
            vec![
                "stream:cctv0:updated",
                "stream:cctv3:updated",
                "stream:xxctv0:updated",
                "stream:xxctv11:updated",
                "stream:xxctv12:updated",
                "stream:xxctv14:updated",
                "stream:xacb02:updated",
                "stream:xacb03:updated",
                "stream:xacb04:updated",
            ],
            vec![
                "stream:xxrtve2",
                "stream:zrtve1:new",
                "stream:zrtve0:new",
                "stream:xxctv3:new",
                "stream:xxctv10:updated",
                "stream:xxctv13:updated",
                "stream:yxctv2:updated",
                "stream:yxctv3:updated",
                "stream:cars:new",
            ],
        ]
    );
}

#[test]
fn the_example_jobs_on_3_workers_are_laid_out_by_consistent_as_in_every_release() {
    let consistent = assign(Strategy::Consistent, &common::example_jobs(), 3, None);
    assert_eq!(
        consistent.workers(),
        [
            vec![
                "stream:zrtve1:new",
                "stream:zrtve0:new",
                "stream:foo:new",
                "stream:xxctv0:updated",
                "stream:xxctv13:updated",
                "stream:yxctv3:updated",
                "stream:xacb01:updated",
                "stream:xacb02:updated",
                "stream:xacb03:updated",
                "stream:xacb04:updated",
                "stream:cars:new",
            ],
            vec![
                "stream:xxrtve1",
                "stream:xxrtve2",
                "stream:zrtve2:new",
                "stream:cctv0:updated",
                "stream:xxctv3:new",
                "stream:cctv3:updated",
                "stream:xxctv10:updated",
                "stream:xxctv11:updated",
                "stream:xxctv14:updated",
                "stream:xabcn0:updated",
                "stream:sportnews0:updated",
            ],
            vec![
                "stream:history:new",
                "stream:xxctv12:updated",
                "stream:yxctv1:updated",
                "stream:yxctv2:updated",
                "stream:cars:updated",
            ],
        ]
    );
}
