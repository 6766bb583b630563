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
tools_dir="${repo_root}/.tools"
install_dir="${tools_dir}/promtool-${PROMETHEUS_DEB_VERSION}"
bin_dir="${tools_dir}/bin"
target="${bin_dir}/promtool"

installed_version() {
    # "promtool, version 2.42.0+ds (branch: ...)"
    "$1" --version 2>/dev/null | sed -n 's/^promtool, version \([^ ]*\).*/\1/p' || true
}

if [[ -x "${target}" && "$(installed_version "${target}")" == "${PROMTOOL_WANTED}" ]]; then
    echo "${target}"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
debian_fetch "${work}" "prometheus=${PROMETHEUS_DEB_VERSION}" ||
    die "cannot fetch Debian's prometheus ${PROMETHEUS_DEB_VERSION}; install promtool ${PROMTOOL_WANTED} and set PROMTOOL"
debian_unpack "${work}/root" "${work}"/prometheus_*.deb
mkdir -p "${install_dir}" "${bin_dir}"
cp "${work}/root/usr/bin/promtool" "${install_dir}/promtool"
ln -sfn "../promtool-${PROMETHEUS_DEB_VERSION}/promtool" "${target}"

got="$(installed_version "${target}")"
[[ "${got}" == "${PROMTOOL_WANTED}" ]] ||
    die "installed promtool reports version '${got}', expected ${PROMTOOL_WANTED}"
echo "${target}"
