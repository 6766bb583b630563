//! Subcommands other than `run` and `crd`.

pub mod plan;
