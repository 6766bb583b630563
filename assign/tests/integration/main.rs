//! The assignment core's integration and property tests, one module each, linked into one
//! binary.

mod common;
mod consistent_properties;
mod contiguous_properties;
mod hash_stability;
mod next_config;
mod predecessor_regression;
mod qos_properties;
mod slot_properties;
mod sticky_properties;
mod worker_config;
