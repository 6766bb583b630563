#!/usr/bin/env bash
# Installs the pinned Python packages of examples/python-worker into a virtualenv at
# <repo>/.tools/python-worker, then the worker itself from the wheel it builds into
# <repo>/.tools/python-worker-dist, and prints the path of the virtualenv's interpreter.
#
# The pins are examples/python-worker/requirements.txt, the whole dependency closure,
# requirements-test.txt, what its tests add, and requirements-build.txt, the build backend;
# installed with --no-deps so that nothing unpinned comes in. The wheel (pyproject.toml) is
# built with that backend and no build isolation, so it needs no index, and installed with
# --no-deps: `pip check` then holds the pins to the ranges it declares. The tests run the
# installed package, as a user would, not the source. Running the script again is cheap: it
# reuses a virtualenv built from the same requirements files, and a wheel built from the same
# sources.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
project="${repo_root}/examples/python-worker"
requirements="${project}/requirements.txt"
test_requirements="${project}/requirements-test.txt"
build_requirements="${project}/requirements-build.txt"
venv_dir="${repo_root}/.tools/python-worker"
wheel_dir="${repo_root}/.tools/python-worker-dist"
python="${venv_dir}/bin/python"
# Hold the checksums of the requirements the virtualenv was built from and of the sources of
# the wheel installed in it.
stamp="${venv_dir}/requirements.sha256"
package_stamp="${venv_dir}/package.sha256"
pip=(env PIP_ROOT_USER_ACTION=ignore "${python}" -m pip --disable-pip-version-check --no-input)
# -I: the installed package, never a swarm_worker in the current directory.
imports=(-I -c 'import kubernetes, yaml, hypothesis, swarm_worker')

wanted="$(cat "${requirements}" "${test_requirements}" "${build_requirements}" |
    sha256sum | cut -d ' ' -f 1)"
package="$(cd "${project}" &&
    find pyproject.toml swarm_worker -type f ! -path '*/__pycache__/*' -print0 |
    sort -z | xargs -0 sha256sum | sha256sum | cut -d ' ' -f 1)"
if [[ -x "${python}" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" &&
    -f "${package_stamp}" && "$(cat "${package_stamp}")" == "${package}" ]] &&
    "${python}" "${imports[@]}" 2>/dev/null; then
    echo "${python}"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 is required"

if ! [[ -x "${python}" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" ]]; then
    # A fresh virtualenv, so no package of an earlier pin set is left behind.
    rm -rf "${venv_dir}"
    python3 -m venv "${venv_dir}"
    "${pip[@]}" install --quiet --no-deps --requirement "${requirements}" \
        --requirement "${test_requirements}" --requirement "${build_requirements}" >&2
    echo "${wanted}" >"${stamp}"
fi

# The wheel, its zip timestamps the last commit's (as scripts/build-images.sh's files; outside a
# checkout 1980, zip's earliest) so that the same sources give the same bytes.
rm -rf "${wheel_dir}"
epoch="$(git -C "${repo_root}" log -1 --format=%ct 2>/dev/null || echo 315532800)"
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-${epoch}}" "${pip[@]}" wheel --quiet --no-deps \
    --no-build-isolation --wheel-dir "${wheel_dir}" "${project}" >&2 ||
    die "cannot build the wheel of ${project}"
wheels=("${wheel_dir}"/*.whl)
((${#wheels[@]} == 1)) || die "${wheel_dir}: not one wheel: ${wheels[*]}"
"${pip[@]}" install --quiet --no-deps --no-index --force-reinstall "${wheels[0]}" >&2
if ! problems="$("${pip[@]}" check)"; then
    echo "${problems}" >&2
    die "the requirements files do not pin every dependency, or pin one outside the range" \
        "pyproject.toml declares"
fi
"${python}" "${imports[@]}"
echo "${package}" >"${package_stamp}"
say "installed ${wheels[0]#"${repo_root}/"}"
echo "${python}"
