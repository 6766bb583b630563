//! One version everywhere a release sets it (`scripts/release.sh`): the workspace's
//! (`Cargo.toml`'s `[workspace.package]`, which every crate inherits), Cargo.lock's entries of
//! the workspace's crates, the chart's `version` and `appVersion`, the operator image's tag in
//! `deploy/` and in README.md's build command, and the Python package's. A test fails naming
//! every place that disagrees, and another fails when the release script would not set a file
//! read here.

use std::path::Path;

use serde_yaml::Value;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const RELEASE_SCRIPT: &str = "scripts/release.sh";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub(crate) fn toml(path: &str) -> toml::Table {
    read(path).parse().unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `table.key` (dotted: `package.version`) as a string; `None` when absent or not a string.
pub(crate) fn string(table: &toml::Table, key: &str) -> Option<String> {
    let mut value = None::<&toml::Value>;
    for part in key.split('.') {
        value = match value {
            None => table.get(part),
            Some(inner) => inner.get(part),
        };
    }
    value?.as_str().map(str::to_owned)
}

/// The workspace's members, from the root Cargo.toml's `members = [...]`.
fn members(root: &toml::Table) -> Vec<String> {
    root["workspace"]["members"]
        .as_array()
        .expect("[workspace] members")
        .iter()
        .filter_map(|member| member.as_str().map(str::to_owned))
        .collect()
}

/// Every place that holds the version, as (where, the version found there).
fn versions() -> Vec<(String, String)> {
    let root = toml("Cargo.toml");
    let mut found = Vec::new();
    let mut crates = Vec::new();
    for member in members(&root) {
        let path = if member == "." {
            "Cargo.toml".to_owned()
        } else {
            format!("{member}/Cargo.toml")
        };
        let manifest = toml(&path);
        crates.push(string(&manifest, "package.name").expect("[package] name"));
        // `version.workspace = true` is a table, not a string.
        let inherits = manifest["package"]["version"]
            .get("workspace")
            .and_then(toml::Value::as_bool);
        if inherits != Some(true) {
            let version = string(&manifest, "package.version").unwrap_or_default();
            found.push((
                format!("{path} [package] version (or version.workspace = true)"),
                version,
            ));
        }
    }
    let protocol = string(&root, "workspace.dependencies.swarm-protocol.version");
    found.push((
        "Cargo.toml [workspace.dependencies] swarm-protocol version (=VERSION)".into(),
        protocol.map_or_else(String::new, |v| v.trim_start_matches('=').to_owned()),
    ));
    let lock = toml("Cargo.lock");
    for entry in lock["package"].as_array().expect("Cargo.lock [[package]]") {
        let field = |key: &str| entry[key].as_str().unwrap_or_default().to_owned();
        if crates.contains(&field("name")) {
            found.push((format!("Cargo.lock {}", field("name")), field("version")));
        }
    }
    let chart = yaml("charts/swarm-operator/Chart.yaml");
    for key in ["version", "appVersion"] {
        let value = chart[key].as_str().unwrap_or_default().to_owned();
        found.push((format!("charts/swarm-operator/Chart.yaml {key}"), value));
    }
    let images = &yaml("deploy/manager/kustomization.yaml")["images"];
    let operator = images
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|i| i["name"] == "swarm-operator");
    let tag = operator
        .and_then(|image| image["newTag"].as_str())
        .unwrap_or_default();
    found.push((
        "deploy/manager/kustomization.yaml images swarm-operator newTag".into(),
        tag.into(),
    ));
    let pyproject = toml("examples/python-worker/pyproject.toml");
    let python = string(&pyproject, "project.version").unwrap_or_default();
    found.push((
        "examples/python-worker/pyproject.toml [project] version".into(),
        python,
    ));
    let readme = read("README.md");
    let build = readme
        .lines()
        .find_map(|line| line.strip_prefix("docker build -t swarm-operator:"));
    let tag = build
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default();
    found.push((
        "README.md docker build -t swarm-operator:<tag>".into(),
        tag.into(),
    ));
    found
}

#[test]
fn every_place_holds_the_workspace_version() {
    let workspace = string(&toml("Cargo.toml"), "workspace.package.version")
        .expect("Cargo.toml [workspace.package] version: the one version of every crate");
    assert_eq!(
        workspace,
        env!("CARGO_PKG_VERSION"),
        "the operator inherits the workspace's version"
    );
    let disagree: Vec<String> = versions()
        .into_iter()
        .filter(|(_, version)| *version != workspace)
        .map(|(place, version)| format!("{place}: {version:?}"))
        .collect();
    assert!(
        disagree.is_empty(),
        "the workspace's version is {workspace} (Cargo.toml [workspace.package]), but:\n  {}\n\
         set one version everywhere with `{RELEASE_SCRIPT} VERSION --registry ...` (RELEASING.md), \
         or by hand in each file named",
        disagree.join("\n  ")
    );
}

#[test]
fn the_release_script_sets_every_file_that_holds_the_version() {
    let script = read(RELEASE_SCRIPT);
    let list = script
        .split_once("version_files=(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list.split_whitespace().collect::<Vec<_>>())
        .expect("scripts/release.sh's version_files=(...)");
    let missing: Vec<String> = versions()
        .into_iter()
        .map(|(place, _)| {
            place
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .filter(|file| !list.contains(&file.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{RELEASE_SCRIPT}'s version_files ({list:?}) leave out {missing:?}: a release would not \
         set their version"
    );
}
