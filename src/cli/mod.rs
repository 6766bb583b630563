//! Subcommands other than `run` and `crd`.

pub mod check;
pub mod handoff_writes;
pub mod plan;
