//! Subcommands other than `run` and `crd`.

pub mod handoff_writes;
pub mod plan;
