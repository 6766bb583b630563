#!/usr/bin/env bash
# Builds kustomize once, from the Go module pinned in hack/kustomize/go.mod, and prints its path.
#
#   scripts/install-kustomize.sh
#
# The end-to-end scenario that installs deploy/ at an image digest runs it (as SWARM_KUSTOMIZE,
# which scripts/test.sh sets from this script): `kustomize edit set image` points the operator's
# image at the digest pushed to a registry before the tree is installed. It is built as
# scripts/install-crane.sh builds crane (scripts/lib/go-build.sh, static: CGO_ENABLED=0), into
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/kustomize-<version>; running it again is cheap.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"
# `kustomize version` reports the pinned version, stamped as kustomize's releases stamp it
# ("kustomize/<version>"); their build date is left out, so the binary does not depend on when
# it was built. The package is the module itself, whose binary is named without its /v5.
install_go_tool kustomize sigs.k8s.io/kustomize/kustomize/v5 \
    "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/{version}" \
    sigs.k8s.io/kustomize/kustomize/v5 kustomize
