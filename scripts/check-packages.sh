#!/usr/bin/env bash
# The worker library as its users take it: `cargo package -p swarm-protocol -p swarm-worker`,
# then a crate outside the workspace that depends on the two packaged crates by version (through
# [patch.crates-io], as crates.io would serve them) builds the example worker
# (examples/swarm-worker.rs) and runs its --help.
#
#   scripts/check-packages.sh
#
# What the packages leave out (a file the crate needs, a dependency known only by path) fails
# here, not in a user's build. The crate outside reuses the workspace's Cargo.lock, so its
# dependencies are those tested, and CARGO_TARGET_DIR (or the workspace's target/), so they are
# compiled once. Needs no network: every dependency is in Cargo's cache after the workspace's
# build.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${repo_root}"

target_dir="${CARGO_TARGET_DIR:-${repo_root}/target}"
# The packaged crates' version, as Cargo resolves it (both inherit the workspace's).
version="$(cargo metadata --format-version 1 --no-deps --locked --offline | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "swarm-protocol"))')"
[[ -n "${version}" ]] || die "cargo metadata names no version of swarm-protocol"

# --exclude-lockfile: a library's users resolve its dependencies themselves; and with
# `publish = false` Cargo cannot resolve swarm-protocol from a registry to write one.
say "cargo package -p swarm-protocol -p swarm-worker (${version})"
cargo package --locked --offline --quiet --no-verify --allow-dirty --exclude-lockfile \
    -p swarm-protocol -p swarm-worker

work="$(mktemp -d "${TMPDIR:-/tmp}/swarm-packages.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
for crate in swarm-protocol swarm-worker; do
    tar -xzf "${target_dir}/package/${crate}-${version}.crate" -C "${work}"
done
mkdir -p "${work}/outside/src"
cp examples/swarm-worker.rs "${work}/outside/src/main.rs"
cp Cargo.lock "${work}/outside/Cargo.lock"
# The example's own dependencies, as the workspace names them.
cat >"${work}/outside/Cargo.toml" <<EOF
[package]
name = "swarm-worker-outside"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[dependencies]
swarm-worker = "=${version}"
swarm-protocol = "=${version}"
clap = { version = "4", features = ["derive", "env"] }
k8s-openapi = { version = "0.29", features = ["v1_36"] }
serde_json = "1"
tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal", "time", "sync", "net"] }
tracing = "0.1"
tracing-subscriber = { version = "0.3", features = ["env-filter", "json"] }

[patch.crates-io]
swarm-worker = { path = "../swarm-worker-${version}" }
swarm-protocol = { path = "../swarm-protocol-${version}" }
EOF
say "building the example worker outside the workspace, on the packaged crates"
(cd "${work}/outside" && CARGO_TARGET_DIR="${target_dir}" cargo build --offline --quiet) ||
    die "the example worker does not build on the packaged swarm-worker and swarm-protocol (above)"
"${target_dir}/debug/swarm-worker-outside" --help >/dev/null ||
    die "the example worker built outside the workspace does not run its --help"
say "the packaged swarm-worker ${version} builds and runs the example worker outside the workspace"
