#!/usr/bin/env bash
# Installs the pinned shellcheck that .ci/run checks the shell scripts with into <repo>/.tools
# and prints its path.
#
#   "$(scripts/install-shellcheck.sh)" -x scripts/real-cluster.sh
#
# The binary comes from Debian bookworm's `shellcheck` package: the .deb is downloaded (no root
# needed, nothing is installed system-wide) and only its binary is extracted, as
# scripts/install-promtool.sh does with promtool. Running the script again is cheap: it reuses
# an installed binary of the pinned version.
set -euo pipefail

SHELLCHECK_DEB_VERSION="0.9.0-1"
SHELLCHECK_WANTED="0.9.0"

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/debian.sh
source "${repo_root}/scripts/lib/debian.sh"
installed_version() {
    # "ShellCheck - shell script analysis tool\nversion: 0.9.0\n..."
    "$1" --version 2>/dev/null | sed -n 's/^version: *//p' || true
}

debian_install_tool shellcheck "shellcheck=${SHELLCHECK_DEB_VERSION}" "${SHELLCHECK_WANTED}" installed_version
