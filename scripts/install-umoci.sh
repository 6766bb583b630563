#!/usr/bin/env bash
# Builds umoci once, from the Go module pinned in hack/umoci/go.mod, and prints its path.
#
#   scripts/install-umoci.sh
#
# scripts/build-images.sh writes the operator's and the example worker's OCI images with it, so
# no container engine and no registry is needed. It is built as scripts/install-toxiproxy.sh
# builds toxiproxy (scripts/lib/go-build.sh, static: CGO_ENABLED=0), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/umoci-<version>; running it again is cheap.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_root="${SWARM_CLUSTER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/swarm-operator}"
module=github.com/opencontainers/umoci

say() { echo "install-umoci.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

version="$(awk -v m="${module}" '$1 == m && $2 ~ /^v/ { print $2; exit }
    $1 == "require" && $2 == m && $3 ~ /^v/ { print $3; exit }' "${repo_root}/hack/umoci/go.mod")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/umoci/go.mod"
out="${cache_root}/umoci-${version}"
binary="${out}/umoci"

# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
go_build umoci "${out}" "-s -w" -- "${module}/cmd/umoci"
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
