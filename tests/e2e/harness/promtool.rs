//! Running Prometheus' `promtool` on what the operator serves.

use std::env;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::kubectl::repo_root;

/// Finds promtool: `PROMTOOL`, then `<repo>/.tools/bin/promtool`, then `PATH`.
pub fn locate() -> PathBuf {
    if let Some(path) = env::var_os("PROMTOOL").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let tools = repo_root().join(".tools/bin/promtool");
    if tools.is_file() {
        return tools;
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join("promtool"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "promtool not found (PROMTOOL unset, no .tools/bin/promtool, none on PATH); \
                 run scripts/install-promtool.sh or scripts/test.sh"
            )
        })
}

/// `promtool check metrics` on `exposition`: its complaints, if any.
pub fn check_metrics(exposition: &str) -> Result<(), String> {
    let mut child = Command::new(locate())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let output = child.wait_with_output().expect("wait for promtool");
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics exited {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
