#!/usr/bin/env bash
# Builds helm-docs once, from the Go module pinned in hack/helm-docs/go.mod, and prints its path.
#
#   scripts/install-helm-docs.sh
#
# helm-docs writes the table of values of charts/swarm-operator/README.md from values.yaml's
# `# --` comments and README.md.gotmpl; tests/integration/helm_chart/ runs it (unless
# SWARM_HELM_DOCS names a helm-docs binary) and fails when the committed table differs. It is
# built as scripts/install-helm.sh builds helm (scripts/lib/go-build.sh, static: CGO_ENABLED=0),
# into ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/helm-docs-<version>; running it again is
# cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
# `helm-docs --version` reports the pinned version, without its v, as its releases do.
install_go_tool helm-docs github.com/norwoodj/helm-docs \
    "-s -w -X main.version={number}" \
    github.com/norwoodj/helm-docs/cmd/helm-docs
