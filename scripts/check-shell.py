#!/usr/bin/env python3
"""Checks that no shell function of the repository's scripts is longer than 60 lines.

    scripts/check-shell.py [FILE...]

Without arguments it checks every `*.sh` file git knows (tracked, or new and not
ignored) and .ci/run. A function runs from its `name() {` (or `function name {`) line to the
line that closes it: the first `}` alone on a line at the same indentation, outside here-
documents; a one-line function `name() { ...; }` is one line. Prints each function over the
limit as `file:line: name is N lines (limit 60)` and exits 1 if there is any; prints a one-line
summary and exits 0 otherwise. Python 3 standard library only.
"""

import re
import subprocess
import sys
from pathlib import Path

LIMIT = 60
REPO = Path(__file__).resolve().parent.parent

FUNCTION = re.compile(
    r"^(?P<indent>\s*)(?:function\s+(?P<kw>[A-Za-z_][\w:.-]*)\s*(?:\(\))?|(?P<name>[A-Za-z_][\w:.-]*)\s*\(\))\s*\{\s*(?:#.*)?$"
)
ONE_LINE = re.compile(r"^\s*(?:function\s+)?[A-Za-z_][\w:.-]*\s*(?:\(\))?\s*\{.*\}\s*;?\s*(?:#.*)?$")
# `<<WORD`, `<<-WORD`, `<<'WORD'`, `<<"WORD"`, but not `<<<`.
HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][\w]*)\2")


def heredoc_ends(lines):
    """The set of line indices inside here-documents (body and terminator)."""
    inside = set()
    pending = []
    for index, line in enumerate(lines):
        if pending:
            strip_tabs, word = pending[0]
            inside.add(index)
            text = line.lstrip("\t") if strip_tabs else line
            if text == word:
                pending.pop(0)
            continue
        if line.lstrip().startswith("#"):
            continue
        for match in HEREDOC.finditer(line):
            pending.append((match.group(1) == "-", match.group(3)))
    return inside


def functions(path):
    """(line number, name, length) of each function in the file."""
    lines = path.read_text().split("\n")
    in_heredoc = heredoc_ends(lines)
    found = []
    for index, line in enumerate(lines):
        if index in in_heredoc:
            continue
        match = FUNCTION.match(line)
        if not match:
            if ONE_LINE.match(line) and "()" in line:
                name = line.split("(")[0].split()[-1]
                found.append((index + 1, name, 1))
            continue
        name = match.group("kw") or match.group("name")
        close = match.group("indent") + "}"
        end = None
        for later in range(index + 1, len(lines)):
            if later not in in_heredoc and lines[later].rstrip() == close:
                end = later
                break
        if end is None:
            found.append((index + 1, name, None))
        else:
            found.append((index + 1, name, end - index + 1))
    return found


def default_files():
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.sh", ".ci/run"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout.split()
    return sorted({REPO / name for name in listed if (REPO / name).is_file()})


def main(args):
    files = [Path(a) for a in args] or default_files()
    problems, count = [], 0
    for path in files:
        shown = path.relative_to(REPO) if path.is_absolute() and REPO in path.parents else path
        for line, name, length in functions(path):
            count += 1
            if length is None:
                problems.append(f"{shown}:{line}: cannot find where {name} ends")
            elif length > LIMIT:
                problems.append(f"{shown}:{line}: {name} is {length} lines (limit {LIMIT})")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"check-shell.py: {count} functions in {len(files)} files, none over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
