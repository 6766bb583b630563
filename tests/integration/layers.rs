//! The operator's layers import one way (`src/lib.rs` lists them): a module may use its own
//! layer and those before it, never one after it, so each layer can be read, tested and
//! replaced with only what precedes it in mind. `runtime` sits beside `controller`, which may
//! use it; `cli` and `plugin` sit last and do not use each other. `src/lib.rs` re-exports
//! nothing, so every item has one path. No file of `src/controller/` is over 600 lines, and no
//! Rust file of the workspace over 800.

use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The layers in order, with the ones a layer of the same rank may not use.
const LAYERS: &[(&str, u8)] = &[
    ("api", 0),
    ("state", 1),
    ("planner", 2),
    ("drive", 3),
    ("runtime", 4),
    ("controller", 5),
    ("cli", 6),
    ("plugin", 6),
];

fn rank(layer: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == layer)
        .map(|&(_, rank)| rank)
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The top-level modules of the crate a line of code names: `crate::x::...` and the members
/// of `use crate::{x, y::z}`. Comments are not code.
fn crate_modules(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or_default();
    let mut modules = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            modules.extend(group.split(',').map(|member| first_segment(member.trim())));
        } else {
            modules.push(first_segment(rest));
        }
    }
    modules.retain(|module| !module.is_empty());
    modules
}

fn first_segment(path: &str) -> String {
    path.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn layers_import_one_way() {
    let mut wrong = Vec::new();
    for path in rust_files(Path::new(SRC)) {
        let relative = path.strip_prefix(SRC).unwrap();
        let layer = relative
            .iter()
            .next()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let Some(own) = rank(&layer) else { continue };
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            for used in crate_modules(line) {
                let Some(theirs) = rank(&used) else { continue };
                if used != layer && theirs >= own {
                    wrong.push(format!(
                        "src/{}:{}: {layer} uses {used}, a layer after it",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers' order (api, state, planner, drive, runtime, controller, \
         then cli and plugin); move the item down a layer or pass it in:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_library_re_exports_nothing() {
    let lib = std::fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let re_exports: Vec<&str> = lib
        .lines()
        .filter(|line| line.trim_start().starts_with("pub use"))
        .collect();
    assert!(
        re_exports.is_empty(),
        "src/lib.rs gives items a second path; import them from their module instead:\n{}",
        re_exports.join("\n")
    );
}

/// Fails naming every file of `files` over `limit` lines.
fn assert_none_over(files: impl IntoIterator<Item = PathBuf>, limit: usize) {
    let long: Vec<String> = files
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            (lines > limit).then(|| format!("{}: {lines} lines", path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these into modules that say what they hold:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_file_of_the_controller_is_over_600_lines() {
    assert_none_over(rust_files(&Path::new(SRC).join("controller")), 600);
}

/// The workspace's crates, each a directory of Rust files (the operator's is the repository's
/// root: its `src/`, `tests/` and `benches/`).
const CRATE_DIRS: &[&str] = &[
    "src", "tests", "benches", "assign", "protocol", "worker", "sim",
];

#[test]
fn no_rust_file_of_the_workspace_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = CRATE_DIRS
        .iter()
        .flat_map(|dir| rust_files(&root.join(dir)));
    assert_none_over(files, 800);
}

#[test]
fn crate_paths_are_read_from_code_only() {
    assert_eq!(crate_modules("use crate::state::lease;"), ["state"]);
    assert_eq!(
        crate_modules("use crate::{planner, drive::memory};"),
        ["planner", "drive"]
    );
    assert_eq!(
        crate_modules("let x = crate::api::crd::x(); // crate::cli"),
        ["api"]
    );
    assert!(crate_modules("//! see [`crate::drive`]").is_empty());
}
