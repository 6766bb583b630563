//! Each image's SBOM, as syft writes it from the image's OCI archive (`scripts/release.sh`
//! publishes the same), names every package the image holds, at the version it holds:
//!
//! - `swarm-operator` and `swarm-worker`: every crate linked into the binary, workspace crates
//!   included, as `cargo tree -e normal,no-proc-macro` resolves them for the Linux target (for
//!   the example worker, the root package's and the `swarm-worker` crate's); and the Debian
//!   package of each shared library and of the loader, as this machine's dpkg names them.
//! - `swarm-go-worker`: every module `go version -m` reads from the image's binary; no Debian
//!   package.
//! - `swarm-python-worker`: every wheel `examples/python-worker/requirements.txt` pins and every
//!   Debian package `hack/debian/python-image-packages` pins, and no other.
//!
//! A failure names the packages missing from the SBOM and those it has that nobody expected.
//! The archives are found as the `images` tests find them; syft is the binary `SWARM_SYFT` names,
//! else the one `scripts/install-syft.sh` builds once from `hack/syft/go.mod`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::{cargo_env, helm_chart, images};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The images' platform: the crates resolved for it are the ones linked.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// A set of `name version` strings.
type Packages = BTreeSet<String>;

fn syft() -> &'static Path {
    static SYFT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match SYFT.get_or_init(|| helm_chart::pinned_tool("SWARM_SYFT", "scripts/install-syft.sh")) {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// The packages of image `name`'s SBOM, by purl type (`cargo`, `deb`, `golang`, `pypi`, ...).
fn sbom(name: &str) -> BTreeMap<String, Packages> {
    let archive = images::archives().join(format!("{name}.tar"));
    assert!(archive.is_file(), "no {}", archive.display());
    let spdx: Value = serde_json::from_str(&images::run(
        Command::new(syft())
            .env("SYFT_CHECK_FOR_APP_UPDATE", "false")
            .args(["scan", "--quiet", "--source-name", name, "-o", "spdx-json"])
            .arg(format!("oci-archive:{}", archive.display())),
    ))
    .unwrap();
    let mut found: BTreeMap<String, Packages> = BTreeMap::new();
    for package in spdx["packages"].as_array().unwrap() {
        let purl_type = package["externalRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["referenceType"] == "purl")
            .find_map(|r| r["referenceLocator"].as_str()?.strip_prefix("pkg:"))
            .and_then(|purl| purl.split('/').next());
        if let (Some(purl_type), Some(name), Some(version)) = (
            purl_type,
            package["name"].as_str(),
            package["versionInfo"].as_str(),
        ) {
            found
                .entry(purl_type.to_owned())
                .or_default()
                .insert(format!("{name} {version}"));
        }
    }
    found
}

/// Fails, naming them, when `sbom` lacks one of `want`, or (with `exact`) has one more; `from`
/// says where in the image syft reads them.
fn check(image: &str, what: &str, from: &str, want: &Packages, sbom: &Packages, exact: bool) {
    assert!(
        !want.is_empty(),
        "{image}: no {what} expected: nothing to check"
    );
    let missing: Vec<&String> = want.difference(sbom).collect();
    let extra: Vec<&String> = if exact {
        sbom.difference(want).collect()
    } else {
        Vec::new()
    };
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{image}'s SBOM does not list the {what} the image holds (of {} expected): missing \
         {missing:?}, unexpected {extra:?}. syft reads them from {from}",
        want.len()
    );
}

const CRATES_FROM: &str = "the binary's .dep-v0 section, which scripts/build-images.sh \
    (stage_rust_deps, scripts/lib/rust-deps.py) adds";
const DEBS_FROM: &str = "/var/lib/dpkg/status.d/<package> and /etc/os-release, which \
    scripts/build-images.sh writes (stage_host_dpkg_status, stage_deb_dpkg_status)";

/// The crates `cargo tree` resolves for `packages` on the images' platform, as linked: no
/// build-dependency or proc-macro.
fn linked_crates(packages: &[&str]) -> Packages {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()));
    command
        .current_dir(REPO)
        .args(["tree", "--locked", "-e", "normal,no-proc-macro", "--target"])
        .args([TRIPLE, "--prefix", "none", "--format", "{p}"]);
    for package in packages {
        command.args(["-p", package]);
    }
    cargo_env::without_test_env(&mut command);
    images::run(&mut command)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(format!(
                "{} {}",
                words.next()?,
                words.next()?.strip_prefix('v')?
            ))
        })
        .collect()
}

/// The Debian packages, `name version`, that own the image's files under the library
/// directories, as this machine's dpkg knows them (the Rust images copy them from here).
fn host_library_packages(image: &images::Image) -> Packages {
    let libraries: Vec<String> = image
        .files()
        .into_iter()
        .filter(|f| f.starts_with("/lib") || f.starts_with("/usr/lib"))
        .collect();
    assert!(!libraries.is_empty(), "no library in the image");
    let owners = images::run(Command::new("dpkg").arg("-S").args(&libraries));
    let names: BTreeSet<&str> = owners
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(owners, _)| owners))
        .flat_map(|owners| owners.split(", "))
        .collect();
    let versions = images::run(
        Command::new("dpkg-query")
            .args(["-W", "-f", "${Package} ${Version}\\n"])
            .args(&names),
    );
    versions.lines().map(str::to_owned).collect()
}

/// `name version` of each uncommented line of `path`, whose words are split by `separator`.
fn pins(path: &str, separator: &str) -> Packages {
    std::fs::read_to_string(Path::new(REPO).join(path))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, version) = l
                .split_once(separator)
                .unwrap_or_else(|| panic!("{path}: not a pin: {l}"));
            format!("{} {}", name.trim(), version.trim())
        })
        .collect()
}

/// A Python distribution's name as PEP 503 compares them.
fn normalized(entry: &str) -> String {
    let (name, version) = entry.split_once(' ').unwrap();
    let name = name.to_lowercase().replace(['_', '.'], "-");
    format!("{name} {version}")
}

fn check_rust_image(name: &str, packages: &[&str]) {
    let sbom = sbom(name);
    let empty = Packages::new();
    let image = images::unpack(name);
    check(
        name,
        "crates",
        CRATES_FROM,
        &linked_crates(packages),
        sbom.get("cargo").unwrap_or(&empty),
        true,
    );
    check(
        name,
        "Debian packages",
        DEBS_FROM,
        &host_library_packages(&image),
        sbom.get("deb").unwrap_or(&empty),
        true,
    );
}

#[test]
fn the_operator_sbom_lists_its_crates_and_debian_packages() {
    check_rust_image("swarm-operator", &["swarm-operator"]);
}

#[test]
fn the_worker_sbom_lists_its_crates_and_debian_packages() {
    // The example links the operator package's dependencies and the swarm-worker crate.
    check_rust_image("swarm-worker", &["swarm-operator", "swarm-worker"]);
}

#[test]
fn the_go_worker_sbom_lists_its_modules() {
    let name = "swarm-go-worker";
    let sbom = sbom(name);
    let image = images::unpack(name);
    let build_info = images::run(
        Command::new("go")
            .args(["version", "-m"])
            .arg(image.path("/usr/local/bin/swarm-go-worker")),
    );
    let modules: Packages = build_info
        .lines()
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                ["dep", path, version, ..] => Some(format!("{path} {version}")),
                _ => None,
            },
        )
        .collect();
    let empty = Packages::new();
    // syft lists the main module and the Go standard library too.
    check(
        name,
        "Go modules",
        "the binary's build information",
        &modules,
        sbom.get("golang").unwrap_or(&empty),
        false,
    );
    assert_eq!(
        sbom.get("deb"),
        None,
        "{name}: a static binary, no Debian package"
    );
}

#[test]
fn the_python_worker_sbom_lists_its_wheels_and_debian_packages() {
    let name = "swarm-python-worker";
    let sbom = sbom(name);
    let empty = Packages::new();
    let wheels: Packages = pins("examples/python-worker/requirements.txt", "==")
        .iter()
        .map(|p| normalized(p))
        .collect();
    let listed: Packages = sbom
        .get("pypi")
        .unwrap_or(&empty)
        .iter()
        .map(|p| normalized(p))
        .collect();
    check(
        name,
        "wheels",
        "the .dist-info directories in /usr/lib/python3/dist-packages",
        &wheels,
        &listed,
        true,
    );
    check(
        name,
        "Debian packages",
        DEBS_FROM,
        &pins("hack/debian/python-image-packages", " "),
        sbom.get("deb").unwrap_or(&empty),
        true,
    );
}
