//! The `kube-sim` binary: writes a kubeconfig once listening, serves, exits on SIGTERM.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn binary_writes_kubeconfig_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("nested").join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--time-scale",
            "0.01",
            "--pod-ready-delay",
            "0.5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no kubeconfig written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("current-context: kube-sim"));
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    assert!(server.starts_with("http://127.0.0.1:"));
    let version: serde_json::Value = reqwest::get(format!("{server}/version"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(version["major"], "1");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "kube-sim did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "exit status {exit:?}");
}
