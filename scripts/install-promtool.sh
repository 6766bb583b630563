#!/usr/bin/env bash
# Installs the pinned promtool used by the monitoring tests into <repo>/.tools and prints its
# path.
#
# promtool comes from Debian's `prometheus` package: the .deb is downloaded (no root needed,
# nothing is installed system-wide or started) and only its promtool is extracted. Running
# the script again is cheap: it reuses an installed binary of the pinned version.
set -euo pipefail

PROMETHEUS_DEB_VERSION="2.42.0+ds-5+deb12u1"
PROMTOOL_WANTED="2.42.0+ds"

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/debian.sh
source "${repo_root}/scripts/lib/debian.sh"
installed_version() {
    # "promtool, version 2.42.0+ds (branch: ...)"
    "$1" --version 2>/dev/null | sed -n 's/^promtool, version \([^ ]*\).*/\1/p' || true
}

debian_install_tool promtool "prometheus=${PROMETHEUS_DEB_VERSION}" "${PROMTOOL_WANTED}" installed_version
