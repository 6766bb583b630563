#!/usr/bin/env bash
# Builds helm once, from the Go module pinned in hack/helm/go.mod, and prints its path.
#
#   scripts/install-helm.sh
#
# tests/integration/helm_chart.rs renders and lints charts/swarm-operator with it (unless
# SWARM_HELM names a helm binary). It is built as scripts/install-umoci.sh builds umoci
# (scripts/lib/go-build.sh, static: CGO_ENABLED=0), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/helm-<version>; running it again is cheap.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_root="${SWARM_CLUSTER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/swarm-operator}"
module=helm.sh/helm/v4

say() { echo "install-helm.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

version="$(awk -v m="${module}" '$1 == m && $2 ~ /^v/ { print $2; exit }
    $1 == "require" && $2 == m && $3 ~ /^v/ { print $3; exit }' "${repo_root}/hack/helm/go.mod")"
[[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/helm/go.mod"
out="${cache_root}/helm-${version}"
binary="${out}/helm"

# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
# `helm version` reports the pinned version (helm's Makefile sets it the same way for a tag).
go_build helm "${out}" "-s -w -X ${module}/internal/version.version=${version} -X ${module}/internal/version.metadata=" \
    -- "${module}/cmd/helm"
[[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
echo "${binary}"
