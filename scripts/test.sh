#!/usr/bin/env bash
# Runs every test of the workspace: unit, property, simulation conformance, kubectl and
# end-to-end tests. Works on a fresh machine with Rust and python3: the pinned kubectl is
# installed into .tools/ when KUBECTL does not name one.
#
#   scripts/test.sh                  # the whole suite
#   scripts/test.sh --test e2e       # extra arguments go to `cargo test --workspace`
#
# SWARM_E2E_KUBECONFIG=<kubeconfig> runs the end-to-end scenarios against that cluster instead
# of simulations (see tests/e2e.rs).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

if [[ -n "${KUBECTL:-}" ]]; then
    echo "test.sh: using kubectl from KUBECTL=${KUBECTL}"
else
    echo "test.sh: installing or reusing the pinned kubectl (scripts/install-kubectl.sh)"
    if KUBECTL="$(scripts/install-kubectl.sh)"; then
        echo "test.sh: using ${KUBECTL}"
    elif KUBECTL="$(command -v kubectl)"; then
        echo "test.sh: could not install the pinned kubectl; falling back to ${KUBECTL}" >&2
    else
        echo "test.sh: no kubectl: scripts/install-kubectl.sh failed and none is on PATH" >&2
        exit 1
    fi
fi
export KUBECTL
echo "test.sh: $("${KUBECTL}" version --client 2>/dev/null | head -n 1 || true)"

# --no-fail-fast: one failing test binary must not hide the results of the others.
echo "test.sh: cargo test --workspace --no-fail-fast $*"
start=${SECONDS}
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
echo "test.sh: finished in $((SECONDS - start)) s with exit code ${status}"
exit "${status}"
