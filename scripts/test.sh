#!/usr/bin/env bash
# Runs every test of the workspace: unit, property, simulation conformance, kubectl, alert rule
# (promtool) and end-to-end tests on kube-sim; then the end-to-end scenarios again on a real
# control plane built from Go modules (scripts/real-cluster.sh), and a three-minute fault soak
# on another (scripts/soak.sh). Works on a fresh machine with
# Rust, Go and python3: the pinned kubectl and promtool are installed into .tools/ when KUBECTL
# and PROMTOOL do not name one (promtool from Debian's prometheus package, with apt-get
# download), so are the Prometheus Operator's CRDs unless PROMETHEUS_OPERATOR_CRDS names their
# directory (from the Go module proxy), and the control plane is built once into
# ~/.cache/swarm-operator.
#
#   scripts/test.sh                          # both tiers
#   scripts/test.sh --test e2e               # extra arguments go to the kube-sim tier's
#                                            # `cargo test --workspace`
#   SWARM_REAL_CLUSTER=0 scripts/test.sh     # the kube-sim tier only
#   SWARM_SOAK_MINUTES=30 SWARM_SOAK_SEED=7 scripts/test.sh
#                                            # a longer fault soak (default: 3 minutes, seed 1)
#
# SWARM_E2E_KUBECONFIG=<kubeconfig> runs the kube-sim tier's end-to-end scenarios against that
# cluster instead (see tests/e2e.rs).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

# Exports the variable $1 as the path of tool $2: as given, else the pinned version installed by
# scripts/install-$2.sh, else one on PATH.
use_tool() {
    local var="$1" tool="$2" path
    if [[ -n "${!var:-}" ]]; then
        echo "test.sh: using ${tool} from ${var}=${!var}"
        export "${var}"
        return
    fi
    echo "test.sh: installing or reusing the pinned ${tool} (scripts/install-${tool}.sh)"
    if path="$("scripts/install-${tool}.sh")"; then
        echo "test.sh: using ${path}"
    elif path="$(command -v "${tool}")"; then
        echo "test.sh: could not install the pinned ${tool}; falling back to ${path}" >&2
    else
        echo "test.sh: no ${tool}: scripts/install-${tool}.sh failed and none is on PATH" >&2
        exit 1
    fi
    export "${var}=${path}"
}

use_tool KUBECTL kubectl
echo "test.sh: $("${KUBECTL}" version --client 2>/dev/null | head -n 1 || true)"
# promtool checks the alert rules and the operator's /metrics (tests/monitoring.rs, e2e).
use_tool PROMTOOL promtool
# The Prometheus Operator's CRDs: the e2e tests validate deploy/monitoring against them.
if [[ -z "${PROMETHEUS_OPERATOR_CRDS:-}" ]]; then
    echo "test.sh: fetching or reusing the pinned Prometheus Operator CRDs"
    PROMETHEUS_OPERATOR_CRDS="$(scripts/install-prometheus-operator-crds.sh)"
fi
echo "test.sh: Prometheus Operator CRDs in ${PROMETHEUS_OPERATOR_CRDS}"
export PROMETHEUS_OPERATOR_CRDS

# --no-fail-fast: one failing test binary must not hide the results of the others.
echo "test.sh: cargo test --workspace --no-fail-fast $*"
start=${SECONDS}
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
echo "test.sh: kube-sim tier finished in $((SECONDS - start)) s with exit code ${status}"

if [[ "${SWARM_REAL_CLUSTER:-1}" != "0" && -z "${SWARM_E2E_KUBECONFIG:-}" ]]; then
    real_start=${SECONDS}
    cluster_dir="$(mktemp -d "${TMPDIR:-/tmp}/swarm-real-cluster.XXXXXX")"
    trap 'scripts/real-cluster.sh down "${cluster_dir}" || true' EXIT
    real_status=0
    if scripts/real-cluster.sh up "${cluster_dir}"; then
        # --workspace: the first tier's feature set, so nothing is compiled again.
        echo "test.sh: cargo test --workspace --test e2e on the real control plane"
        SWARM_E2E_KUBECONFIG="${cluster_dir}/kubeconfig" \
            cargo test --workspace --locked --test e2e --no-fail-fast || real_status=$?
    else
        real_status=$?
        echo "test.sh: the real control plane did not start (logs in ${cluster_dir}/logs)" >&2
    fi
    echo "test.sh: real-cluster tier finished in $((SECONDS - real_start)) s with exit code ${real_status}"
    ((real_status == 0)) || status=${real_status}
    scripts/real-cluster.sh down "${cluster_dir}" || true

    # The fault soak on a control plane of its own: a fixed seed, so a failure replays.
    soak_start=${SECONDS}
    soak_status=0
    echo "test.sh: scripts/soak.sh --minutes ${SWARM_SOAK_MINUTES:-3} --seed ${SWARM_SOAK_SEED:-1}"
    scripts/soak.sh --minutes "${SWARM_SOAK_MINUTES:-3}" --seed "${SWARM_SOAK_SEED:-1}" || soak_status=$?
    echo "test.sh: fault soak finished in $((SECONDS - soak_start)) s with exit code ${soak_status}"
    ((soak_status == 0)) || status=${soak_status}
fi
echo "test.sh: finished in $((SECONDS - start)) s with exit code ${status}"
exit "${status}"
