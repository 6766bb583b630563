#!/usr/bin/env bash
# Builds syft once, from the Go module pinned in hack/syft/go.mod, and prints its path.
#
#   scripts/install-syft.sh
#
# scripts/release.sh runs it to write each image's SBOM (SPDX JSON) beside the image's OCI
# archive. It is built as scripts/install-helm.sh builds helm (scripts/lib/go-build.sh, static:
# CGO_ENABLED=0), into ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/syft-<version>; the first
# build is long (syft links every cataloguer it has), running it again is cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
# `syft version` and the SBOMs' creator field report the pinned version, as syft's releases set it.
install_go_tool syft github.com/anchore/syft \
    "-s -w -X main.version={number}" \
    github.com/anchore/syft/cmd/syft
