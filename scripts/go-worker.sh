#!/usr/bin/env bash
# Builds, checks and tests the Go worker module (worker-go/), with the pinned modules of its
# go.mod and the same module and build caches as the control plane's Go programs.
#
#   scripts/go-worker.sh build [OUT]    the example worker (worker-go/examples/swarm-worker),
#                                       static (CGO_ENABLED=0), into OUT (default:
#                                       <target dir>/go/swarm-go-worker); prints its path
#   scripts/go-worker.sh check          gofmt, go vet and staticcheck (pinned in
#                                       hack/staticcheck/go.mod, built once) on the module
#   scripts/go-worker.sh test [ARGS]    go test ./... ARGS; its tests against an API server
#                                       run on kube-sim (KUBE_SIM) or the one
#                                       SWARM_WORKER_GO_KUBECONFIG names
#   scripts/go-worker.sh fuzz [SECONDS] each fuzz target (func FuzzXxx) of the module for
#                                       SECONDS (default 20); an input that fails is kept in
#                                       worker-go/testdata/fuzz/, which go test then runs.
#                                       With 1x instead: each target's seed corpus and one input
#                                       more, which builds the fuzzing instrumentation of every
#                                       package into the build cache (minutes on a new machine)
#
# Go's caches live in ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/{gomod,gocache}; a build
# after a change to worker-go/ compiles that module only.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
module_dir="${repo_root}/worker-go"

usage() {
    sed -n '2,/^set -euo pipefail$/{/^#/{s/^# \{0,1\}//;p}}' "${BASH_SOURCE[0]}" >&2
    exit "$1"
}

command -v go >/dev/null 2>&1 || die "Go is needed for the Go worker (none on PATH)"
# -mod=readonly: go.sum must already list every module, as in CI. One set of flags for every
# command (static, -trimpath), so vet, test and build share their compiled packages.
export GOMODCACHE="${cache_root}/gomod" GOCACHE="${cache_root}/gocache" \
    GOFLAGS="-mod=readonly -buildvcs=false -trimpath" GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "${cache_root}"

build() {
    local out="${1:-${CARGO_TARGET_DIR:-${repo_root}/target}/go/swarm-go-worker}"
    mkdir -p "$(dirname "${out}")"
    (cd "${module_dir}" && go build -ldflags "-s -w" -o "${out}" ./examples/swarm-worker)
    echo "${out}"
}

check() {
    local unformatted staticcheck
    unformatted="$(cd "${module_dir}" && gofmt -l .)"
    [[ -z "${unformatted}" ]] || die "not gofmt-formatted (run gofmt -w): ${unformatted}"
    (cd "${module_dir}" && go vet ./...)
    local version
    version="$(pinned staticcheck honnef.co/go/tools)"
    [[ -n "${version}" ]] || die "cannot read the pinned staticcheck version from hack/staticcheck/go.mod"
    go_build staticcheck "${cache_root}/staticcheck-${version}" "-s -w" -- honnef.co/go/tools/cmd/staticcheck
    staticcheck="${cache_root}/staticcheck-${version}/staticcheck"
    (cd "${module_dir}" && "${staticcheck}" ./...)
    say "gofmt, go vet and staticcheck ${version}: clean"
}

# Targets one at a time: go test fuzzes one target per run.
fuzz() {
    local seconds="${1:-20}" target targets fuzztime
    fuzztime="${seconds}s"
    [[ "${seconds}" == 1x ]] && fuzztime=1x
    cd "${module_dir}"
    mapfile -t targets < <(grep -ho '^func Fuzz[A-Za-z0-9_]*' ./*_test.go | cut -d ' ' -f 2)
    ((${#targets[@]})) || die "no fuzz target in ${module_dir}"
    for target in "${targets[@]}"; do
        say "fuzzing ${target} for ${fuzztime}"
        go test -run '^$' -fuzz="^${target}\$" -fuzztime="${fuzztime}" .
    done
}

case "${1:-}" in
build)
    shift
    build "$@"
    ;;
check) check ;;
test)
    shift
    cd "${module_dir}"
    go test ./... "$@"
    ;;
fuzz)
    shift
    fuzz "$@"
    ;;
-h | --help) usage 0 ;;
*) usage 2 ;;
esac
