#!/usr/bin/env bash
# Runs every test of the workspace: unit, property, simulation conformance, kubectl, alert rule
# (promtool) and end-to-end tests on kube-sim; then the end-to-end scenarios again on a real
# cluster built from Go modules (scripts/real-cluster.sh: a control plane, kwok nodes and one
# real node that runs the images scripts/build-images.sh builds), and a three-minute fault soak
# on another (scripts/soak.sh). After each cluster goes down, nothing of it may be left on the
# machine (scripts/real-cluster.sh check-clean). Works on a fresh machine with
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
#   scripts/test.sh --quick                  # the inner loop: unit, property and planner
#                                            # tests, no cluster and no tools (CONTRIBUTING.md)
#   SWARM_SOAK_MINUTES=30 SWARM_SOAK_SEED=7 scripts/test.sh
#                                            # a longer fault soak (default: 3 minutes, seed 1)
#
# SWARM_E2E_KUBECONFIG=<kubeconfig> runs the kube-sim tier's end-to-end scenarios against that
# cluster instead (see tests/e2e/main.rs). SWARM_E2E_PARALLEL (default 6) bounds how many end-to-end
# scenarios run at once, on kube-sim and on the real control plane.
#
# It ends with a table of where the time went (and .ci/run's steps before it, which it records
# in the file SWARM_TIMINGS names), and the ten slowest scenarios on the real control plane.
set -euo pipefail

# Its messages go to stdout (the CI log), its errors to stderr.
say_fd=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${repo_root}"

# The inner loop: what a change to the planner, the assignment, the protocol or the worker
# library needs first, in a few minutes, before the tiers below.
if [[ "${1:-}" == "--quick" ]]; then
    say "the quick loop: unit tests, the planner's scenarios and handoff simulation, the assignment's properties"
    cargo test --workspace --locked --lib --bins
    cargo test --locked --test integration -- planner_scenarios handoff_simulation \
        deployment_scenarios fenced_write
    cargo test --locked -p swarm-assign -p swarm-protocol --tests
    say "the quick loop passed in $((SECONDS)) s"
    exit 0
fi

# Where the time went: one "<step>\t<seconds>" line per step.
timings="${SWARM_TIMINGS:-$(mktemp "${TMPDIR:-/tmp}/swarm-timings.XXXXXX")}"
scenario_timings="$(mktemp "${TMPDIR:-/tmp}/swarm-scenario-timings.XXXXXX")"
run_start=${SECONDS}
step_start=${SECONDS}
# Records the seconds since the previous mark as step $1.
mark() {
    printf '%s\t%s\n' "$1" "$((SECONDS - step_start))" >>"${timings}"
    step_start=${SECONDS}
}

# The table printed last, so a regression shows in every CI log.
report() {
    echo
    say "where the time went"
    awk -F '\t' '{ printf "  %-58s %6d s\n", $1, $2; total += $2 }
        END { printf "  %-58s %6d s\n", "total", total }' "${timings}"
    if [[ -n "${go_seconds:-}" ]]; then
        echo "  (the control plane build took ${go_seconds} s, beside the compile and the kube-sim tier)"
    fi
    if [[ -s "${scenario_timings}" ]]; then
        say "the ten slowest scenarios on the real control plane (seconds running; waiting for the cluster)"
        sort -t $'\t' -k4,4 -g -r "${scenario_timings}" | head -n 10 |
            awk -F '\t' '{ printf "  %-50s %-9s %6.0f s  %5.0f s  %s\n", $1, $2, $4, $3, $5 }'
    fi
}

# Exports the variable $1 as the path of tool $2: as given, else the pinned version installed by
# scripts/install-$2.sh, else one on PATH.
use_tool() {
    local var="$1" tool="$2" path
    if [[ -n "${!var:-}" ]]; then
        say "using ${tool} from ${var}=${!var}"
        export "${var?}"
        return
    fi
    say "installing or reusing the pinned ${tool} (scripts/install-${tool}.sh)"
    if path="$("scripts/install-${tool}.sh")"; then
        say "using ${path}"
    elif path="$(command -v "${tool}")"; then
        say "could not install the pinned ${tool}; falling back to ${path}" >&2
    else
        say "no ${tool}: scripts/install-${tool}.sh failed and none is on PATH" >&2
        exit 1
    fi
    export "${var}=${path}"
}

use_tool KUBECTL kubectl
say "$("${KUBECTL}" version --client 2>/dev/null | head -n 1 || true)"
# promtool checks the alert rules and the operator's /metrics (tests/integration/monitoring.rs, e2e).
use_tool PROMTOOL promtool
# The Prometheus Operator's CRDs: the e2e tests validate deploy/monitoring against them.
if [[ -z "${PROMETHEUS_OPERATOR_CRDS:-}" ]]; then
    say "fetching or reusing the pinned Prometheus Operator CRDs"
    PROMETHEUS_OPERATOR_CRDS="$(scripts/install-prometheus-operator-crds.sh)"
fi
say "Prometheus Operator CRDs in ${PROMETHEUS_OPERATOR_CRDS}"
export PROMETHEUS_OPERATOR_CRDS

# The Python protocol worker's pinned client: the end-to-end scenarios run it as a worker
# process, and its self-test runs after the kube-sim tier.
say "installing or reusing the Python worker's pinned client (scripts/install-python-worker.sh)"
python_ok=1
if SWARM_PYTHON_WORKER="$(scripts/install-python-worker.sh)"; then
    export SWARM_PYTHON_WORKER
    say "Python worker runs on ${SWARM_PYTHON_WORKER}"
else
    python_ok=0
    say "could not install the Python worker's pinned client" >&2
fi

# The control plane (and the soak's toxiproxy) build beside the Rust compile: the compile's
# last minutes link one crate at a time and leave a core idle. Nothing is rebuilt when only this
# repository changed.
real_tier=0
if [[ "${SWARM_REAL_CLUSTER:-1}" != "0" && -z "${SWARM_E2E_KUBECONFIG:-}" ]]; then
    real_tier=1
    go_log="$(mktemp "${TMPDIR:-/tmp}/swarm-go-build.XXXXXX")"
    say "building or reusing helm, helm-docs, syft, crane, kustomize, the control plane and toxiproxy in the background (log: ${go_log})"
    (
        go_start=${SECONDS}
        # helm, helm-docs and syft first: the chart's and the SBOMs' tests in the kube-sim tier
        # need them (they build them themselves when this has not yet); crane and kustomize are
        # the real-cluster tier's.
        scripts/install-helm.sh >/dev/null && scripts/install-helm-docs.sh >/dev/null &&
            scripts/install-syft.sh >/dev/null && scripts/install-crane.sh >/dev/null &&
            scripts/install-kustomize.sh >/dev/null &&
            scripts/real-cluster.sh build &&
            scripts/install-toxiproxy.sh >/dev/null
        code=$?
        echo "go build finished in $((SECONDS - go_start)) s"
        exit "${code}"
    ) >"${go_log}" 2>&1 &
    go_build_pid=$!
fi
mark "tools (kubectl, promtool, CRDs, the Python worker's client)"

say "compiling the test profile (cargo test --workspace --no-run)"
status=0
cargo test --workspace --no-run --quiet "$@" || status=$?
mark "compile the test profile"

# Checks that nothing after them needs, and whose first run on a new machine is minutes of CPU
# (building cargo-deny and staticcheck, and the fuzzing instrumentation of every package the Go
# worker's fuzz targets build): one lane in the background at the lowest priority, beside the
# steps that follow, which mostly wait on simulations and pods. Its output and result are read
# at the end, before the fuzz targets run. cargo deny checks what a user installs may depend on
# (deny.toml): licences, banned crates and sources. It reads only Cargo.lock and the registry
# cache; `cargo fetch` fills the cache with the crates of other platforms, which the test build
# did not need.
checks_log="$(mktemp "${TMPDIR:-/tmp}/swarm-background-checks.XXXXXX")"
say "in the background: cargo deny, the Go worker's lints, its fuzz targets' build (log: ${checks_log})"
(
    renice -n 19 -p "${BASHPID}" >/dev/null
    checks_status=0
    say "the dependencies' licences, bans and sources (cargo deny, deny.toml)"
    cargo_deny="$(scripts/install-cargo-deny.sh)" && cargo fetch --locked --quiet &&
        "${cargo_deny}" deny --offline --log-level warn check licenses bans sources || checks_status=1
    say "the Go worker module: gofmt, go vet, staticcheck (scripts/go-worker.sh check)"
    scripts/go-worker.sh check || checks_status=1
    say "the Go worker's fuzz targets, once over their seed corpus (scripts/go-worker.sh fuzz 1x)"
    scripts/go-worker.sh fuzz 1x || checks_status=1
    exit "${checks_status}"
) >"${checks_log}" 2>&1 &
checks_pid=$!

# The worker library as its users take it: the packaged crates build the example worker outside
# the workspace.
say "the packaged swarm-protocol and swarm-worker, built outside the workspace (scripts/check-packages.sh)"
scripts/check-packages.sh || status=$?
mark "worker crates: packaged, built outside the workspace"

# The Go worker's example (worker-go/), which the end-to-end scenarios run beside the Rust and
# Python workers.
say "the Go worker's example (scripts/go-worker.sh build)"
go_worker_ok=1
if SWARM_GO_WORKER="$(scripts/go-worker.sh build)"; then
    export SWARM_GO_WORKER
else
    go_worker_ok=0
    status=1
    say "the Go worker's example failed to build" >&2
fi
mark "Go worker: build"

# The operator and worker images, from the binaries just compiled: tests/integration/images.rs
# checks them against the Dockerfile, and the real-cluster tier runs them on the real node.
images="$(mktemp -d "${TMPDIR:-/tmp}/swarm-images.XXXXXX")"
say "building the images without a container engine (scripts/build-images.sh --profile dev --check)"
if scripts/build-images.sh --profile dev --tag dev --out "${images}" --check >"${images}/built.tsv"; then
    export SWARM_IMAGE_ARCHIVES="${images}"
else
    say "building the images failed" >&2
    status=1
fi
mark "images: build from the test profile's binaries"

# --no-fail-fast: one failing test binary must not hide the results of the others. The
# end-to-end scenarios on kube-sim spend most of their time waiting on the simulation's clock,
# so SWARM_E2E_PARALLEL of them run at once (335 s at 2, the cores, 128 s at 6); every other
# test binary takes the same bound.
say "cargo test --workspace --no-fail-fast${*:+ $*} (${SWARM_E2E_PARALLEL:-6} tests of a binary at a time)"
RUST_TEST_THREADS="${RUST_TEST_THREADS:-${SWARM_E2E_PARALLEL:-6}}" \
    cargo test --workspace --no-fail-fast "$@" || status=$?
say "kube-sim tier finished with exit code ${status}"
mark "kube-sim tier: tests"

# The Go worker's own tests, those that speak to an API server on kube-sim (the real-cluster
# tier runs them again against kube-apiserver), and the Python worker's self-test, which runs
# it with the official client only against the kube-sim binary the tier above built: both
# mostly wait on their simulations, so they run side by side; the Go tests' output follows.
say "the Go worker's tests on kube-sim (scripts/go-worker.sh test), beside the Python worker's self-test"
go_tests_log="$(mktemp "${TMPDIR:-/tmp}/swarm-go-tests.XXXXXX")"
go_tests_pid=""
if ((go_worker_ok)); then
    KUBE_SIM="${CARGO_TARGET_DIR:-${repo_root}/target}/debug/kube-sim" SWARM_WORKER_GO_REQUIRE_CLUSTER=1 \
        scripts/go-worker.sh test -count=1 >"${go_tests_log}" 2>&1 &
    go_tests_pid=$!
fi
say "the Python protocol worker (examples/python-worker)"
if ((python_ok)); then
    "${SWARM_PYTHON_WORKER}" -m unittest discover -s examples/python-worker || status=$?
else
    status=1
fi
if [[ -n "${go_tests_pid}" ]]; then
    wait "${go_tests_pid}" || status=$?
    cat "${go_tests_log}"
fi
mark "Python worker: self-test; Go worker: tests on kube-sim"

# The licences of what the Go worker module and the Python worker bring to their users, checked
# and listed beside them (deny.toml does the same for the Rust crates).
say "the Go and Python workers' dependencies' licences (scripts/check-dependency-licenses.sh)"
if ((python_ok)); then
    scripts/check-dependency-licenses.sh "${SWARM_PYTHON_WORKER}" || status=$?
fi
mark "Go and Python dependencies' licences"

if ((real_tier)); then
    go_status=0
    wait "${go_build_pid}" || go_status=$?
    go_seconds="$(sed -n 's/^go build finished in \([0-9]*\) s$/\1/p' "${go_log}")"
    mark "control plane build: what was left of it after the kube-sim tier"
    if ((go_status != 0)); then
        cat "${go_log}" >&2
        say "building the control plane failed" >&2
        status=${go_status}
    fi

    cluster_dir="$(mktemp -d "${TMPDIR:-/tmp}/swarm-real-cluster.XXXXXX")"
    trap 'scripts/real-cluster.sh down "${cluster_dir}" || true' EXIT
    real_status=0
    if ((go_status == 0)) && scripts/real-cluster.sh up "${cluster_dir}"; then
        mark "real cluster: start (control plane, kwok nodes, the real node)"
        while IFS=$'\t' read -r image archive; do
            if scripts/real-cluster.sh load "${cluster_dir}" "${image}" "${archive}"; then
                case "${image}" in
                swarm-operator:*) export SWARM_E2E_OPERATOR_IMAGE="${image}" ;;
                swarm-worker:*) export SWARM_E2E_WORKER_IMAGE="${image}" ;;
                swarm-python-worker:*) export SWARM_E2E_PYTHON_WORKER_IMAGE="${image}" ;;
                swarm-go-worker:*) export SWARM_E2E_GO_WORKER_IMAGE="${image}" ;;
                esac
            else
                real_status=1
            fi
        done <"${images}/built.tsv"
        mark "images: load into the real node"
        # The release scenario's tools (built in the background above): helm, crane for its
        # registry, kustomize to pin deploy/ to the pushed digest.
        SWARM_HELM="$(scripts/install-helm.sh)" && export SWARM_HELM
        SWARM_CRANE="$(scripts/install-crane.sh)" && export SWARM_CRANE
        SWARM_KUSTOMIZE="$(scripts/install-kustomize.sh)" && export SWARM_KUSTOMIZE
        say "the Go worker's tests on kube-apiserver (scripts/go-worker.sh test)"
        if ((go_worker_ok)); then
            SWARM_WORKER_GO_KUBECONFIG="${cluster_dir}/kubeconfig" SWARM_WORKER_GO_REQUIRE_CLUSTER=1 \
                scripts/go-worker.sh test -count=1 || real_status=$?
        fi
        mark "Go worker: tests on the real control plane"
        export SWARM_E2E_KUBECONFIG="${cluster_dir}/kubeconfig" SWARM_E2E_TIMINGS="${scenario_timings}"
        # --workspace: the first tier's feature set, so nothing is compiled again. The scenarios
        # that need the cluster to themselves run first, one at a time holding it (the harness's
        # lock); on two test threads, so the release scenario compiles its releases, which needs
        # no cluster, while the others hold it. Then the others side by side, each in its own
        # namespace with its own operator.
        say "the whole-cluster scenarios on the real control plane, one at a time"
        cargo test --workspace --locked --test e2e --no-fail-fast -- \
            scenarios::whole_cluster:: --test-threads=2 || real_status=$?
        mark "real-cluster tier: whole-cluster scenarios, one at a time"
        say "the other scenarios on the real control plane, ${SWARM_E2E_PARALLEL:-6} at a time"
        cargo test --workspace --locked --test e2e --no-fail-fast -- \
            --skip scenarios::whole_cluster:: --test-threads="${SWARM_E2E_PARALLEL:-6}" || real_status=$?
        mark "real-cluster tier: other scenarios, ${SWARM_E2E_PARALLEL:-6} at a time"
        unset SWARM_E2E_KUBECONFIG SWARM_E2E_TIMINGS SWARM_E2E_OPERATOR_IMAGE SWARM_E2E_WORKER_IMAGE \
            SWARM_E2E_PYTHON_WORKER_IMAGE SWARM_E2E_GO_WORKER_IMAGE SWARM_HELM SWARM_CRANE SWARM_KUSTOMIZE
    elif ((go_status == 0)); then
        real_status=1
        say "the real control plane did not start (logs in ${cluster_dir}/logs)" >&2
    fi
    say "real-cluster tier finished with exit code ${real_status}"
    ((real_status == 0)) || status=${real_status}
    scripts/real-cluster.sh down "${cluster_dir}" || true
    # The real node runs as root on this machine: its mounts, cgroups, interfaces, nftables
    # rules, processes and kernel settings must all be gone.
    scripts/real-cluster.sh check-clean "${cluster_dir}" || status=1
    mark "real cluster: stop, and check nothing is left"

    # The fault soak on a control plane of its own: a fixed seed, so a failure replays.
    soak_status=0
    say "scripts/soak.sh --minutes ${SWARM_SOAK_MINUTES:-3} --seed ${SWARM_SOAK_SEED:-1}"
    scripts/soak.sh --minutes "${SWARM_SOAK_MINUTES:-3}" --seed "${SWARM_SOAK_SEED:-1}" || soak_status=$?
    say "fault soak finished with exit code ${soak_status}"
    ((soak_status == 0)) || status=${soak_status}
    mark "fault soak (${SWARM_SOAK_MINUTES:-3} minutes, seed ${SWARM_SOAK_SEED:-1})"
fi
checks_status=0
wait "${checks_pid}" || checks_status=$?
cat "${checks_log}"
if ((checks_status != 0)); then
    say "cargo deny or the Go worker's lints failed (their output is above)" >&2
    status=${checks_status}
fi
mark "in the background: cargo deny, Go lints, the fuzz targets' build (what was left of it)"

# Bounded runs of the Go worker's fuzz targets (its readers of config.yml and index.yml); the
# Rust property tests and the Python worker's Hypothesis tests ran with their suites above.
say "fuzzing the Go worker's readers, ${SWARM_FUZZ_SECONDS:-20} s a target (scripts/go-worker.sh fuzz)"
if ((go_worker_ok)); then
    scripts/go-worker.sh fuzz "${SWARM_FUZZ_SECONDS:-20}" || status=$?
fi
mark "Go worker: fuzz targets"

report
say "finished in $((SECONDS - run_start)) s with exit code ${status}"
exit "${status}"
