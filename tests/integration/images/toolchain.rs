//! The Dockerfile builds the kind of binary the tested images hold, on pinned bases: every
//! `FROM` names its image by digest; the Rust binaries are built on Debian bookworm with the
//! tests' Rust minor version, by `scripts/build-images.sh`'s release `cargo build` (no
//! RUSTFLAGS or profile override, `.cargo/config.toml`'s allocator settings in the build
//! context), and run on `distroless/cc` of the Debian release the tested images hold (their
//! `/etc/os-release`; their binaries ask for glibc's loader); the Go worker is built with
//! `scripts/go-worker.sh`'s settings, by worker-go/go.mod's Go, onto `distroless/static`.
//! There is no container engine here: the Dockerfile's text is compared with the scripts, the
//! toolchains and the archives the other tests of `images` read.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::{REPO, dockerfile_instructions, run, unpack};

/// One stage of the Dockerfile: its base image, its name and its instructions.
struct Stage {
    base: String,
    name: Option<String>,
    instructions: Vec<String>,
}

fn stages() -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    for instruction in dockerfile_instructions() {
        let (keyword, args) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((instruction.as_str(), ""));
        if keyword.eq_ignore_ascii_case("FROM") {
            // `FROM [--platform=...] <image> [AS <name>]`
            let words: Vec<&str> = args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("AS") => Some((*name).to_owned()),
                _ => None,
            };
            stages.push(Stage {
                base: words.first().map_or_else(String::new, |w| (*w).to_owned()),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push(instruction.clone());
        }
    }
    stages
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An image reference `name[:tag][@digest]`.
struct ImageRef<'a> {
    name: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

fn image_ref(reference: &str) -> ImageRef<'_> {
    let (named, digest) = match reference.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (reference, None),
    };
    // A tag follows the last ':' after the last '/' (a registry's port comes before a '/').
    let last_slash = named.rfind('/').map_or(0, |i| i + 1);
    match named[last_slash..].rfind(':') {
        Some(i) => ImageRef {
            name: &named[..last_slash + i],
            tag: Some(&named[last_slash + i + 1..]),
            digest,
        },
        None => ImageRef {
            name: named,
            tag: None,
            digest,
        },
    }
}

/// `name` without a Docker Hub prefix: `docker.io/library/rust` is `rust`.
fn hub_name(name: &str) -> &str {
    name.trim_start_matches("docker.io/")
        .trim_start_matches("library/")
}

/// Shell words: whitespace separates them, quotes group them (no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A command's options as sorted `flag` or `flag value` strings (`--flag=value` and
/// `--flag value` alike; `-p` is `--package`), and its other words (packages, paths).
fn options(words: &[String], takes_value: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut flags = Vec::new();
    let mut operands = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if !word.starts_with('-') {
            operands.push(word.clone());
            continue;
        }
        let (flag, value) = match word.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None if takes_value.contains(&word.as_str()) => (word.clone(), words.next().cloned()),
            None => (word.clone(), None),
        };
        let flag = if flag == "-p" {
            "--package".to_owned()
        } else {
            flag
        };
        flags.push(value.map_or(flag.clone(), |value| format!("{flag} {value}")));
    }
    flags.sort();
    (flags, operands)
}

/// The `&&`-separated commands of a RUN instruction, without its `--mount=...` options.
fn run_commands(instruction: &str) -> Vec<String> {
    let command = instruction
        .strip_prefix("RUN")
        .unwrap_or(instruction)
        .split_whitespace()
        .skip_while(|w| w.starts_with("--"))
        .collect::<Vec<_>>()
        .join(" ");
    command.split("&&").map(|c| c.trim().to_owned()).collect()
}

/// The stage whose RUN instructions run a command starting `program` (after `NAME=value`
/// settings), and that command.
fn stage_running<'a>(stages: &'a [Stage], program: &str) -> (&'a Stage, String) {
    let found: Vec<(&Stage, String)> = stages
        .iter()
        .flat_map(|stage| {
            stage
                .instructions
                .iter()
                .filter(|i| i.starts_with("RUN"))
                .flat_map(|i| run_commands(i))
                .filter(|command| {
                    let words = shell_words(command);
                    let first = words.iter().position(|w| !w.contains('=')).unwrap_or(0);
                    words[first..].join(" ").starts_with(program)
                })
                .map(move |command| (stage, command))
        })
        .collect();
    let [(stage, command)] = found.as_slice() else {
        panic!(
            "the Dockerfile runs `{program}` {} times, not once: {:?}",
            found.len(),
            found.iter().map(|(_, c)| c).collect::<Vec<_>>()
        );
    };
    (stage, command.clone())
}

/// The stages that copy from the stage `name`: where its binaries run.
fn stages_copying_from<'a>(stages: &'a [Stage], name: &str) -> Vec<&'a Stage> {
    let from = format!("--from={name}");
    stages
        .iter()
        .filter(|s| {
            s.instructions
                .iter()
                .any(|i| i.starts_with("COPY") && i.split_whitespace().any(|w| w == from))
        })
        .collect()
}

#[test]
fn every_base_image_is_pinned_by_digest() {
    let stages = stages();
    assert!(!stages.is_empty(), "the Dockerfile has no FROM");
    let names: Vec<&str> = stages.iter().filter_map(|s| s.name.as_deref()).collect();
    for stage in &stages {
        // `FROM <an earlier stage>` names no image.
        if names.contains(&stage.base.as_str()) {
            continue;
        }
        let image = image_ref(&stage.base);
        let hex = image.digest.and_then(|d| d.strip_prefix("sha256:"));
        assert!(
            hex.is_some_and(|h| h.len() == 64
                && h.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))),
            "the Dockerfile's FROM {} (stage {:?}) is not pinned by digest: write \
             <image>:<tag>@sha256:<64 hex digits>, the tag's multi-arch index digest \
             (`crane digest <image>:<tag>`)",
            stage.base,
            stage.name
        );
        assert!(
            image.tag.is_some(),
            "the Dockerfile's FROM {} (stage {:?}) has a digest but no tag: keep the tag \
             (<image>:<tag>@sha256:...) so that readers and the version checks see it",
            stage.base,
            stage.name
        );
    }
}

/// `KEY=value` lines of an os-release file, values unquoted.
fn os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

/// The program interpreter (PT_INTERP) `readelf` reads in `binary`'s program headers.
fn interpreter(binary: &Path) -> Option<String> {
    let headers = run(Command::new("readelf")
        .args(["--program-headers", "--wide"])
        .arg(binary));
    let (_, rest) = headers.split_once("[Requesting program interpreter: ")?;
    Some(rest.split(']').next()?.to_owned())
}

/// The Debian release of the tested Rust images (their `/etc/os-release`, written by
/// `scripts/build-images.sh` from this machine's) and the loader their binaries ask for:
/// glibc's. Returns `VERSION_ID` and `VERSION_CODENAME`.
fn tested_rust_images_debian() -> (String, String) {
    let mut releases = Vec::new();
    for (name, binary) in [
        ("swarm-operator", "/usr/local/bin/swarm-operator"),
        ("swarm-worker", "/usr/local/bin/swarm-worker"),
    ] {
        let image = unpack(name);
        let release = os_release(&image.read("/etc/os-release"));
        assert_eq!(
            release.get("ID").map(String::as_str),
            Some("debian"),
            "{name}: the tested image's /etc/os-release is not Debian's: {release:?}; the \
             Dockerfile builds and runs the Rust binaries on Debian (rust:<version>-<codename>, \
             distroless/cc-debian<N>) because scripts/build-images.sh copies in a Debian \
             machine's glibc: if the tested images moved off Debian, move the Dockerfile's \
             Rust stages with them and update this test"
        );
        let interp = interpreter(&image.path(binary));
        assert!(
            interp.as_deref().is_some_and(|i| {
                let file = i.rsplit('/').next().unwrap_or_default();
                file.starts_with("ld-linux") && file.contains(".so.")
            }),
            "{name}: the tested {binary} asks for the loader {interp:?}, not glibc's \
             (ld-linux*.so.*): the Dockerfile's Rust stages build glibc binaries for \
             distroless/cc as scripts/build-images.sh does; if the tested images changed \
             their libc, change the Dockerfile's builder and runtime bases with them"
        );
        releases.push((
            release["VERSION_ID"].clone(),
            release["VERSION_CODENAME"].clone(),
        ));
    }
    releases.dedup();
    let [release] = releases.as_slice() else {
        panic!("the tested Rust images hold different Debian releases: {releases:?}");
    };
    release.clone()
}

/// `major.minor` of a version `major.minor[.patch]`.
fn minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// The Rust builder's tag: `<major.minor[.patch]>-[slim-]<codename>`; returns the version and
/// the codename.
fn rust_builder_tag(stage: &Stage) -> (String, String) {
    let image = image_ref(&stage.base);
    assert_eq!(
        hub_name(image.name),
        "rust",
        "the Dockerfile's Rust build stage {:?} builds on {}, not the official rust image: \
         build on rust:<version>-bookworm as the tested images are built",
        stage.name,
        stage.base
    );
    let tag = image.tag.unwrap_or_default();
    let (version, variant) = tag.split_once('-').unwrap_or((tag, ""));
    let codename = variant.trim_start_matches("slim-");
    assert!(
        !tag.contains("alpine") && !stage.instructions.iter().any(|i| i.contains("musl")),
        "the Dockerfile's Rust build stage builds for musl ({}): the tested images hold \
         glibc binaries; build on rust:<version>-bookworm and run on distroless/cc",
        stage.base
    );
    assert!(
        version.split('.').count() >= 2 && version.split('.').all(|p| p.parse::<u32>().is_ok()),
        "the Rust builder's tag {tag} does not start with a version: name one, \
         rust:<major.minor>-bookworm"
    );
    (version.to_owned(), codename.to_owned())
}

/// The Rust binaries are built on the tested images' Debian release with the tests' Rust minor
/// version, and run on `distroless/cc` of that release.
#[test]
fn the_rust_binaries_build_and_run_on_the_tested_images_debian() {
    let stages = stages();
    let (build, _) = stage_running(&stages, "cargo build");
    let (version, codename) = rust_builder_tag(build);
    let rustc = run(Command::new("rustc").arg("--version"));
    let tests_version = rustc.split_whitespace().nth(1).unwrap_or_default();
    assert_eq!(
        minor(&version),
        minor(tests_version),
        "the Dockerfile's Rust builder {} is not the Rust the tests build with ({}): set its \
         tag to rust:{}-{codename} and pin the digest of that tag",
        build.base,
        rustc.trim(),
        minor(tests_version)
    );

    let (debian, tested_codename) = tested_rust_images_debian();
    assert_eq!(
        codename, tested_codename,
        "the Dockerfile's Rust builder {} is not Debian {tested_codename}, the release (and \
         glibc) of the tested images: use rust:{}-{tested_codename}",
        build.base, version
    );
    let name = build
        .name
        .as_deref()
        .expect("the Rust build stage is named");
    let runtimes = stages_copying_from(&stages, name);
    assert!(
        !runtimes.is_empty(),
        "no stage copies the binaries of the Rust build stage {name}"
    );
    let want = format!("gcr.io/distroless/cc-debian{debian}");
    for runtime in runtimes {
        assert_eq!(
            image_ref(&runtime.base).name,
            want,
            "the Dockerfile's stage {:?} runs the glibc binaries of {name} on {}: run them on \
             {want} (glibc and libgcc_s of the tested images' Debian {debian}), :nonroot, \
             pinned by digest",
            runtime.name,
            runtime.base
        );
    }
}

/// The `cargo build` of `scripts/build-images.sh`'s release profile, the images the tests read
/// and the release publishes.
fn build_images_release_build() -> String {
    let script = read("scripts/build-images.sh");
    let builds: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|line| {
            // `cargo build ...`, after any `NAME=value` settings.
            let words = shell_words(line);
            let first = words.iter().position(|w| !w.contains('=')).unwrap_or(0);
            words[first..].join(" ").starts_with("cargo build") && line.contains("--release")
        })
        .collect();
    let [build] = builds.as_slice() else {
        panic!(
            "scripts/build-images.sh has {} `cargo build --release` lines, not one: {builds:?}",
            builds.len()
        );
    };
    (*build).to_owned()
}

const CARGO_VALUE_FLAGS: &[&str] = &[
    "-p",
    "--package",
    "--bin",
    "--example",
    "--test",
    "--bench",
    "--features",
    "-F",
    "--target",
    "--profile",
    "--config",
    "-Z",
    "-j",
    "--jobs",
    "--manifest-path",
    "--target-dir",
];

#[test]
fn the_dockerfiles_cargo_build_is_the_tested_images_release_build() {
    let stages = stages();
    let (_, docker) = stage_running(&stages, "cargo build");
    let script = build_images_release_build();
    // The `NAME=value` settings before `cargo build`, and its options.
    let parse = |command: &str| {
        let words = shell_words(command);
        let at = words
            .iter()
            .position(|w| w == "cargo")
            .expect("cargo build");
        (
            words[..at].to_vec(),
            options(&words[at + 2..], CARGO_VALUE_FLAGS),
        )
    };
    assert_eq!(
        parse(&docker),
        parse(&script),
        "the Dockerfile's build stage runs `{docker}` but scripts/build-images.sh's release \
         build runs `{script}`: give both the same settings, flags, packages, bin and \
         example (the tested and released images are build-images.sh's)"
    );
    assert!(
        docker.contains("--release") && docker.contains("--locked"),
        "the Dockerfile's `{docker}` is not a --release --locked build"
    );
}

/// What would build other code than `cargo build --release` with Cargo.toml's profile.
const RUST_OVERRIDES: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_PROFILE_",
    "RUSTC_WRAPPER",
];

#[test]
fn neither_build_overrides_the_rust_flags_or_profile() {
    let dockerfile = dockerfile_instructions().join("\n");
    let script: String = read("scripts/build-images.sh")
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for (file, text) in [
        ("the Dockerfile", &dockerfile),
        ("scripts/build-images.sh", &script),
    ] {
        for setting in RUST_OVERRIDES {
            assert!(
                !text.contains(setting),
                "{file} sets {setting}: the Dockerfile and scripts/build-images.sh build with \
                 Cargo.toml's release profile and .cargo/config.toml alone, so that the image \
                 built with Docker holds the binary the tests ran; put a change in those files \
                 (both builds read them), not in one build"
            );
        }
    }
}

/// Whether the glob `pattern` (`*` and `?` within a path segment, `**` any segments) matches
/// `path`, as a .dockerignore line does.
fn glob_matches(pattern: &[&str], path: &[&str]) -> bool {
    fn segment(pattern: &[u8], name: &[u8]) -> bool {
        match (pattern.first(), name.first()) {
            (None, None) => true,
            (Some(b'*'), _) => {
                segment(&pattern[1..], name) || (!name.is_empty() && segment(pattern, &name[1..]))
            }
            (Some(b'?'), Some(_)) => segment(&pattern[1..], &name[1..]),
            (Some(p), Some(n)) if p == n => segment(&pattern[1..], &name[1..]),
            _ => false,
        }
    }
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(&"**"), _) => {
            glob_matches(&pattern[1..], path)
                || (!path.is_empty() && glob_matches(pattern, &path[1..]))
        }
        (Some(p), Some(n)) => {
            segment(p.as_bytes(), n.as_bytes()) && glob_matches(&pattern[1..], &path[1..])
        }
        _ => false,
    }
}

/// Whether .dockerignore keeps `path` out of the build context: its last line matching the
/// path or a directory above it decides (`!` lines include again).
fn docker_ignores(dockerignore: &str, path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    let mut ignored = false;
    for line in dockerignore.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (include, pattern) = match line.strip_prefix('!') {
            Some(pattern) => (true, pattern),
            None => (false, line),
        };
        let pattern: Vec<&str> = pattern
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect();
        if (1..=segments.len()).any(|n| glob_matches(&pattern, &segments[..n])) {
            ignored = !include;
        }
    }
    ignored
}

#[test]
fn the_docker_build_reads_the_allocators_configuration() {
    let config = ".cargo/config.toml";
    assert!(
        read(config).contains("JEMALLOC_SYS_WITH_MALLOC_CONF"),
        "{config} no longer sets jemalloc's configuration: update this test"
    );
    let dockerignore = read(".dockerignore");
    assert!(
        !docker_ignores(&dockerignore, config),
        ".dockerignore keeps {config} out of the build context, so the Docker build's \
         jemalloc lacks the configuration the tested binaries have: take it out of \
         .dockerignore"
    );
    let stages = stages();
    let (build, _) = stage_running(&stages, "cargo build");
    assert!(
        build.instructions.iter().any(|i| {
            let words = shell_words(i);
            words.first().map(String::as_str) == Some("COPY")
                && words.len() == 3
                && [".", "./", ".cargo", ".cargo/"].contains(&words[1].as_str())
        }),
        "the Dockerfile's Rust build stage copies no {config} (COPY . . does): without it its \
         jemalloc lacks the tested binaries' configuration"
    );
    assert!(docker_ignores("target/\n", "target/release/x"));
    assert!(docker_ignores(".*\n", ".cargo/config.toml"));
    assert!(docker_ignores("**/config.toml\n", ".cargo/config.toml"));
    assert!(!docker_ignores(".*\n!.cargo\n", ".cargo/config.toml"));
}

/// A `go build` command's settings: its `NAME=value` environment (GOFLAGS folded into the
/// flags; the cache directories left out), its sorted flags without `-o`, its packages.
#[derive(Debug, PartialEq)]
struct GoBuild {
    env: BTreeMap<String, String>,
    flags: Vec<String>,
    packages: Vec<String>,
}

const GO_VALUE_FLAGS: &[&str] = &[
    "-ldflags",
    "-gcflags",
    "-asmflags",
    "-tags",
    "-o",
    "-mod",
    "-p",
    "-buildmode",
    "-pgo",
];

fn go_build(env: &[String], args: &[String]) -> GoBuild {
    let mut settings: BTreeMap<String, String> = env
        .iter()
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    settings.remove("GOMODCACHE");
    settings.remove("GOCACHE");
    let mut words = shell_words(&settings.remove("GOFLAGS").unwrap_or_default());
    words.extend(args.iter().cloned());
    let (flags, packages) = options(&words, GO_VALUE_FLAGS);
    GoBuild {
        env: settings,
        flags: flags
            .into_iter()
            .filter(|f| !f.starts_with("-o "))
            .collect(),
        packages,
    }
}

/// `scripts/go-worker.sh build`'s `go build`, with the settings the script exports.
fn go_worker_sh_build() -> GoBuild {
    let script = read("scripts/go-worker.sh").replace("\\\n", " ");
    let exports: Vec<String> = script
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("export ") && line.contains("CGO_ENABLED"))
        .flat_map(|line| shell_words(line).into_iter().skip(1))
        .collect();
    assert!(
        !exports.is_empty(),
        "scripts/go-worker.sh exports no CGO_ENABLED: update this test's reading of it"
    );
    let builds: Vec<&str> = script
        .lines()
        .filter_map(|line| line.split_once("go build ").map(|(_, args)| args))
        .collect();
    let [args] = builds.as_slice() else {
        panic!(
            "scripts/go-worker.sh has {} `go build` lines, not one",
            builds.len()
        );
    };
    // `(cd "${module_dir}" && go build ... ./examples/swarm-worker)`
    go_build(
        &exports,
        &shell_words(args.trim_end().trim_end_matches(')')),
    )
}

#[test]
fn the_go_worker_builds_as_go_worker_sh_does_by_go_mods_go() {
    let stages = stages();
    let (stage, command) = stage_running(&stages, "go build");
    let words = shell_words(&command);
    let at = words.iter().position(|w| w == "go").expect("go build");
    let docker = go_build(&words[..at], &words[at + 2..]);
    let script = go_worker_sh_build();
    assert_eq!(
        docker.env.get("CGO_ENABLED").map(String::as_str),
        Some("0"),
        "the Dockerfile's `{command}` is not static (CGO_ENABLED=0) as the tested image's is"
    );
    assert_eq!(
        docker, script,
        "the Dockerfile's `{command}` does not build as scripts/go-worker.sh build does: give \
         it the script's exported settings (CGO_ENABLED, GOTOOLCHAIN, GOFLAGS as flags), its \
         -ldflags and its package"
    );

    let go_mod = read("worker-go/go.mod");
    let versions: Vec<String> = go_mod
        .lines()
        .filter_map(|line| match shell_words(line).as_slice() {
            [go, version] if go == "go" => Some(version.clone()),
            [toolchain, version] if toolchain == "toolchain" => {
                Some(version.trim_start_matches("go").to_owned())
            }
            _ => None,
        })
        .collect();
    assert!(!versions.is_empty(), "worker-go/go.mod has no go line");
    let image = image_ref(&stage.base);
    let tag = image.tag.unwrap_or_default();
    let version = tag.split('-').next().unwrap_or_default();
    assert_eq!(hub_name(image.name), "golang", "the Go build stage's base");
    for wanted in &versions {
        assert_eq!(
            minor(version),
            minor(wanted),
            "the Dockerfile's Go builder {} is not worker-go/go.mod's Go {wanted}: use \
             golang:{}-bookworm, pinned by digest",
            stage.base,
            minor(wanted)
        );
    }
    let name = stage.name.as_deref().expect("the Go build stage is named");
    for runtime in stages_copying_from(&stages, name) {
        assert!(
            image_ref(&runtime.base)
                .name
                .starts_with("gcr.io/distroless/static-debian"),
            "the Dockerfile's stage {:?} runs the static Go worker on {}: use \
             gcr.io/distroless/static-debian<N>:nonroot, pinned by digest",
            runtime.name,
            runtime.base
        );
    }
}
