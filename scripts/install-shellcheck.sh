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
tools_dir="${repo_root}/.tools"
install_dir="${tools_dir}/shellcheck-${SHELLCHECK_DEB_VERSION}"
bin_dir="${tools_dir}/bin"
target="${bin_dir}/shellcheck"

installed_version() {
    # "ShellCheck - shell script analysis tool\nversion: 0.9.0\n..."
    "$1" --version 2>/dev/null | sed -n 's/^version: *//p' || true
}

if [[ -x "${target}" && "$(installed_version "${target}")" == "${SHELLCHECK_WANTED}" ]]; then
    echo "${target}"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
debian_fetch "${work}" "shellcheck=${SHELLCHECK_DEB_VERSION}" ||
    die "cannot fetch Debian's shellcheck ${SHELLCHECK_DEB_VERSION}; install shellcheck ${SHELLCHECK_WANTED} from elsewhere"
debian_unpack "${work}/root" "${work}"/shellcheck_*.deb
mkdir -p "${install_dir}" "${bin_dir}"
cp "${work}/root/usr/bin/shellcheck" "${install_dir}/shellcheck"
ln -sfn "../shellcheck-${SHELLCHECK_DEB_VERSION}/shellcheck" "${target}"

got="$(installed_version "${target}")"
[[ "${got}" == "${SHELLCHECK_WANTED}" ]] ||
    die "installed shellcheck reports version '${got}', expected ${SHELLCHECK_WANTED}"
echo "${target}"
