"""Names the licence of each package a requirements file pins, from the package's own metadata
as installed for this interpreter, and prints "name<TAB>version<TAB>licence" sorted by name.
Exits 1 when a package is not installed at its pinned version, names no licence, or is under
one outside --allow. Run by scripts/check-dependency-licenses.sh."""

import argparse
import re
import sys
from importlib import metadata

# What packages write in their `License` field or trove classifiers, as SPDX identifiers.
ALIASES = {
    "apache 2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "mit": "MIT",
    "mit license": "MIT",
    "bsd-3-clause": "BSD-3-Clause",
    "isc": "ISC",
    "mpl-2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "psf-2.0": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
}


def pinned(path):
    """(name, version) of each `name==version` line."""
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            yield name.strip(), version.strip()


def licence(meta):
    """SPDX identifiers of a package: its License-Expression, else its License field, else
    its licence classifiers."""
    if meta.get("License-Expression"):
        return [meta["License-Expression"]]
    field = (meta.get("License") or "").strip()
    if field and "\n" not in field and field.lower() in ALIASES:
        return [ALIASES[field.lower()]]
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or []
                   if c.startswith("License ::")]
    return [ALIASES.get(c.lower(), c) for c in classifiers]


def identifiers(expression):
    """The licence identifiers an SPDX expression names (AND and OR alike: every one allowed)."""
    return [t for t in re.split(r"[()\s]+", expression) if t and t not in ("AND", "OR", "WITH")]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--allow", required=True, help="comma-separated SPDX identifiers")
    parser.add_argument("requirements")
    args = parser.parse_args()
    allowed = set(args.allow.split(","))
    failed = False
    for name, version in sorted(pinned(args.requirements), key=lambda p: p[0].lower()):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            print(f"{name} {version} is not installed: run scripts/install-python-worker.sh",
                  file=sys.stderr)
            failed = True
            continue
        if dist.version != version:
            print(f"{name}: {dist.version} installed, {version} pinned", file=sys.stderr)
            failed = True
        found = licence(dist.metadata)
        if not found:
            print(f"{name} {version} names no licence in its metadata", file=sys.stderr)
            failed = True
        for expression in found:
            for ident in identifiers(expression):
                if ident not in allowed:
                    print(f"{name} {version} is under {ident}, which --allow does not list: "
                          "read it, then allow it or drop the package", file=sys.stderr)
                    failed = True
        print(f"{name}\t{version}\t{' AND '.join(found)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
