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

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
module=github.com/Shopify/toxiproxy/v2
version="$(pinned toxiproxy "${module}")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/toxiproxy/go.mod"
out="${cache_root}/toxiproxy-${version}"
binary="${out}/toxiproxy-server"

go_build toxiproxy "${out}" "-s -w" -- "${module}/cmd/server"
# go names the binary after its package directory.
if [[ -f "${out}/server" && ! -e "${binary}" ]]; then
    mv "${out}/server" "${binary}"
fi
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
