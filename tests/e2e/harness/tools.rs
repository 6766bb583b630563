//! Finding the command-line tools the tests run (also included by tests/integration/main.rs,
//! for monitoring.rs and helm_chart/).

use std::env;
use std::path::{Path, PathBuf};

/// Finds tool `name`: the path in environment variable `var`, then
/// `<repo>/.tools/bin/<name>` (where `scripts/install-<name>.sh` puts it), then `PATH`.
pub fn locate(var: &str, name: &str) -> PathBuf {
    if let Some(path) = env::var_os(var).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{var}={} does not name a file; unset it or run scripts/install-{name}.sh",
            path.display()
        );
        return path;
    }
    let tools = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/bin")
        .join(name);
    if tools.is_file() {
        return tools;
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found ({var} unset, no .tools/bin/{name}, none on PATH); \
                 run scripts/install-{name}.sh or scripts/test.sh"
            )
        })
}
