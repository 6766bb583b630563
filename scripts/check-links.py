#!/usr/bin/env python3
"""Checks the links of the repository's documentation.

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
checked the same way. Prints each broken link as `file:line: target (why)` and exits 1 if there
is any; prints a one-line summary and exits 0 otherwise. Python 3 standard library only.
"""

import os
import re
import subprocess
import sys
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


def git_files(root):
    """Tracked files and new ones that are not ignored, as paths relative to the root."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p))})


def strip_fences(text):
    """Blanks fenced code blocks (spaces, so that offsets stay); returns the text and the set
    of their line numbers."""
    lines = text.split("\n")
    fenced = set()
    fence = None
    for i, line in enumerate(lines):
        if fence is None:
            m = FENCE.match(line)
            if m:
                fence = m.group(1)
                fenced.add(i)
                lines[i] = " " * len(line)
        else:
            fenced.add(i)
            stripped = line.strip()
            if (
                stripped.startswith(fence[0] * len(fence))
                and stripped.strip(fence[0]) == ""
            ):
                fence = None
            lines[i] = " " * len(line)
    return "\n".join(lines), fenced


def strip_inline_code(text):
    """Blanks inline code spans (a run of backticks up to the next run of the same length in
    the same paragraph) but their backticks, which become `x`, so that link text made of
    inline code still parses."""
    out = list(text)
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
        for p in range(i, close + run):
            if out[p] != "\n":
                out[p] = "x"
        i = close + run
    return "".join(out)


def heading_text(raw):
    """A heading's text as GitHub renders it, before the slug: links become their text, inline
    code its content, HTML tags and emphasis asterisks go."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"(`+)(.+?)\1", r"\2", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("*", "")


def slug(text):
    kept = []
    for ch in text.strip().lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LNM":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


class Page:
    """A markdown file: its anchors, and its links with their line numbers."""

    def __init__(self, path, text):
        self.path = path
        code_free, fenced = strip_fences(text)
        self.anchors = set()
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
            self.anchors.add(base if n == 0 else f"{base}-{n}")
        code_free = strip_inline_code(code_free)
        self.anchors.update(m.group(1) for m in EXPLICIT_ANCHOR.finditer(code_free))
        self.links = []
        line_starts = [0] + [m.end() for m in re.finditer(r"\n", code_free)]

        def line_of(offset):
            lo, hi = 0, len(line_starts) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if line_starts[mid] <= offset:
                    lo = mid
                else:
                    hi = mid - 1
            return lo + 1

        for m in INLINE_LINK.finditer(code_free):
            if re.search(r"\n[ \t]*\n", m.group(0)):
                continue  # a bracket in one paragraph, a parenthesis in another
            target = m.group(2)
            self.links.append((line_of(m.start(2)), original(text, m.start(2), len(target))))
        for m in REFERENCE_DEFINITION.finditer(code_free):
            target = m.group(2)
            self.links.append((line_of(m.start(2)), original(text, m.start(2), len(target))))


def original(text, start, length):
    """The target as written (the code-free copy turned inline code in it into x's)."""
    target = text[start : start + length]
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    return target


class Checker:
    def __init__(self, root):
        self.root = root
        self.files = set(git_files(root))
        self.dirs = {""}
        for path in self.files:
            parent = os.path.dirname(path)
            while parent not in self.dirs:
                self.dirs.add(parent)
                parent = os.path.dirname(parent)
        self.pages = {}

    def page(self, path):
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


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checker = Checker(root)
    broken = []
    links = 0
    markdown = [p for p in sorted(checker.files) if p.endswith(".md")]
    for path in markdown:
        for line, target in checker.page(path).links:
            links += 1
            why = checker.problem(path, target)
            if why:
                broken.append(f"{path}:{line}: {target} ({why})")
    runbooks = 0
    for path in sorted(checker.files):
        if os.path.dirname(path) not in RUNBOOK_GLOBS or not path.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                m = RUNBOOK_URL.match(text)
                if not m:
                    continue
                runbooks += 1
                target = m.group(1).strip("\"'")
                why = checker.problem(path, target)
                if why:
                    broken.append(f"{path}:{number}: {target} ({why})")
    for line in broken:
        print(line)
    if broken:
        print(
            f"check-links: {len(broken)} broken of {links} links in {len(markdown)} markdown"
            f" files and {runbooks} runbook URLs",
            file=sys.stderr,
        )
        return 1
    print(
        f"check-links: {links} links in {len(markdown)} markdown files and {runbooks} runbook"
        " URLs, all resolve"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
