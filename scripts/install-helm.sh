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
# `helm version` reports the pinned version (helm's Makefile sets it the same way for a tag).
install_go_tool helm helm.sh/helm/v4 \
    "-s -w -X helm.sh/helm/v4/internal/version.version={version} -X helm.sh/helm/v4/internal/version.metadata=" \
    helm.sh/helm/v4/cmd/helm
