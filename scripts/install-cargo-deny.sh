#!/usr/bin/env bash
# Builds the pinned cargo-deny once and prints its path.
#
#   "$(scripts/install-cargo-deny.sh)" deny --offline check licenses bans sources
#
# scripts/test.sh checks the dependencies' licences, bans and sources with it against
# deny.toml (after `cargo fetch --locked`, as --offline reads only the registry cache). It is built with `cargo install --locked` (cargo-deny's own lock file) into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/cargo-deny-<version>; running it again is
# cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
CARGO_DENY_VERSION="0.20.2"
out="${cache_root}/cargo-deny-${CARGO_DENY_VERSION}"
binary="${out}/bin/cargo-deny"

if [[ ! -x "${binary}" ]]; then
    say "building cargo-deny ${CARGO_DENY_VERSION} into ${out} (once)"
    # In a temporary target directory of its own, not CARGO_TARGET_DIR: scripts/test.sh builds
    # it while the workspace's tests build and run there, and Cargo locks a target directory.
    env -u CARGO_TARGET_DIR cargo install cargo-deny --version "${CARGO_DENY_VERSION}" --locked \
        --root "${out}" --quiet >&2 ||
        die "cargo install cargo-deny ${CARGO_DENY_VERSION} failed"
fi
echo "${binary}"
