"""Writes one Rust binary's crates in cargo-auditable's format (zlib-compressed JSON, what
`cargo auditable build` puts in a binary's `.dep-v0` section), from what cargo resolves for the
target platform. scripts/build-images.sh adds it to the image's copy of the binary, where syft's
cargo-auditable-binary-cataloger (and cargo audit, trivy, grype) read it.

    python3 scripts/lib/rust-deps.py <package> <bin|example> <target name> <triple> <out file>

The crates are those `cargo tree -e normal,no-proc-macro --target <triple>` resolves for the
package (for an example, also for the dev-dependencies its source names as `crate::` before its
`#[cfg(test)]` tests): the crates linked, with features resolved as cargo builds them.
Build-dependencies and proc-macros, not linked, are left out (cargo-auditable marks them "build",
which syft skips). Workspace crates are listed too, with source "local". `cargo metadata` gives
the sources and the dependency edges.
"""

import json
import re
import subprocess
import sys
import zlib

package_name, kind, target_name, triple, out = sys.argv[1:]
metadata = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", triple],
    check=True, capture_output=True, text=True).stdout)
packages = {p["id"]: p for p in metadata["packages"]}
nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
root = next(p["id"] for p in metadata["packages"]
            if p["name"] == package_name and p["id"] in metadata["workspace_members"])
target = next((t for t in packages[root]["targets"] if t["name"] == target_name and kind in t["kind"]), None)
if target is None:
    sys.exit(f"rust-deps.py: {package_name} has no {kind} target {target_name}")


def edges(node_id, kinds):
    """The dependencies of node_id through edges of the given kinds (None is normal)."""
    for dep in nodes[node_id]["deps"]:
        if any(k["kind"] in kinds for k in dep["dep_kinds"]):
            yield dep["pkg"]


# The dev-dependencies an example names in its source, before its tests.
source = open(target["src_path"]).read().split("#[cfg(test)]")[0] if kind == "example" else ""
named_dev = [d for d in edges(root, {"dev"})
             if re.search(r"\b" + re.escape(packages[d]["name"].replace("-", "_")) + r"::", source)]
specs = [f"{packages[i]['name']}@{packages[i]['version']}" for i in [root] + named_dev]
tree = subprocess.run(
    ["cargo", "tree", "--locked", "-e", "normal,no-proc-macro", "--target", triple, "--prefix", "none",
     "--format", "{p}"] + [a for spec in specs for a in ("-p", spec)],
    check=True, capture_output=True, text=True).stdout
linked = {tuple(line.split()[:2]) for line in tree.splitlines() if line.strip()}
order = sorted((i for i, p in packages.items() if (p["name"], "v" + p["version"]) in linked and i in nodes),
               key=lambda i: (packages[i]["name"], packages[i]["version"]))
if len(order) != len(linked):
    sys.exit(f"rust-deps.py: cargo tree names {len(linked)} crates, cargo metadata has {len(order)} of them")
index = {package_id: n for n, package_id in enumerate(order)}


def source_of(package_id):
    source = packages[package_id]["source"]
    if source is None:
        return "local"
    if source.startswith("registry+https://github.com/rust-lang/crates.io-index") or source.startswith(
            "sparse+https://index.crates.io/"):
        return "crates.io"
    return source.split("+", 1)[0]


listed = []
for package_id in order:
    deps = {d for d in edges(package_id, {None}) if d in index}
    if package_id == root:
        deps |= set(named_dev)
    entry = {"name": packages[package_id]["name"], "version": packages[package_id]["version"],
             "source": source_of(package_id)}
    if deps:
        entry["dependencies"] = sorted(index[d] for d in deps)
    if package_id == root:
        entry["root"] = True
    listed.append(entry)

with open(out, "wb") as f:
    f.write(zlib.compress(json.dumps({"packages": listed}, separators=(",", ":")).encode(), 9))
print(f"rust-deps.py: {package_name} {kind} {target_name}: {len(listed)} crates", file=sys.stderr)
