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

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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

for tool in apt-get dpkg-deb; do
    if ! command -v "${tool}" >/dev/null 2>&1; then
        echo "install-promtool.sh: ${tool} not found; install promtool ${PROMTOOL_WANTED} and set PROMTOOL" >&2
        exit 1
    fi
done

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
download() {
    (cd "${work}" && apt-get download "prometheus=${PROMETHEUS_DEB_VERSION}") >&2
}
if ! download; then
    if [[ "$(id -u)" == 0 ]]; then
        echo "install-promtool.sh: refreshing the package lists and trying again" >&2
        apt-get update >&2
        download
    else
        echo "install-promtool.sh: apt-get download failed; run 'apt-get update' as root, or set PROMTOOL" >&2
        exit 1
    fi
fi
dpkg-deb -x "${work}"/prometheus_*.deb "${work}/root"
mkdir -p "${install_dir}" "${bin_dir}"
cp "${work}/root/usr/bin/promtool" "${install_dir}/promtool"
ln -sfn "../promtool-${PROMETHEUS_DEB_VERSION}/promtool" "${target}"

got="$(installed_version "${target}")"
if [[ "${got}" != "${PROMTOOL_WANTED}" ]]; then
    echo "install-promtool.sh: installed promtool reports version '${got}', expected ${PROMTOOL_WANTED}" >&2
    exit 1
fi
echo "${target}"
