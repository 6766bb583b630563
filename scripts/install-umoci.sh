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

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
module=github.com/opencontainers/umoci
version="$(pinned umoci "${module}")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/umoci/go.mod"
out="${cache_root}/umoci-${version}"
binary="${out}/umoci"

go_build umoci "${out}" "-s -w" -- "${module}/cmd/umoci"
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
