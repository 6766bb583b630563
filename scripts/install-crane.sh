#!/usr/bin/env bash
# Builds crane once, from the Go module pinned in hack/crane/go.mod, and prints its path.
#
#   scripts/install-crane.sh
#
# scripts/release.sh pushes the images with it and reads back their digests; `crane registry
# serve` is a registry to try a release against. It is built as scripts/install-helm.sh builds
# helm (scripts/lib/go-build.sh, static: CGO_ENABLED=0), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/crane-<version>; running it again is cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
# `crane version` reports the pinned version, as crane's releases set it.
install_go_tool crane github.com/google/go-containerregistry \
    "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version={version}" \
    github.com/google/go-containerregistry/cmd/crane
