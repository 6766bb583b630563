//! The images `scripts/build-images.sh` writes without a container engine keep the
//! Dockerfile's contract: for the `operator`, `worker` and `go-worker` stages, the binary's
//! path, the entrypoint, the cmd, the user and the exposed ports are those of the image's
//! config; and each image has no shell, the CA certificates, distroless's `nonroot` user and group, and
//! every shared library its glibc-linked binary needs (the loader at its interpreter path
//! included). For the `python-worker` stage, the entrypoint (the interpreter, `-m` and the
//! package), the user, the environment and the copies: the package `swarm_worker` as it is in
//! the repository, where `PYTHONPATH` finds it, and a site directory holding every distribution
//! `examples/python-worker/requirements.txt` pins, at its pinned version.
//!
//! The archives are read from the directory `SWARM_IMAGE_ARCHIVES` names (`scripts/test.sh`
//! builds them before the tests); without it, the test builds them itself with
//! `scripts/build-images.sh --profile dev` into the target directory's `tmp/images` (after a
//! `cargo test --workspace` build that compiles only the example's plain binary; it needs Go
//! for umoci the first time).
//!
//! `toolchain` holds the Dockerfile's builds to the tested images' kind of binary: bases pinned
//! by digest, glibc on Debian with the tests' Rust, build-images.sh's `cargo build` and
//! go-worker.sh's `go build`.

mod toolchain;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::{cargo_env, versions};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// What the Dockerfile says of one image: its stage's instructions.
#[derive(Debug, Default)]
struct Stage {
    /// The destinations of the stage's COPY instructions, in order.
    copies: Vec<String>,
    /// The `NAME=value` pairs of its ENV instructions.
    env: Vec<String>,
    user: Option<String>,
    /// `port/protocol`, `/tcp` when the Dockerfile gives none.
    exposed: BTreeSet<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    /// Its LABEL pairs, values unquoted (`${ARG}` left as written).
    labels: BTreeMap<String, String>,
}

/// Parses the stage named `name` (`FROM ... AS <name>`) of the Dockerfile.
fn dockerfile_stage(name: &str) -> Stage {
    let instructions = dockerfile_instructions();
    let mut stage = Stage::default();
    let mut current: Option<&str> = None;
    for instruction in &instructions {
        let (keyword, args) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((instruction, ""));
        let args = args.trim();
        if keyword.eq_ignore_ascii_case("FROM") {
            current = stage_name(args);
            continue;
        }
        if current == Some(name) {
            stage.read(name, keyword, args);
        }
    }
    assert!(
        instructions.iter().any(|i| {
            let words: Vec<&str> = i.split_whitespace().collect();
            words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
                && words.last() == Some(&name)
        }),
        "the Dockerfile has no stage {name}"
    );
    stage
}

/// The Dockerfile's instructions, with continuation lines joined and comments dropped.
fn dockerfile_instructions() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(REPO).join("Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    instructions
}

/// The stage a `FROM` instruction's arguments name (`<image> AS <name>`), if any.
fn stage_name(args: &str) -> Option<&str> {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        [_, as_, stage_name] if as_.eq_ignore_ascii_case("AS") => Some(stage_name),
        _ => None,
    }
}

impl Stage {
    /// Takes in one instruction, `keyword` with `args`, of the stage `name`.
    fn read(&mut self, name: &str, keyword: &str, args: &str) {
        let exec_form = |what: &str| -> Vec<String> {
            serde_json::from_str(args).unwrap_or_else(|e| {
                panic!("the {name} stage's {what} is not in exec form (a JSON array): {args} ({e})")
            })
        };
        match keyword.to_ascii_uppercase().as_str() {
            "COPY" => self
                .copies
                .push(args.split_whitespace().last().unwrap().to_owned()),
            "ENV" => self.env.extend(args.split_whitespace().map(|pair| {
                assert!(
                    pair.contains('=') && !pair.contains(['"', '\'']),
                    "the {name} stage's ENV is not in the unquoted NAME=value form: {args}"
                );
                pair.to_owned()
            })),
            "USER" => self.user = Some(args.to_owned()),
            "EXPOSE" => self.exposed.extend(args.split_whitespace().map(|port| {
                if port.contains('/') {
                    port.to_owned()
                } else {
                    format!("{port}/tcp")
                }
            })),
            "ENTRYPOINT" => self.entrypoint = Some(exec_form("ENTRYPOINT")),
            // The build arguments the labels read; their values are checked through the labels.
            "ARG" => {}
            "LABEL" => self.labels.extend(labels(name, args)),
            "CMD" => self.cmd = Some(exec_form("CMD")),
            other => panic!(
                "the Dockerfile's {name} stage has a {other} instruction that this test does \
                 not compare with scripts/build-images.sh: teach both about it"
            ),
        }
    }

    /// The destination of a binary stage's one COPY: where the binary goes.
    fn binary(&self, name: &str) -> &str {
        let [binary] = self.copies.as_slice() else {
            panic!(
                "the Dockerfile's {name} stage copies {:?}, not one binary",
                self.copies
            );
        };
        binary
    }
}

/// The directory of `swarm-operator.tar`, `swarm-worker.tar`, `swarm-python-worker.tar` and
/// `swarm-go-worker.tar`:
/// `SWARM_IMAGE_ARCHIVES`, else built once for all the tests of this module.
pub(crate) fn archives() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("SWARM_IMAGE_ARCHIVES") {
            return Ok(dir.into());
        }
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("images");
        eprintln!(
            "images: SWARM_IMAGE_ARCHIVES is unset: building the images with \
             scripts/build-images.sh --profile dev --out {}",
            out.display()
        );
        let mut script = Command::new(Path::new(REPO).join("scripts/build-images.sh"));
        script.args(["--profile", "dev", "--out"]).arg(&out);
        cargo_env::without_test_env(&mut script);
        let status = script
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run scripts/build-images.sh: {e}"))?;
        if status.success() {
            Ok(out)
        } else {
            Err(format!(
                "scripts/build-images.sh --profile dev failed ({status}; its output is above). \
                 It needs Go the first time (for umoci); or build the images another way and \
                 set SWARM_IMAGE_ARCHIVES to the directory of swarm-operator.tar, \
                 swarm-worker.tar, swarm-python-worker.tar and swarm-go-worker.tar"
            ))
        }
    });
    match dir {
        Ok(dir) => dir,
        Err(message) => panic!("{message}"),
    }
}

pub(crate) fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One image archive unpacked: its config and its layers applied in a root filesystem.
pub(crate) struct Image {
    _dir: tempfile::TempDir,
    config: Value,
    /// The manifest's annotations.
    annotations: Value,
    rootfs: PathBuf,
}

pub(crate) fn unpack(name: &str) -> Image {
    let archive = archives().join(format!("{name}.tar"));
    assert!(archive.is_file(), "no {}", archive.display());
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(&layout).unwrap();
    std::fs::create_dir_all(&rootfs).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let blob = |digest: &Value| {
        let (algorithm, hex) = digest.as_str().unwrap().split_once(':').unwrap();
        layout.join("blobs").join(algorithm).join(hex)
    };

    let index = read_json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "one image per archive: {index}");
    assert!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"].is_string(),
        "the index names the image by its tag, as `ctr images import --base-name` reads it"
    );
    let manifest = read_json(&blob(&manifests[0]["digest"]));
    let config = read_json(&blob(&manifest["config"]["digest"]));
    assert_eq!(config["os"], "linux");
    for layer in manifest["layers"].as_array().unwrap() {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let listing = run(Command::new("tar").arg("-tzf").arg(blob(&layer["digest"])));
        assert!(
            !listing.contains(".wh."),
            "no whiteouts expected in a {name} layer"
        );
        run(Command::new("tar")
            .arg("-xzf")
            .arg(blob(&layer["digest"]))
            .arg("-C")
            .arg(&rootfs));
    }
    Image {
        _dir: dir,
        config,
        annotations: manifest["annotations"].clone(),
        rootfs,
    }
}

impl Image {
    pub(crate) fn path(&self, absolute: &str) -> PathBuf {
        self.rootfs.join(absolute.trim_start_matches('/'))
    }

    fn read(&self, absolute: &str) -> String {
        std::fs::read_to_string(self.path(absolute))
            .unwrap_or_else(|e| panic!("{absolute} in the image: {e}"))
    }

    /// Every file and link in the image, as absolute paths.
    pub(crate) fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    walk(&path, root, found);
                } else {
                    found.push(format!("/{}", path.strip_prefix(root).unwrap().display()));
                }
            }
        }
        let mut found = Vec::new();
        walk(&self.rootfs, &self.rootfs, &mut found);
        found
    }
}

/// The image's config says what the Dockerfile's stage `want` says: entrypoint, cmd, user
/// 65532:65532, exposed ports, and each of its ENV pairs.
fn check_config(name: &str, want: &Stage, image: &Image) {
    let config = &image.config["config"];
    let strings = |value: &Value| -> Option<Vec<String>> {
        value
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
    };
    assert_eq!(
        strings(&config["Entrypoint"]),
        want.entrypoint,
        "{name}: entrypoint"
    );
    assert_eq!(strings(&config["Cmd"]), want.cmd, "{name}: cmd");
    assert_eq!(
        config["User"].as_str(),
        want.user.as_deref(),
        "{name}: user"
    );
    assert_eq!(want.user.as_deref(), Some("65532:65532"), "{name}: user");
    let exposed: BTreeSet<String> = config["ExposedPorts"]
        .as_object()
        .map(|ports| ports.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(exposed, want.exposed, "{name}: exposed ports");
    let env = strings(&config["Env"]).unwrap_or_default();
    for pair in &want.env {
        assert!(
            env.contains(pair),
            "{name}: {pair} is not in the image's env {env:?}"
        );
    }
}

/// A LABEL instruction's `key="value"` pairs (the Dockerfile quotes every value).
fn labels(stage: &str, args: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = args.trim();
    while !rest.is_empty() {
        let (key, value) = rest.split_once("=\"").unwrap_or_else(|| {
            panic!("the {stage} stage's LABEL is not key=\"value\" pairs: {args}")
        });
        let (value, after) = value
            .split_once('"')
            .unwrap_or_else(|| panic!("the {stage} stage's LABEL has an unclosed quote: {args}"));
        pairs.push((key.trim().to_owned(), value.to_owned()));
        rest = after.trim();
    }
    pairs
}

/// What the image says it is: the manifest's OCI annotations and the config's labels are both
/// the Dockerfile's LABELs, their build arguments the workspace's version, the commit built
/// (40 hex digits) and an RFC 3339 time; the source and licence are Cargo.toml's.
fn check_labels(name: &str, want: &Stage, image: &Image) {
    let root = versions::toml("Cargo.toml");
    let workspace = |key: &str| {
        versions::string(&root, &format!("workspace.package.{key}"))
            .unwrap_or_else(|| panic!("Cargo.toml [workspace.package] {key}"))
    };
    let keys: BTreeSet<&str> = want.labels.keys().map(String::as_str).collect();
    let oci = |what: &str| format!("org.opencontainers.image.{what}");
    let expected: BTreeSet<String> = ["source", "revision", "version", "licenses", "created"]
        .iter()
        .map(|what| oci(what))
        .collect();
    assert_eq!(
        keys,
        expected.iter().map(String::as_str).collect(),
        "{name}: the Dockerfile's labels"
    );
    for (found, what) in [
        (&image.annotations, "manifest annotation"),
        (&image.config["config"]["Labels"], "config label"),
    ] {
        let value = |key: &str| {
            found[key]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no {what} {key}: {found}"))
                .to_owned()
        };
        for (key, written) in &want.labels {
            let actual = value(key);
            match written.as_str() {
                "${VERSION}" => assert_eq!(actual, workspace("version"), "{name}: {what} {key}"),
                "${REVISION}" => assert!(
                    actual.len() == 40 && actual.chars().all(|c| c.is_ascii_hexdigit()),
                    "{name}: {what} {key} is a commit: {actual}"
                ),
                "${CREATED}" => assert!(
                    actual.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
                    "{name}: {what} {key} is an RFC 3339 time: {actual}"
                ),
                literal => assert_eq!(actual, literal, "{name}: {what} {key}"),
            }
        }
        assert_eq!(
            value(&oci("source")),
            workspace("repository"),
            "{name}: {what} source"
        );
        assert_eq!(
            value(&oci("licenses")),
            workspace("license"),
            "{name}: {what} licenses"
        );
    }
}

/// `absolute` is in the image and executable by all.
fn check_executable(name: &str, image: &Image, absolute: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(image.path(absolute))
        .unwrap_or_else(|e| panic!("{name}: {absolute} in the image: {e}"))
        .permissions();
    assert!(
        mode.mode() & 0o111 == 0o111,
        "{name}: {absolute} is executable by all"
    );
}

/// No shell, CA certificates, and distroless's nonroot user and group.
fn check_base(name: &str, image: &Image) {
    // No shell, as in distroless.
    let files = image.files();
    let shells: Vec<&String> = files
        .iter()
        .filter(|f| {
            let base = f.rsplit('/').next().unwrap();
            ["sh", "bash", "dash", "ash", "busybox"].contains(&base)
        })
        .collect();
    assert!(
        shells.is_empty(),
        "{name}: a shell in the image: {shells:?}"
    );

    // CA certificates, and distroless's nonroot user and group.
    assert!(
        image
            .read("/etc/ssl/certs/ca-certificates.crt")
            .contains("-----BEGIN CERTIFICATE-----"),
        "{name}: the CA bundle"
    );
    assert!(
        image
            .read("/etc/passwd")
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{name}: /etc/passwd has nonroot 65532"
    );
    assert!(
        image
            .read("/etc/group")
            .lines()
            .any(|l| l == "nonroot:x:65532:"),
        "{name}: /etc/group has nonroot 65532"
    );
}

/// Every library the image's `binary` needs (as `ldd` finds them on this machine), and its
/// loader, at the path the loader looks for it.
fn check_libraries(name: &str, image: &Image, binary: &str) {
    let ldd = Command::new("ldd")
        .arg(image.path(binary))
        .output()
        .unwrap();
    // glibc's ldd says "not a dynamic executable" of a static binary on stderr.
    let ldd = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    if !ldd.contains("not a dynamic executable") && !ldd.contains("statically linked") {
        assert!(!ldd.contains("not found"), "{name}: ldd: {ldd}");
        let needed: Vec<&str> = ldd
            .lines()
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    [_, "=>", path, ..] if path.starts_with('/') => Some(*path),
                    [path, ..] if path.starts_with('/') => Some(*path),
                    _ => None,
                }
            })
            .collect();
        assert!(
            needed.iter().any(|p| p.contains("libc.so")),
            "{name}: ldd lists libc: {ldd}"
        );
        for path in needed {
            assert!(
                image.path(path).is_file(),
                "{name}: {path}, which {binary} needs, is not in the image (ldd: {ldd})"
            );
        }
    }
}

/// The image `name` is what the Dockerfile's `stage` makes, and runs on its own.
fn check_image(name: &str, stage: &str) {
    let want = dockerfile_stage(stage);
    let image = unpack(name);
    check_config(name, &want, &image);
    check_labels(name, &want, &image);
    let binary = want.binary(stage);
    assert_eq!(
        want.entrypoint
            .as_ref()
            .and_then(|e| e.first())
            .map(String::as_str),
        Some(binary),
        "{name}: the Dockerfile's entrypoint runs the binary it copies"
    );
    // The binary is where the Dockerfile puts it.
    check_executable(name, &image, binary);
    check_base(name, &image);
    check_libraries(name, &image, binary);
}

#[test]
fn the_operator_image_keeps_the_dockerfiles_contract() {
    check_image("swarm-operator", "operator");
}

#[test]
fn the_worker_image_keeps_the_dockerfiles_contract() {
    check_image("swarm-worker", "worker");
}

/// The Go worker's image holds its binary alone: built with `CGO_ENABLED=0`, it needs no
/// library, as distroless/static (the Dockerfile's base) has none.
#[test]
fn the_go_worker_image_keeps_the_dockerfiles_contract() {
    check_image("swarm-go-worker", "go-worker");
    let image = unpack("swarm-go-worker");
    let binary = image.path("/usr/local/bin/swarm-go-worker");
    let headers = run(Command::new("readelf")
        .args(["--program-headers", "--dynamic", "--wide"])
        .arg(&binary));
    assert!(
        !headers.contains("INTERP") && !headers.contains("(NEEDED)"),
        "swarm-go-worker is linked statically, without a loader or a library: {headers}"
    );
}

/// The files under `root`, as paths relative to it, without Python's byte code (the image's is
/// compiled at build time, a checkout's left by its test runs).
fn python_sources(root: &Path) -> BTreeSet<PathBuf> {
    fn walk(dir: &Path, root: &Path, found: &mut BTreeSet<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("__pycache__") {
                    walk(&path, root, found);
                }
            } else {
                found.insert(path.strip_prefix(root).unwrap().to_owned());
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(root, root, &mut found);
    found
}

/// The package `module` the entrypoint runs: one of the stage's copies, into the directory its
/// `PYTHONPATH` names, with the files of the repository's `examples/python-worker/<module>`.
/// Returns the copy's destination.
fn check_python_package<'a>(
    name: &str,
    stage: &str,
    want: &'a Stage,
    image: &Image,
    module: &str,
) -> &'a str {
    let package = want
        .copies
        .iter()
        .find(|c| Path::new(c).file_name() == Some(module.as_ref()))
        .unwrap_or_else(|| {
            panic!(
                "{stage}: the entrypoint's package {module} is not one the stage copies: {:?}",
                want.copies
            )
        });
    let parent = Path::new(package).parent().unwrap().display();
    assert!(
        want.env.contains(&format!("PYTHONPATH={parent}")),
        "{stage}: PYTHONPATH is not {parent}, where {package} is: {:?}",
        want.env
    );
    let source = Path::new(REPO).join("examples/python-worker").join(module);
    let files = python_sources(&source);
    assert!(
        files.iter().any(|f| f.ends_with("__main__.py")),
        "{}: no __main__.py for -m",
        source.display()
    );
    assert_eq!(
        python_sources(&image.path(package)),
        files,
        "{name}: the files of {package} are those of {}",
        source.display()
    );
    for file in &files {
        assert!(
            std::fs::read(image.path(package).join(file)).unwrap()
                == std::fs::read(source.join(file)).unwrap(),
            "{name}: {package}/{} is not {}",
            file.display(),
            source.join(file).display()
        );
    }
    package
}

/// The Python worker's image: the interpreter the Dockerfile's base image has runs the package
/// it copies (`-m`), beside a site directory with the pinned distributions.
#[test]
fn the_python_worker_image_keeps_the_dockerfiles_contract() {
    let (name, stage) = ("swarm-python-worker", "python-worker");
    let want = dockerfile_stage(stage);
    let image = unpack(name);
    check_config(name, &want, &image);
    check_labels(name, &want, &image);
    let Some([interpreter, flag, module]) = want.entrypoint.as_deref() else {
        panic!("{stage}: the entrypoint is not [interpreter, -m, package]: {want:?}");
    };
    assert_eq!(
        flag, "-m",
        "{stage}: the entrypoint runs a package: {want:?}"
    );
    check_executable(name, &image, interpreter);
    check_base(name, &image);
    check_libraries(name, &image, interpreter);

    // The package, as it is in the repository.
    let package = check_python_package(name, stage, &want, &image, module);

    // The other copy: the site directory, with each pinned distribution at its version.
    let [site] = want
        .copies
        .iter()
        .filter(|c| *c != package)
        .collect::<Vec<_>>()[..]
    else {
        panic!(
            "{stage}: copies {:?}, not the package and one site directory",
            want.copies
        );
    };
    let normalize = |name: &str| name.to_ascii_lowercase().replace(['-', '.'], "_");
    let installed: BTreeSet<String> = std::fs::read_dir(image.path(site))
        .unwrap_or_else(|e| panic!("{name}: {site} in the image: {e}"))
        .filter_map(|entry| {
            let file_name = entry.unwrap().file_name().into_string().unwrap();
            let (distribution, version) = file_name.strip_suffix(".dist-info")?.split_once('-')?;
            Some(format!("{}=={version}", normalize(distribution)))
        })
        .collect();
    let requirements =
        std::fs::read_to_string(Path::new(REPO).join("examples/python-worker/requirements.txt"))
            .unwrap();
    let pinned: BTreeSet<String> = requirements
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (distribution, version) = line
                .split_once("==")
                .unwrap_or_else(|| panic!("requirements.txt: {line} is not NAME==VERSION"));
            format!("{}=={version}", normalize(distribution))
        })
        .collect();
    assert!(!pinned.is_empty());
    assert_eq!(
        installed, pinned,
        "{name}: the distributions in {site} are the pinned ones"
    );
}

#[test]
fn the_dockerfile_parser_reads_the_operator_stage() {
    let operator = dockerfile_stage("operator");
    assert_eq!(operator.binary("operator"), "/usr/local/bin/swarm-operator");
    assert_eq!(
        operator.exposed,
        BTreeSet::from(["8080/tcp".to_owned(), "8443/tcp".to_owned()])
    );
    assert_eq!(operator.cmd, Some(vec!["run".to_owned()]));
}

#[test]
fn the_dockerfile_parser_reads_the_python_worker_stage() {
    let stage = dockerfile_stage("python-worker");
    assert_eq!(
        stage.copies,
        ["/usr/lib/python3/dist-packages", "/app/swarm_worker"]
    );
    assert_eq!(
        stage.env,
        [
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
            "PYTHONPATH=/app"
        ]
    );
    assert_eq!(
        stage.entrypoint,
        Some(
            ["/usr/bin/python3.11", "-m", "swarm_worker"]
                .map(String::from)
                .to_vec()
        )
    );
    assert!(stage.exposed.is_empty() && stage.cmd.is_none());
}
