#!/usr/bin/env bash
# One command to try swarm-operator on a laptop, no cluster needed: builds the operator and the
# simulated control plane (kube-sim), starts the simulation, installs the CRD and the examples,
# runs the operator against it and prints the kubectl commands to try. Ctrl-C stops everything.
#
# Settings (environment): PLAYGROUND_TIME_SCALE (simulated delays factor, default 0.2: a pod's
# 30 s termination grace takes 6 s), PLAYGROUND_DIR (state directory, default .playground/).
set -euo pipefail

# Its messages go to stdout, its errors to stderr.
script_name=playground
say_fd=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/components.sh
source "${repo_root}/scripts/lib/components.sh"
cd "${repo_root}"

state_dir="${PLAYGROUND_DIR:-${repo_root}/.playground}"
time_scale="${PLAYGROUND_TIME_SCALE:-0.2}"
target_dir="${CARGO_TARGET_DIR:-${repo_root}/target}"
kubeconfig="${state_dir}/kubeconfig"
sim_log="${state_dir}/kube-sim.log"
operator_log="${state_dir}/operator.log"

sim_pid=""
operator_pid=""
# shellcheck disable=SC2317 # run by the traps below, which shellcheck 0.9 does not follow.
cleanup() {
    trap - INT TERM EXIT
    local pid
    for pid in ${operator_pid} ${sim_pid}; do
        kill -TERM "${pid}" 2>/dev/null || true
    done
    for pid in ${operator_pid} ${sim_pid}; do
        # Give each a few seconds to shut down gracefully, then make sure it is gone (a process
        # stuck even after SIGKILL is named, and left).
        if wait_pid_gone "${pid}" 5 || kill_and_wait "${pid}" "$(cat "/proc/${pid}/comm" 2>/dev/null)"; then
            wait "${pid}" 2>/dev/null || true
        fi
    done
    if [[ -n "${sim_pid}${operator_pid}" ]]; then
        say "stopped the operator and the simulation (logs kept in ${state_dir})"
    fi
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

mkdir -p "${state_dir}"
# The state directory ignores itself, so it never shows up in git status.
echo '*' > "${state_dir}/.gitignore"
rm -f "${kubeconfig}"

say "building swarm-operator and kube-sim"
cargo build -p swarm-operator -p kube-sim
operator_bin="${target_dir}/debug/swarm-operator"
sim_bin="${target_dir}/debug/kube-sim"

if [[ -n "${KUBECTL:-}" ]]; then
    kubectl="${KUBECTL}"
else
    say "installing or reusing the pinned kubectl (scripts/install-kubectl.sh)"
    kubectl="$(scripts/install-kubectl.sh)"
fi
k() { KUBECONFIG="${kubeconfig}" "${kubectl}" "$@"; }

say "starting kube-sim (time scale ${time_scale}), log ${sim_log}"
"${sim_bin}" --kubeconfig "${kubeconfig}" --time-scale "${time_scale}" >"${sim_log}" 2>&1 &
sim_pid=$!
for _ in $(seq 300); do
    [[ -s "${kubeconfig}" ]] && break
    kill -0 "${sim_pid}" 2>/dev/null || die "kube-sim exited; see ${sim_log}"
    sleep 0.1
done
[[ -s "${kubeconfig}" ]] || die "kube-sim wrote no kubeconfig within 30 s; see ${sim_log}"
server="$(sed -n 's/^ *server: *//p' "${kubeconfig}" | head -n 1)"

say "kubectl apply -f crds/"
k apply -f crds/
k wait --for=condition=Established --timeout=60s crd/swarmpools.swarm.io >/dev/null

read -r http_port metrics_port < <(free_ports 2)
say "starting swarm-operator, log ${operator_log}"
KUBECONFIG="${kubeconfig}" "${operator_bin}" run --http-addr "127.0.0.1:${http_port}" \
    --metrics-addr "127.0.0.1:${metrics_port}" --metrics-insecure >"${operator_log}" 2>&1 &
operator_pid=$!
ready_url="http://127.0.0.1:${http_port}/readyz"
ready_deadline=$((SECONDS + 60))
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
    "${ready_url}" 2>/dev/null; do
    kill -0 "${operator_pid}" 2>/dev/null || die "swarm-operator exited; see ${operator_log}"
    if ((SECONDS >= ready_deadline)); then
        say "swarm-operator is not ready after 60 s (${ready_url}); going on, see ${operator_log}"
        break
    fi
    sleep 0.1
done

say "kubectl apply -f examples/"
k apply -f examples/
namespace="$(k get swarmpools -A -o jsonpath='{.items[0].metadata.namespace}')"
pool="$(k get swarmpools -A -o jsonpath='{.items[0].metadata.name}')"
config_map="$(k -n "${namespace}" get swarmpool "${pool}" -o jsonpath='{.spec.configMap}')"
statefulset="$(k -n "${namespace}" get statefulsets -o jsonpath='{.items[0].metadata.name}')"
say "waiting for the pool to be Balanced"
k -n "${namespace}" wait "swarmpool/${pool}" --for=jsonpath='{.status.phase}'=Balanced \
    --timeout=120s >/dev/null || say "not Balanced yet; see ${operator_log}"
k -n "${namespace}" get swarmpools

kubectl_hint="kubectl"
if [[ "$(command -v kubectl || true)" != "${kubectl}" ]]; then
    kubectl_hint="${kubectl}"
fi
cat <<EOF

The simulated cluster is running at ${server}; the operator is watching it.
Try, in another terminal:

  export KUBECONFIG=${kubeconfig}
  ${kubectl_hint} -n ${namespace} get swarmpools
  ${kubectl_hint} -n ${namespace} scale statefulset ${statefulset} --replicas=3
  ${kubectl_hint} -n ${namespace} get swarmpools -w
  ${kubectl_hint} -n ${namespace} describe swarmpool ${pool}
  ${kubectl_hint} -n ${namespace} get configmap ${config_map} -o yaml
  ${kubectl_hint} -n ${namespace} get pods
  curl -s ${server}/kube-sim/v1/mounts    # what each pod mounted when it started

Operator metrics: http://127.0.0.1:${metrics_port}/metrics
Logs: ${operator_log}, ${sim_log}
Press Ctrl-C to stop everything.
EOF

# Runs until Ctrl-C, or until one of the two exits on its own.
set +e
wait -n "${sim_pid}" "${operator_pid}"
status=$?
set -e
if kill -0 "${sim_pid}" 2>/dev/null; then
    say "swarm-operator exited on its own (status ${status}); stopping; see ${operator_log}"
else
    say "kube-sim exited on its own (status ${status}); stopping; see ${sim_log}"
fi
exit 1
