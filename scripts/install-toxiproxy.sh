#!/usr/bin/env bash
# Builds toxiproxy-server once, from the Go module pinned in hack/toxiproxy/go.mod, and prints
# its path.
#
# scripts/soak.sh puts a toxiproxy between each operator replica and the API server, so it can
# slow, reset or blackhole one replica's connection without touching the other's. It is built
# as scripts/real-cluster.sh builds the control plane (scripts/lib/go-build.sh), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/toxiproxy-<version>; running it again is
# cheap.
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

# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
go_build toxiproxy "${out}" "-s -w" -- "${module}/cmd/server"
# go names the binary after its package directory.
if [[ -f "${out}/server" && ! -e "${binary}" ]]; then
    mv "${out}/server" "${binary}"
fi
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
