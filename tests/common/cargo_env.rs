//! A cargo run from inside a test: without what cargo set for the test process.

use std::process::Command;

/// Removes from `command` the variables cargo sets for a test process, not for a build:
/// inherited, `CARGO_MANIFEST_DIR` alone makes cargo rerun ring's build script, and so
/// recompile the TLS stack, kube and the operator, then again in the next plain build.
pub fn without_test_env(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(&*name);
        }
    }
    command
}
