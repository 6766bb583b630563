#!/usr/bin/env bash
# Builds helm once, from the Go module pinned in hack/helm/go.mod, and prints its path.
#
#   scripts/install-helm.sh
#
# tests/integration/helm_chart/ renders and lints charts/swarm-operator with it (unless
# SWARM_HELM names a helm binary). It is built as scripts/install-umoci.sh builds umoci
# (scripts/lib/go-build.sh, static: CGO_ENABLED=0), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/helm-<version>; running it again is cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
module=helm.sh/helm/v4
version="$(pinned helm "${module}")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/helm/go.mod"
out="${cache_root}/helm-${version}"
binary="${out}/helm"

# `helm version` reports the pinned version (helm's Makefile sets it the same way for a tag).
go_build helm "${out}" "-s -w -X ${module}/internal/version.version=${version} -X ${module}/internal/version.metadata=" \
    -- "${module}/cmd/helm"
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
