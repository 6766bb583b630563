# shellcheck shell=bash
# Sourced by scripts/lib/real-node.sh, scripts/build-images.sh, scripts/install-promtool.sh and
# scripts/install-shellcheck.sh: Debian packages at pinned versions, downloaded with
# `apt-get download` and unpacked with `dpkg-deb -x`, never installed on this machine.
#
#   debian_pins <file>                     the pins of <file> ("<package> <version>" lines, #
#                                          comments), one "<package>=<version>" a line
#   debian_fetch <dest-dir> <package=version>...
#                                          downloads each package's .deb into <dest-dir>; when
#                                          one fails, refreshes the package lists once (as root)
#                                          and tries again; fails naming the package
#   debian_unpack <root> <deb>...          unpacks each .deb into <root>
#
# Globals it reads: none of its own (common.sh's say and die).

[[ -n "${swarm_lib_debian:-}" ]] && return 0
swarm_lib_debian=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

debian_pins() {
    awk '!/^#/ && NF { print $1 "=" $2 }' "$1"
}

debian_fetch() {
    local dest="$1" spec updated=0
    shift
    local tool
    for tool in apt-get dpkg-deb; do
        command -v "${tool}" >/dev/null 2>&1 || {
            say "${tool} is needed to fetch Debian packages (none on PATH)"
            return 1
        }
    done
    mkdir -p "${dest}"
    for spec in "$@"; do
        (cd "${dest}" && apt-get download "${spec}" >/dev/null 2>&1) && continue
        # The package lists may predate the pinned version: refresh them once, then try again,
        # this time showing apt-get's error.
        if ((updated == 0)); then
            updated=1
            if ((EUID == 0)); then
                say "cannot download ${spec}: refreshing the package lists (apt-get update) and trying again"
                apt-get update >/dev/null 2>&1 || say "apt-get update failed"
            else
                say "cannot download ${spec}, and only root can refresh the package lists: run 'apt-get update' as root"
            fi
        fi
        (cd "${dest}" && apt-get download "${spec}" >/dev/null) || {
            say "cannot download the Debian package ${spec}"
            return 1
        }
    done
}

debian_unpack() {
    local root="$1" deb
    shift
    mkdir -p "${root}"
    for deb in "$@"; do
        dpkg-deb -x "${deb}" "${root}" || {
            say "cannot unpack ${deb}"
            return 1
        }
    done
}

# debian_install_tool <tool> <package=version> <wanted> <version_of>: installs /usr/bin/<tool> of
# the pinned Debian package into <repo>/.tools/<tool>-<version>, links .tools/bin/<tool> to it and
# prints that path. An installed binary for which the function <version_of> prints <wanted> is
# reused. Reads repo_root.
debian_install_tool() {
    local tool="$1" pin="$2" wanted="$3" version_of="$4"
    local package="${pin%%=*}" version="${pin#*=}"
    local target="${repo_root}/.tools/bin/${tool}" install_dir="${repo_root}/.tools/${tool}-${version}"
    if [[ -x "${target}" && "$("${version_of}" "${target}")" == "${wanted}" ]]; then
        echo "${target}"
        return 0
    fi
    local work got
    work="$(mktemp -d)"
    debian_fetch "${work}" "${pin}" || {
        rm -rf "${work}"
        die "cannot fetch Debian's ${package} ${version}; install ${tool} ${wanted} from elsewhere"
    }
    debian_unpack "${work}/root" "${work}/${package}"_*.deb
    mkdir -p "${install_dir}" "${repo_root}/.tools/bin"
    cp "${work}/root/usr/bin/${tool}" "${install_dir}/${tool}"
    rm -rf "${work}"
    ln -sfn "../${tool}-${version}/${tool}" "${target}"
    got="$("${version_of}" "${target}")"
    [[ "${got}" == "${wanted}" ]] || die "installed ${tool} reports version '${got}', expected ${wanted}"
    echo "${target}"
}
