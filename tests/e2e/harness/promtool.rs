//! Running Prometheus' `promtool` on what the operator serves (also included by
//! tests/integration/monitoring.rs).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Finds promtool: `PROMTOOL`, then `<repo>/.tools/bin/promtool`, then `PATH`.
pub fn locate() -> PathBuf {
    super::tools::locate("PROMTOOL", "promtool")
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

/// `promtool <args>` in `dir`: its standard output, or what it printed when it failed.
#[allow(dead_code)] // Used by tests/integration/monitoring.rs, which includes this file.
pub fn run(args: &[&str], dir: &Path) -> Result<String, String> {
    let output = Command::new(locate())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "promtool {} exited {}: {stdout}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
