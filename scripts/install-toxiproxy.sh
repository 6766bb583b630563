#!/usr/bin/env bash
# Builds toxiproxy-server once, from the Go module pinned in hack/toxiproxy/go.mod, and prints
# its path.
#
# scripts/soak.sh puts a toxiproxy between each operator replica and the API server, so it can
# slow, reset or blackhole one replica's connection without touching the other's. It is built
# exactly as scripts/real-cluster.sh builds the control plane: into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/toxiproxy-<version>, with the module and build
# caches there, go.sum as the only source of truth (-mod=readonly) and the local Go toolchain.
# Running it again is cheap: a completed build (its `.built` marker) is reused.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_root="${SWARM_CLUSTER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/swarm-operator}"
module=github.com/Shopify/toxiproxy/v2

say() { echo "install-toxiproxy.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

version="$(awk -v m="${module}" '$1 == m && $2 ~ /^v/ { print $2; exit }
    $1 == "require" && $2 == m && $3 ~ /^v/ { print $3; exit }' "${repo_root}/hack/toxiproxy/go.mod")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/toxiproxy/go.mod"
out="${cache_root}/toxiproxy-${version}"
binary="${out}/toxiproxy-server"

if [[ ! -f "${out}/.built" ]]; then
    command -v go >/dev/null 2>&1 || die "Go is needed to build toxiproxy (none on PATH)"
    say "building toxiproxy ${version} (once per version)"
    start=${SECONDS}
    log="${cache_root}/build-toxiproxy.log"
    mkdir -p "${cache_root}"
    rm -rf "${out}.partial"
    mkdir -p "${out}.partial"
    if ! (
        cd "${repo_root}/hack/toxiproxy" &&
            GOMODCACHE="${cache_root}/gomod" GOCACHE="${cache_root}/gocache" \
                GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
                go build -trimpath -pgo=off -ldflags "-s -w" \
                -o "${out}.partial/toxiproxy-server" "${module}/cmd/server"
    ) >"${log}" 2>&1; then
        cat "${log}" >&2
        die "building toxiproxy failed (the exact error is above; log: ${log})"
    fi
    touch "${out}.partial/.built"
    rm -rf "${out}"
    mv "${out}.partial" "${out}"
    say "built toxiproxy ${version} in $((SECONDS - start)) s"
fi
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
