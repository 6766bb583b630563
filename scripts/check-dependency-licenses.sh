#!/usr/bin/env bash
# Lists the licences of what the Go worker module and the Python worker bring into a user's
# build or image, checks them against the same allow list as deny.toml's for the Rust crates,
# and checks the lists kept beside them are current:
#
#   scripts/check-dependency-licenses.sh [--update] <python>
#
# - worker-go/dependency-licenses.tsv: every module the library's and its example's packages
#   import (go list -deps, tests excluded), licence named by google/licensecheck
#   (hack/licenses, pinned and cached like the other Go tools);
# - examples/python-worker/dependency-licenses.tsv: every package of its requirements.txt (the
#   image's), licence from the package's own metadata, as installed for <python>
#   (scripts/install-python-worker.sh prints it).
# --update rewrites the two lists instead of comparing them.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"

update=0
if [[ "${1:-}" == "--update" ]]; then
    update=1
    shift
fi
[[ $# -eq 1 ]] || die "usage: $0 [--update] <python of the Python worker's environment>"
python="$1"

# deny.toml's allow list, and what the Python packages add: PSF-2.0 (typing_extensions) and
# MPL-2.0 (certifi's CA bundle, a file-level copyleft on files we ship unchanged).
allow_rust="$(python3 -c 'import tomllib,sys; print(",".join(tomllib.load(open(sys.argv[1],"rb"))["licenses"]["allow"]))' "${repo_root}/deny.toml")"
allow="${allow_rust},PSF-2.0,MPL-2.0"

# Compares or rewrites list $1 with the text on stdin.
keep() {
    local list="$1" text
    text="$(cat)"
    if ((update)); then
        printf '%s\n' "${text}" >"${list}"
        say "wrote ${list#"${repo_root}/"}"
    elif ! diff -u "${list}" <(printf '%s\n' "${text}") >&2; then
        die "${list#"${repo_root}/"} is not current (the diff is above): run $0 --update ${python}"
    fi
}

go_licences() {
    # The tool is rebuilt when licensecheck's pinned version or its own source changes.
    local out
    out="${cache_root}/licenses-$(pinned licenses github.com/google/licensecheck)-$(sha256sum "${repo_root}/hack/licenses/main.go" | cut -c1-12)"
    go_build licenses "${out}" "-s -w" -- .
    (
        cd "${repo_root}/worker-go"
        GOMODCACHE="${cache_root}/gomod" GOCACHE="${cache_root}/gocache" \
            GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local \
            go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}} {{.Dir}}{{end}}{{end}}' ./...
    ) | "${out}/licenses" -allow "${allow}"
}

python_licences() {
    "${python}" "${repo_root}/hack/licenses/python_licenses.py" --allow "${allow}" \
        "${repo_root}/examples/python-worker/requirements.txt"
}

go_list="$(go_licences)" || die "a Go dependency's licence is not allowed or not found (above)"
keep "${repo_root}/worker-go/dependency-licenses.tsv" <<<"${go_list}"
python_list="$(python_licences)" || die "a Python dependency's licence is not allowed or not found (above)"
keep "${repo_root}/examples/python-worker/dependency-licenses.tsv" <<<"${python_list}"
say "Go: $(wc -l <<<"${go_list}") modules, Python: $(wc -l <<<"${python_list}") packages, every licence allowed"
