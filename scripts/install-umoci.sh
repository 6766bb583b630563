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
install_go_tool umoci github.com/opencontainers/umoci \
    "-s -w" \
    github.com/opencontainers/umoci/cmd/umoci
