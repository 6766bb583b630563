#!/usr/bin/env bash
# A seeded fault soak of the operator on a real Kubernetes control plane.
#
#   scripts/soak.sh [--minutes N] [--seed S]      (defaults: 3 minutes, seed 1)
#
# Builds the operator and the soak driver (tests/soak), starts a control plane with
# scripts/real-cluster.sh in a fresh directory, runs two operator replicas against it through
# toxiproxy (scripts/install-toxiproxy.sh), and lets the driver interleave a user's changes with
# faults for N minutes, chosen by the seed (the same seed gives the same plan). The report goes
# to standard output; the exit code is 1 when a guarantee failed (then the logs are kept and
# their place printed), 0 otherwise. The cluster and everything the soak started are stopped
# however it ends. SWARM_SOAK_KEEP=1 keeps the directory after a passing run too;
# SWARM_SOAK_OPERATOR_LOG sets the replicas' RUST_LOG.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
usage() {
    say "usage: $0 [--minutes N] [--seed S]"
    exit 2
}

minutes=3
seed=1
while [[ $# -gt 0 ]]; do
    case "$1" in
    --minutes) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage; minutes="$2"; shift 2 ;;
    --seed) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage; seed="$2"; shift 2 ;;
    *) usage ;;
    esac
done

cd "${repo_root}"
KUBECTL="${KUBECTL:-$(scripts/install-kubectl.sh)}"
export KUBECTL
toxiproxy="$(scripts/install-toxiproxy.sh)"
say "building the operator and the soak driver"
started=${SECONDS}
# The test profile's executable, as cargo names it; building it builds the operator binary it
# runs. --workspace: the feature set of `cargo test --workspace`, so after scripts/test.sh's
# first tier nothing is compiled again.
driver="$(cargo test --workspace --quiet --test soak --no-run --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "soak" and m.get("executable"):
        print(m["executable"])')"
[[ -x "${driver}" ]] || die "cannot find the soak driver's executable"
say "built in $((SECONDS - started)) s"

dir="$(mktemp -d "${TMPDIR:-/tmp}/swarm-soak.XXXXXX")"
driver_pid=""
# shellcheck disable=SC2317 # run by the EXIT trap below, which shellcheck 0.9 does not follow.
cleanup() {
    local code=$?
    # The driver runs in its own process group: whatever it started goes with it.
    if [[ -n "${driver_pid}" ]]; then
        kill -KILL -- "-${driver_pid}" 2>/dev/null || true
    fi
    scripts/real-cluster.sh down "${dir}" >/dev/null 2>&1 || true
    # The second cluster of scripts/test.sh: its real node too must leave nothing behind.
    if ! scripts/real-cluster.sh check-clean "${dir}"; then
        code=1
    fi
    say "done in $((SECONDS - started)) s"
    if [[ ${code} -ne 0 || "${SWARM_SOAK_KEEP:-0}" == 1 ]]; then
        echo "logs: operator replicas ${dir}/soak/operator-*.log, cluster ${dir}/logs (audit.log, kube-apiserver.log, etcd.log, ...), toxiproxy ${dir}/soak/toxiproxy.log"
    else
        rm -rf "${dir}"
    fi
    exit "${code}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/real-cluster.sh up "${dir}"
say "soaking for ${minutes} min with seed ${seed} (cluster in ${dir})"
SWARM_SOAK_CLUSTER="${dir}" SWARM_E2E_KUBECONFIG="${dir}/kubeconfig" \
    SWARM_SOAK_MINUTES="${minutes}" SWARM_SOAK_SEED="${seed}" SWARM_SOAK_TOXIPROXY="${toxiproxy}" \
    setsid "${driver}" &
driver_pid=$!
status=0
wait "${driver_pid}" || status=$?
exit "${status}"
