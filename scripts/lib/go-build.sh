# shellcheck shell=bash
# Sourced by scripts/real-cluster.sh (through scripts/lib/real-node.sh too), scripts/go-worker.sh
# and scripts/install-{crane,helm,helm-docs,kustomize,syft,toxiproxy,umoci}.sh: builds Go
# programs from the wrapper modules in hack/, pinned and cached.
#
#   go_build <module> <out> <ldflags> [go build flags...] -- <packages...>
#                       builds the packages of wrapper module hack/<module> into directory <out>
#                       (each binary named after its package's directory), unless a completed
#                       build is there
#   install_go_tool <name> <module> <ldflags> <package> [<binary>]
#                       a pinned tool: builds <package> of <module>, at the version
#                       hack/<name>/go.mod pins, into ${cache_root}/<name>-<version> (go_build)
#                       and prints the path of <binary> there (default: the package's last path
#                       element); in <ldflags>, {version} is that version (v1.2.3) and {number}
#                       the same without its v
#   build_lock <fd> <lock file> <what>
#                       takes the lock on <fd> (open on <lock file>), waiting at most
#                       build_lock_seconds for the build that holds it
#
# Every build shares one module cache and one build cache under ${cache_root}, so packages
# common to the control plane's programs and toxiproxy compile once, and a completed build (its
# `.built` marker) is never repeated: a change to this repository rebuilds nothing. go.sum must
# already list every module (-mod=readonly) and the local Go toolchain is used as it is
# (GOTOOLCHAIN=local).
#
# Globals it reads: repo_root and cache_root (common.sh); build_lock_seconds, how long a second
# build waits for the first one's lock (SWARM_BUILD_LOCK_SECONDS, default an hour: a cold
# machine builds the control plane in several minutes).

[[ -n "${swarm_lib_go_build:-}" ]] && return 0
swarm_lib_go_build=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build_lock_seconds="${SWARM_BUILD_LOCK_SECONDS:-3600}"

build_lock() {
    local fd="$1" file="$2" what="$3"
    flock -w "${build_lock_seconds}" "${fd}" ||
        die "waited ${build_lock_seconds} s for another build of ${what} to finish (lock ${file}, held by: $(fuser "${file}" 2>/dev/null || echo unknown))"
}

go_build() {
    local module="$1" out="$2" ldflags="$3"
    shift 3
    local flags=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        flags+=("$1")
        shift
    done
    shift
    [[ -f "${out}/.built" ]] && return 0
    # Two scripts may want the same build at once (scripts/test.sh builds the images while the
    # cluster's programs build in the background): the second waits for the first's.
    mkdir -p "${cache_root}"
    local lock
    exec {lock}>"${out}.lock"
    build_lock "${lock}" "${out}.lock" "${module}"
    if [[ -f "${out}/.built" ]]; then
        exec {lock}>&-
        return 0
    fi
    command -v go >/dev/null 2>&1 || die "Go is needed to build ${module} (none on PATH)"
    say "building $* (once per version; a cold machine pays several minutes)"
    local start=${SECONDS} log="${cache_root}/build-${module}.log"
    mkdir -p "${cache_root}"
    rm -rf "${out}.partial"
    mkdir -p "${out}.partial"
    if ! (
        cd "${repo_root}/hack/${module}" &&
            GOMODCACHE="${cache_root}/gomod" GOCACHE="${cache_root}/gocache" \
                GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0 \
                go build -trimpath -pgo=off "${flags[@]}" -ldflags "${ldflags}" \
                -o "${out}.partial/" "$@"
    ) >"${log}" 2>&1; then
        cat "${log}" >&2
        die "building ${module} failed (the exact error is above; log: ${log})"
    fi
    touch "${out}.partial/.built"
    rm -rf "${out}"
    mv "${out}.partial" "${out}"
    say "built ${module} in $((SECONDS - start)) s"
    exec {lock}>&-
}

install_go_tool() {
    local name="$1" module="$2" ldflags="$3" package="$4" version out binary
    version="$(pinned "${name}" "${module}")"
    [[ -n "${version}" ]] || die "cannot read the pinned ${module} version from hack/${name}/go.mod"
    out="${cache_root}/${name}-${version}"
    binary="${out}/${5:-${package##*/}}"
    ldflags="${ldflags//\{version\}/${version}}"
    go_build "${name}" "${out}" "${ldflags//\{number\}/${version#v}}" -- "${package}"
    [[ -x "${binary}" ]] || die "${binary} is missing; remove ${out} and run again"
    echo "${binary}"
}
