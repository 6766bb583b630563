#!/usr/bin/env python3
"""Checks the links, cargo targets and repository paths of the documentation.

    scripts/check-links.py

Reads every markdown file git knows of (`git ls-files '*.md'`, plus new files that are not
ignored) and checks each link `[text](target)`, image `![alt](target)` and reference
definition `[label]: target` outside code blocks and inline code:

- a relative target names a file or directory of the repository (relative to the linking
  file's directory; a leading `/` means the repository's root);
- an anchor (`#anchor`, `file.md#anchor`) names a heading of that markdown file, by GitHub's
  rules (lowercase; characters other than letters, digits, spaces, hyphens and underscores
  dropped; each space a hyphen; a repeated slug gets `-1`, `-2`, ...), or an explicit
  `<a id=...>` / `<a name=...>` in it;
- `https://github.com/swarm-operator/swarm-operator/blob/main/PATH#anchor` is checked as the
  repository path PATH; other URLs (http, https, mailto, ...) are not checked.

The `runbook_url:` values of deploy/monitoring/*.yaml and deploy/monitoring/tests/*.yaml are
checked the same way.

Inline code spans and fenced code blocks of the same markdown files are checked for stale
references too:

- cargo targets: in a `cargo test|bench|run|build` command (in a span, or on a line of a fenced
  block, `\\` continuing it), each `--test`, `--bench`, `--example` and `--bin NAME` before
  `--` names a target of the packages the command selects (`-p`/`--package NAME`, which must
  be a workspace member, or `--manifest-path DIR/Cargo.toml`; `--workspace` every member;
  otherwise `workspace.default-members`, or the root package). A package's targets are its
  Cargo.toml's `[[test]]`, `[[bench]]`, `[[example]]` and `[[bin]]` entries and what cargo
  discovers (tests/, benches/, examples/ and src/bin/: `*.rs` and `*/main.rs`; src/main.rs);
  the members are the root Cargo.toml's `workspace.members`;
- repository paths, in inline code spans only: a span without spaces that holds a `/` and
  starts with a top-level directory of the repository (`src/`, `sim/`, `.ci/`, ...) names a
  file or directory, from the root or from the markdown file's directory; a `:LINE` or
  `#anchor` suffix is ignored, and a `::item` suffix after a `.rs` file
  (`tests/e2e/main.rs::name`, `src/lib.rs::tests::name`) names a `fn` of that file. Not checked: spans with `*`, `?`, `<`, `>`, `{`, `$`, `[`, `|`
  or `...`, placeholders such as `DIR` or `NAME`, and paths under `target/`.

Prints each problem as `file:line: reference (why)` and exits 1 if there is any; prints a
one-line summary and exits 0 otherwise. `--self-test` runs the code checks on a few samples
instead. Python 3.11 standard library only.
"""

import bisect
import fnmatch
import glob
import os
import re
import subprocess
import sys
import tomllib
import unicodedata
from urllib.parse import unquote

REPO_URL = "https://github.com/swarm-operator/swarm-operator/"
REPO_URL_PATH = re.compile(re.escape(REPO_URL) + r"(?:blob|tree)/main/(.*)$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
EXPLICIT_ANCHOR = re.compile(r"""<a\s[^>]*?\b(?:id|name)\s*=\s*["']?([^"'\s>]+)""", re.I)
# [text](target "title"): the text may hold one level of brackets; the target may be in <>.
INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\(\s*(<[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^<>\n]*>|\S+)", re.M)
RUNBOOK_URL = re.compile(r"^\s*runbook_url:\s*(\S+)")
RUNBOOK_GLOBS = ("deploy/monitoring", "deploy/monitoring/tests")

# The shell in code: a `\` line continuation, a comment, a line end, an operator, or a word.
SHELL_TOKEN = re.compile(
    r"(\\\n)|(#[^\n]*)|(\n)|(&&|\|\||[;&|()`])|((?:[^\s;&|()`\\]|\\.)+)"
)
CARGO_SUBCOMMANDS = {"test", "t", "bench", "run", "r", "build", "b"}
TARGET_OPTIONS = {"--test": "test", "--bench": "bench", "--example": "example", "--bin": "bin"}
PLURALS = {"test": "tests", "bench": "benches", "example": "examples", "bin": "bins"}
VALUE_OPTIONS = {"-p", "--package", "--manifest-path", *TARGET_OPTIONS}
# Where cargo discovers each kind of target, and the [package] key that turns that off.
AUTO_TARGETS = {
    "test": ("tests", "autotests"),
    "bench": ("benches", "autobenches"),
    "example": ("examples", "autoexamples"),
    "bin": ("src/bin", "autobins"),
}
# Top-level directories a path in inline code may start with (with the repository's own).
TOP_LEVEL_DIRS = {
    "src", "tests", "sim", "scripts", "docs", "deploy", "charts", "crds", "examples",
    "benches", "hack", "protocol", "assign", "worker", "worker-go", ".ci",
}  # fmt: skip
NOT_A_PATH = re.compile(r"[\s*?<>{}$\[\]|]|\.\.\.")
PLACEHOLDER = re.compile(
    r"(?<![A-Za-z0-9])(?:DIR|NAME|FILE|PATH|PKG|CRATE|TARGET|VERSION|ARCH|OS|TAG|N|X)"
    r"(?![A-Za-z0-9])"
)
LOCATION_SUFFIX = re.compile(r"(?::\d+(?:[:-]\d+)?|#[^/]*)$")
# `file.rs::module::name`: the function a span names in a Rust file (a test, usually).
RUST_ITEM = re.compile(r"^(.+?\.rs)::(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Za-z_][A-Za-z0-9_]*)$")


def git_files(root):
    """Tracked files and new ones that are not ignored, as paths relative to the root."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p))})


def closes(line, fence):
    """Whether `line` closes the code block that `fence` (its opening backticks or tildes)
    opened."""
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and stripped.strip(fence[0]) == ""


def strip_fences(text):
    """Blanks fenced code blocks (spaces, so that offsets stay); returns the text, the set of
    their line numbers (0-based, fences included) and each block's body as a range of them."""
    lines = text.split("\n")
    fenced = set()
    blocks = []
    fence = None
    for i, line in enumerate(lines):
        if fence is None:
            m = FENCE.match(line)
            if not m:
                continue
            fence, body = m.group(1), i + 1
        elif closes(line, fence):
            fence = None
            blocks.append(range(body, i))
        fenced.add(i)
        lines[i] = " " * len(line)
    if fence is not None:
        blocks.append(range(body, len(lines)))
    return "\n".join(lines), fenced, blocks


def inline_code_spans(text):
    """Yields each inline code span as (start, end, run): its opening backticks start at
    `start`, its closing ones end at `end`, `run` backticks each (a run of backticks up to the
    next run of the same length in the same paragraph)."""
    i = 0
    n = len(text)
    while i < n:
        if text[i] != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        run = j - i
        paragraph_end = re.compile(r"\n[ \t]*\n").search(text, j)
        limit = paragraph_end.start() if paragraph_end else n
        k = j
        close = -1
        while k < limit:
            if text[k] == "`":
                m = k
                while m < n and text[m] == "`":
                    m += 1
                if m - k == run:
                    close = k
                    break
                k = m
            else:
                k += 1
        if close < 0:
            i = j
            continue
        yield i, close + run, run
        i = close + run


def strip_inline_code(text):
    """Blanks inline code spans but their backticks, which become `x`, so that link text made
    of inline code still parses."""
    out = list(text)
    for start, end, _ in inline_code_spans(text):
        for p in range(start, end):
            if out[p] != "\n":
                out[p] = "x"
    return "".join(out)


def heading_text(raw):
    """A heading's text as GitHub renders it, before the slug: links become their text, inline
    code its content, HTML tags and emphasis asterisks go."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"(`+)(.+?)\1", r"\2", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("*", "")


def slug(text):
    """A heading's anchor, from its text as `heading_text` gives it."""
    kept = []
    for ch in text.strip().lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LNM":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def heading_anchors(text, fenced):
    """The anchors of a markdown file's headings (outside the fenced lines), by GitHub's rules."""
    anchors = set()
    counts = {}
    for number, line in enumerate(text.split("\n")):
        if number in fenced:
            continue
        m = ATX_HEADING.match(line)
        if not m:
            continue
        base = slug(heading_text(m.group(2) or ""))
        n = counts.get(base, 0)
        counts[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


class Page:
    """A markdown file: its anchors; its links with their line numbers; the offsets of the
    contents of its inline code spans (`spans`) and of its fenced code blocks (`blocks`)."""

    def __init__(self, path, text):
        self.path = path
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
        fence_free, fenced, blocks = strip_fences(text)
        self.blocks = [self.offsets(body) for body in blocks if body]
        self.spans = [(start + run, end - run) for start, end, run in inline_code_spans(fence_free)]
        code_free = strip_inline_code(fence_free)
        self.anchors = heading_anchors(text, fenced)
        self.anchors.update(m.group(1) for m in EXPLICIT_ANCHOR.finditer(code_free))
        self.links = []
        for m in INLINE_LINK.finditer(code_free):
            if re.search(r"\n[ \t]*\n", m.group(0)):
                continue  # a bracket in one paragraph, a parenthesis in another
            self.add_link(m.start(2), len(m.group(2)))
        for m in REFERENCE_DEFINITION.finditer(code_free):
            self.add_link(m.start(2), len(m.group(2)))

    def add_link(self, start, length):
        """Records the link target at `start` as written (the code-free copy turned inline code
        in it into x's)."""
        target = self.text[start : start + length]
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        self.links.append((self.line_of(start), target))

    def line_of(self, offset):
        """The 1-based line number of an offset of the text."""
        return bisect.bisect_right(self.line_starts, offset)

    def offsets(self, lines):
        """The (start, end) offsets of a range of 0-based line numbers."""
        end = self.line_starts[lines.stop] - 1 if lines.stop < len(self.line_starts) else None
        return self.line_starts[lines.start], len(self.text) if end is None else end


def shell_commands(text, start, end, lines_end_commands):
    """Splits text[start:end] into shell commands, each a list of (word, offset); operators
    (`&&`, `;`, `|`, ...) end a command, so does a line end when `lines_end_commands` unless a
    `\\` continues the line. Comments are dropped, quotes taken off words."""
    commands = [[]]
    for m in SHELL_TOKEN.finditer(text, start, end):
        _, _, newline, operator, word = m.groups()
        if word is not None:
            commands[-1].append((word.strip("'\""), m.start()))
        elif operator or (newline and lines_end_commands):
            commands.append([])
    return [command for command in commands if command]


def cargo_options(words):
    """The options of a `cargo test|bench|run|build` command before `--`, as (option, value,
    offset) with `--package` as `-p`, `--all` as `--workspace`; None for another command. An
    option without its value (at the end, or before another option) is left out."""
    names = [word for word, _ in words]
    start = next((i for i, w in enumerate(names) if w == "cargo" or w.endswith("/cargo")), None)
    if start is None:
        return None
    args = words[start + 1 :]
    while args and args[0][0].startswith("+"):
        args = args[1:]  # a toolchain: cargo +nightly test
    if not args or args[0][0] not in CARGO_SUBCOMMANDS:
        return None
    options = []
    i = 1
    while i < len(args) and args[i][0] != "--":
        word, offset = args[i]
        option, equals, value = word.partition("=")
        if word in ("--workspace", "--all"):
            options.append(("--workspace", "", offset))
        elif option in VALUE_OPTIONS and equals:
            options.append((option, value, offset))
        elif word in VALUE_OPTIONS and i + 1 < len(args) and not args[i + 1][0].startswith("-"):
            i += 1
            options.append((word, args[i][0], offset))
        elif word.startswith("-p") and len(word) > 2 and not word.startswith("--"):
            options.append(("-p", word[2:], offset))
        i += 1
    return [("-p" if o == "--package" else o, v, offset) for o, v, offset in options]


def is_placeholder(value):
    """Whether a name in code stands for any name: `NAME`, `<name>`, `...`, `$X`, `{a,b}`."""
    return bool(PLACEHOLDER.search(value) or re.search(r"[<>{}$]|\.\.\.", value))


def path_reference(span, top_dirs):
    """The repository path an inline code span names, without a `:LINE` or `#anchor` suffix;
    None when the span does not look like a repository path."""
    if "/" not in span or NOT_A_PATH.search(span) or SCHEME.match(span):
        return None
    if PLACEHOLDER.search(span):
        return None
    path = LOCATION_SUFFIX.sub("", span)
    top = path.split("/", 1)[0]
    if top not in top_dirs or top == "target":
        return None
    return path


def read_toml(root, path):
    """The parsed TOML file at `path` (relative to the root)."""
    with open(os.path.join(root, path), "rb") as f:
        return tomllib.load(f)


def discovered_targets(directory, name, files):
    """{kind: {path: target name}} of the targets cargo discovers in the package `name` in
    `directory` (relative to the root; "" for the root) among the repository's `files`:
    src/main.rs, and `*.rs` and `*/main.rs` in tests/, benches/, examples/ and src/bin/."""
    discovered = {kind: {} for kind in AUTO_TARGETS}
    for path in files:
        rel = os.path.relpath(path, directory or ".")
        if rel == "src/main.rs":
            discovered["bin"][path] = name
        for kind, (folder, _) in AUTO_TARGETS.items():
            if not rel.startswith(folder + "/"):
                continue
            parts = rel[len(folder) + 1 :].split("/")
            if len(parts) == 1 and parts[0].endswith(".rs"):
                discovered[kind][path] = parts[0][: -len(".rs")]
            elif len(parts) == 2 and parts[1] == "main.rs":
                discovered[kind][path] = parts[0]
    return discovered


def package_targets(directory, manifest, files):
    """{kind: target names} of the package in `directory` whose Cargo.toml is `manifest`: its
    explicit [[test]], [[bench]], [[example]] and [[bin]] entries, and the targets cargo
    discovers (unless `autotests = false`, ...) in files that no explicit entry claims."""
    package = manifest["package"]
    discovered = discovered_targets(directory, package["name"], files)
    targets = {kind: set() for kind in AUTO_TARGETS}
    for kind, (folder, auto_key) in AUTO_TARGETS.items():
        claimed = set()
        for entry in manifest.get(kind, []):
            name = entry.get("name")
            targets[kind].add(name)
            defaults = [f"{folder}/{name}.rs", f"{folder}/{name}/main.rs"]
            if kind == "bin" and name == package["name"]:
                defaults.append("src/main.rs")
            for path in [entry["path"]] if "path" in entry else defaults:
                claimed.add(os.path.normpath(os.path.join(directory, path)))
        if package.get(auto_key, True):
            targets[kind].update(n for p, n in discovered[kind].items() if p not in claimed)
    return targets


class Workspace:
    """The cargo workspace: `targets` ({package: {kind: names}}), the packages of each member
    directory (`by_dir`), and the ones a command without -p or --workspace selects
    (`default`)."""

    def __init__(self, root, files):
        manifest = read_toml(root, "Cargo.toml")
        workspace = manifest.get("workspace", {})
        self.targets = {}
        self.by_dir = {}
        self.checked = 0  # target options checked
        members = {"."} if "package" in manifest else set()
        for pattern in workspace.get("members", []):
            members.update(
                os.path.relpath(d, root) for d in glob.glob(os.path.join(root, pattern))
            )
        for member in sorted(members):
            directory = "" if member == "." else member
            cargo_toml = os.path.join(directory, "Cargo.toml")
            if os.path.isfile(os.path.join(root, cargo_toml)):
                package = read_toml(root, cargo_toml)
                name = package["package"]["name"]
                self.targets[name] = package_targets(directory, package, files)
                self.by_dir[directory] = name
        default_dirs = [os.path.normpath(d) for d in workspace.get("default-members", [])]
        self.default = [self.by_dir.get("" if d == "." else d) for d in default_dirs]
        self.default = [name for name in self.default if name]
        if not self.default:
            self.default = [self.by_dir[""]] if "" in self.by_dir else sorted(self.targets)

    def selected(self, options):
        """The packages a cargo command's options select (None when one of them is not known:
        a placeholder, a manifest outside the workspace), and a problem of each -p that names
        no workspace member, as (offset, reference, why)."""
        if any(option == "--workspace" for option, _, _ in options):
            return sorted(self.targets), []
        packages = []
        problems = []
        for option, value, offset in options:
            if option == "--manifest-path":
                directory = os.path.dirname(os.path.normpath(value))
                packages.append(self.by_dir.get("" if directory == "." else directory))
            elif option == "-p":
                packages.append(value if value in self.targets else None)
                if value not in self.targets and not is_placeholder(value):
                    problems.append((offset, f"-p {value}", "not a package of the workspace"))
        if None in packages:
            return None, problems
        return packages or self.default, problems

    def problems(self, words):
        """(offset, reference, why) of each stale reference of a shell command (its words)."""
        options = cargo_options(words)
        if not options:
            return []
        packages, problems = self.selected(options)
        if packages is None:
            return problems
        for option, value, offset in options:
            kind = TARGET_OPTIONS.get(option)
            if not kind or is_placeholder(value):
                continue
            self.checked += 1
            names = set().union(*(self.targets[p][kind] for p in packages))
            if not any(fnmatch.fnmatchcase(name, value) for name in names):
                known = ", ".join(sorted(names)) or "none"
                why = f"no {kind} target {value} in {', '.join(packages)}; {PLURALS[kind]}: {known}"
                problems.append((offset, f"{option} {value}", why))
        return problems


class Checker:
    """The repository's files and directories, its markdown pages and its cargo workspace."""

    def __init__(self, root):
        self.root = root
        self.files = set(git_files(root))
        self.dirs = {""}
        for path in self.files:
            parent = os.path.dirname(path)
            while parent not in self.dirs:
                self.dirs.add(parent)
                parent = os.path.dirname(parent)
        self.top_dirs = TOP_LEVEL_DIRS | {d for d in self.dirs if d and "/" not in d}
        self.pages = {}
        self.workspace = Workspace(root, sorted(self.files))
        self.paths_checked = 0

    def page(self, path):
        """The parsed markdown file `path`, read once."""
        if path not in self.pages:
            with open(os.path.join(self.root, path), encoding="utf-8") as f:
                self.pages[path] = Page(path, f.read())
        return self.pages[path]

    def problem(self, source, target):
        """Why `target`, linked from the repository file `source`, is broken, or None."""
        m = REPO_URL_PATH.match(target)
        if m:
            path_part, _, anchor = m.group(1).partition("#")
            path = os.path.normpath(unquote(path_part)) if path_part else ""
            return self.resolve(path.replace("\\", "/"), anchor, target)
        if SCHEME.match(target) or target.startswith("//"):
            return None  # another site: not checked
        path_part, _, anchor = target.partition("#")
        if not path_part:
            path = source
        else:
            path_part = unquote(path_part)
            if path_part.startswith("/"):
                joined = path_part.lstrip("/")
            else:
                joined = os.path.join(os.path.dirname(source), path_part)
            path = os.path.normpath(joined).replace("\\", "/")
            if path == ".":
                path = ""
            if path == ".." or path.startswith("../"):
                return "outside the repository"
            if path_part.endswith("/") and path in self.files:
                return "a file, linked as a directory"
        return self.resolve(path, anchor, target)

    def resolve(self, path, anchor, target):
        """Why the repository `path` (with `#anchor`, possibly empty) is broken, or None."""
        if path not in self.files and path not in self.dirs:
            return f"no such file or directory: {path or '.'}"
        if not anchor:
            return None
        anchor = unquote(anchor)
        if path in self.dirs:
            return None  # a directory's anchor is its README's; not checked
        if path.endswith(".md"):
            if anchor not in self.page(path).anchors:
                return f"no anchor #{anchor} in {path}"
            return None
        line = re.fullmatch(r"L(\d+)(?:-L(\d+))?", anchor)
        if line:
            with open(os.path.join(self.root, path), encoding="utf-8", errors="replace") as f:
                count = sum(1 for _ in f)
            last = int(line.group(2) or line.group(1))
            if last > count:
                return f"{path} has {count} lines"
        return None

    def path_problem(self, source, path):
        """Why the repository path `path`, in inline code of `source`, names nothing, or None:
        it may be relative to the root or to the directory of `source`."""
        for base in ("", os.path.dirname(source)):
            resolved = os.path.normpath(os.path.join(base, path)).replace("\\", "/")
            if resolved in self.files or resolved in self.dirs:
                return None
        return f"no such file or directory: {os.path.normpath(path)}"

    def item_problem(self, source, path, name):
        """Why the Rust file `path` (resolved as [`path_problem`] does) defines no `fn name`,
        or None."""
        for base in ("", os.path.dirname(source)):
            resolved = os.path.normpath(os.path.join(base, path))
            if resolved.replace("\\", "/") in self.files:
                with open(os.path.join(self.root, resolved), encoding="utf-8") as f:
                    if re.search(rf"\bfn {re.escape(name)}\b", f.read()):
                        return None
        return f"no fn {name} in {os.path.normpath(path)}"

    def code_problems(self, page):
        """(line, reference, why) of each stale reference in the inline code spans and fenced
        code blocks of a page: cargo targets in both, repository paths in spans."""
        found = []
        regions = [(start, end, False) for start, end in page.spans]
        regions += [(start, end, True) for start, end in page.blocks]
        for start, end, lines_end_commands in regions:
            for words in shell_commands(page.text, start, end, lines_end_commands):
                found += self.workspace.problems(words)
        for start, end in page.spans:
            span = page.text[start:end].strip()
            item = RUST_ITEM.match(span)
            path = path_reference(item.group(1) if item else span, self.top_dirs)
            if path is not None:
                self.paths_checked += 1
                why = self.path_problem(page.path, path)
                if not why and item:
                    why = self.item_problem(page.path, path, item.group(2))
                if why:
                    found.append((start, span, why))
        return sorted((page.line_of(offset), reference, why) for offset, reference, why in found)


def check_markdown(checker, markdown, broken):
    """Checks the links and code of the markdown files; appends each problem to `broken`;
    returns how many links there are."""
    links = 0
    for path in markdown:
        page = checker.page(path)
        for line, target in page.links:
            links += 1
            why = checker.problem(path, target)
            if why:
                broken.append(f"{path}:{line}: {target} ({why})")
        for line, reference, why in checker.code_problems(page):
            broken.append(f"{path}:{line}: {reference} ({why})")
    return links


def check_runbooks(checker, broken):
    """Checks the runbook URLs of the alert rules; appends each broken one to `broken`;
    returns how many there are."""
    runbooks = 0
    for path in sorted(checker.files):
        if os.path.dirname(path) not in RUNBOOK_GLOBS or not path.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(checker.root, path), encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                m = RUNBOOK_URL.match(text)
                if not m:
                    continue
                runbooks += 1
                target = m.group(1).strip("\"'")
                why = checker.problem(path, target)
                if why:
                    broken.append(f"{path}:{number}: {target} ({why})")
    return runbooks


def self_test(checker):
    """`--self-test`: feeds a few samples through the code checks and asserts what they find."""
    samples = [
        ("`cargo test -p kube-sim --test integration stress:: -- --ignored`", []),
        ("`cargo test -p kube-sim --release\n--test stress -- --ignored`", [(2, "--test stress")]),
        ("`cargo bench --bench operator -- --test nothing`", []),
        ("```sh\ncargo test --workspace \\\n  --test e2e && cargo run --example nothing\n```",
         [(3, "--example nothing")]),
        ("`sim/tests/integration/stress.rs:12`, `scripts/DIR/x.sh`", []),
        ("see `sim/tests/stress.rs#L1`", [(1, "sim/tests/stress.rs#L1")]),
        ("`tests/e2e/main.rs::no_such_test`", [(1, "tests/e2e/main.rs::no_such_test")]),
        ("`src/runtime/leader.rs::tests::a_lease_without_a_holder_is_released`", []),
    ]  # fmt: skip
    for text, expected in samples:
        found = [(line, ref) for line, ref, _ in checker.code_problems(Page("x.md", text))]
        assert found == expected, f"{text!r}: found {found}, expected {expected}"
    relative = Page("sim/README.md", "`tests/integration/stress.rs`")
    assert checker.code_problems(relative) == [], "a path relative to sim/README.md"
    print(f"check-links: self-test passed ({len(samples) + 1} samples)")
    return 0


def main():
    """Checks the documentation (or runs the self-test); returns the exit status."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checker = Checker(root)
    if sys.argv[1:] == ["--self-test"]:
        return self_test(checker)
    broken = []
    markdown = [p for p in sorted(checker.files) if p.endswith(".md")]
    links = check_markdown(checker, markdown, broken)
    runbooks = check_runbooks(checker, broken)
    counts = (
        f"{links} links, {checker.workspace.checked} cargo targets and {checker.paths_checked}"
        f" repository paths in code in {len(markdown)} markdown files, and {runbooks} runbook URLs"
    )
    for line in broken:
        print(line)
    if broken:
        print(f"check-links: {len(broken)} broken of {counts}", file=sys.stderr)
        return 1
    print(f"check-links: {counts}, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
