#!/usr/bin/env bash
# Installs the pinned Python packages of examples/python-worker into a virtualenv at
# <repo>/.tools/python-worker and prints the path of its interpreter.
#
# The pins are examples/python-worker/requirements.txt, the whole dependency closure, and
# requirements-test.txt, what its tests add; installed with --no-deps so that nothing unpinned
# comes in. Running the script again is cheap: it reuses a virtualenv built from the same
# requirements files.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
requirements="${repo_root}/examples/python-worker/requirements.txt"
test_requirements="${repo_root}/examples/python-worker/requirements-test.txt"
venv_dir="${repo_root}/.tools/python-worker"
python="${venv_dir}/bin/python"
# Holds the checksum of the requirements the virtualenv was built from.
stamp="${venv_dir}/requirements.sha256"

wanted="$(cat "${requirements}" "${test_requirements}" | sha256sum | cut -d ' ' -f 1)"
if [[ -x "${python}" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" ]] &&
    "${python}" -c 'import kubernetes, yaml, hypothesis' 2>/dev/null; then
    echo "${python}"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is required"

# A fresh virtualenv, so no package of an earlier pin set is left behind.
rm -rf "${venv_dir}"
python3 -m venv "${venv_dir}"
PIP_ROOT_USER_ACTION=ignore "${python}" -m pip install --quiet --disable-pip-version-check \
    --no-input --no-deps --requirement "${requirements}" --requirement "${test_requirements}" >&2
if ! problems="$("${python}" -m pip check --disable-pip-version-check)"; then
    echo "${problems}" >&2
    die "${requirements} and ${test_requirements} do not pin every dependency"
fi
"${python}" -c 'import kubernetes, yaml, hypothesis'
echo "${wanted}" >"${stamp}"
echo "${python}"
