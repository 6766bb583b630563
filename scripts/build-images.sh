#!/usr/bin/env bash
# Builds the operator's, the example worker's, the Python and the Go example workers' container images as
# OCI archives, without a container engine or a registry, keeping the Dockerfile's contract
# (binary path, entrypoint, cmd, user 65532:65532, exposed port; no shell; CA certificates;
# /etc/passwd and /etc/group with distroless's `nonroot` 65532).
#
#   scripts/build-images.sh [--profile release|dev] [--tag TAG] [--out DIR] [--check]
#
#   --profile release   (default) the Dockerfile's build: `cargo build --release --locked`
#   --profile dev       the debug binaries; after `cargo test --workspace --no-run` this
#                       compiles only the example's plain binary, no dependency
#   --tag TAG           the images' tag (default: dev)
#   --out DIR           where the archives go (default: <target dir>/images)
#   --check             then unpack each archive (umoci unpack, as root) and run it under chroot
#                       of the read-only root filesystem, as uid 65532, with the image's
#                       environment: each binary's --help; for the Python worker, an import of
#                       its modules, then its entrypoint, which must stop at the missing
#                       POD_NAME, ... (so no cluster is needed)
#
# It writes <out>/swarm-operator.tar, <out>/swarm-worker.tar, <out>/swarm-python-worker.tar and
# <out>/swarm-go-worker.tar, and prints one line "<name>:<tag>\t<archive>" per image on stdout
# (progress, digests and sizes go to stderr). Each archive is an OCI image layout in a tar whose
# index names the image by its tag (org.opencontainers.image.ref.name), as containerd imports it:
#
#   ctr -n k8s.io images import --base-name docker.io/library/swarm-operator <out>/swarm-operator.tar
#
# The binaries are linked with glibc, as the Dockerfile's (built on rust:<version>-bookworm, run
# on distroless/cc-debian12; tests/integration/images/toolchain.rs holds the two builds equal),
# so the image carries the shared libraries `ldd` names and the dynamic loader at the binary's
# interpreter path, as distroless/cc does; the binaries' debug info is stripped. The images are written with umoci
# (scripts/install-umoci.sh builds the pinned one; UMOCI names another). Files, layers and
# configs carry one fixed time, SOURCE_DATE_EPOCH or else the last commit's, so the same
# binaries give the same digests.
#
# Each image says what it holds, as distroless images do, for syft (scripts/release.sh's SBOMs)
# and scanners: a dpkg status entry per Debian package at /var/lib/dpkg/status.d/<package> (for
# the libraries copied from this machine, the entries of the packages dpkg -S names here; dpkg
# is needed) with /etc/os-release naming their release; and in each Rust binary its crates as
# cargo-auditable writes them, a .dep-v0 section (scripts/lib/rust-deps.py, from cargo tree and
# cargo metadata) added by objcopy to the image's copy; docs/images.md says why not
# `cargo auditable build`.
#
# swarm-go-worker is worker-go/examples/swarm-worker, built static (CGO_ENABLED=0) by
# `scripts/go-worker.sh build` from the pinned modules of worker-go/go.mod (Go is needed).
#
# swarm-python-worker runs the package examples/python-worker/swarm_worker (at /app, as
# `python3.11 -m swarm_worker` with PYTHONPATH=/app) with Debian bookworm's python3.11: the
# packages pinned in hack/debian/python-image-packages, fetched with `apt-get download` and
# unpacked with `dpkg-deb -x` (never installed), without documentation
# (each package's copyright stays), test suites, pydoc's topics, venv, and the stdlib modules
# whose libraries are not pinned (sqlite3, crypt, curses, readline, dbm.ndbm, nis). The wheels of
# examples/python-worker/requirements.txt, the whole closure, go into
# /usr/lib/python3/dist-packages with `pip install --no-deps --only-binary=:all:` for CPython 3.11
# on glibc 2.36 (manylinux up to 2_36), without console scripts, kubernetes/aio (the asyncio
# client, 40 MB that swarm_worker never imports) or the kubernetes package's *_test.py; all
# byte code is compiled at build time by the image's interpreter (the root filesystem may be
# read-only: PYTHONDONTWRITEBYTECODE=1). The build fails when
# any shared object in the image needs a library the image lacks. Packages and wheels are
# downloaded once into ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}/python-image-<hash of the
# pins> and python-wheels-<hash of the requirements>; apt-get, dpkg-deb and python3's pip are
# needed.
set -euo pipefail
umask 022

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/debian.sh
source "${repo_root}/scripts/lib/debian.sh"
cd "${repo_root}"

# The globals the functions below read, all set at the top level before the first image:
#   profile, tag, out, check        the command line's settings
#   target_dir, bin_dir             cargo's target directory and the binaries' directory in it
#   ca_bundle                       this machine's CA certificates, copied into every image
#   umoci, rootless                 the umoci binary and its flags for a non-root user
#   epoch, created                  the images' one time (SOURCE_DATE_EPOCH or the last commit's)
#   oci_flags                       umoci config's flags for the OCI annotations and labels
#   work                            the temporary directory of this run (removed at exit)
#   python_pins, python_requirements, python_worker, wheel_platform, python_debs, python_wheels
#                                   the Python worker's pins, files and download caches
# and repo_root and cache_root (scripts/lib/common.sh).
usage() {
    sed -n '2,/^set -euo pipefail$/{/^#/{s/^# \{0,1\}//;p}}' "${BASH_SOURCE[0]}" >&2
    exit "$1"
}

profile=release
tag=dev
out=""
check=0
while [[ $# -gt 0 ]]; do
    case "$1" in
    --profile)
        [[ $# -ge 2 ]] || usage 2
        profile="$2"
        shift 2
        ;;
    --tag)
        [[ $# -ge 2 ]] || usage 2
        tag="$2"
        shift 2
        ;;
    --out)
        [[ $# -ge 2 ]] || usage 2
        out="$2"
        shift 2
        ;;
    --check)
        check=1
        shift
        ;;
    -h | --help) usage 0 ;;
    *)
        say "unknown argument: $1"
        usage 2
        ;;
    esac
done
[[ "${profile}" == release || "${profile}" == dev ]] || die "--profile is release or dev, not ${profile}"
[[ "${tag}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "not a valid image tag: ${tag}"
for tool in cargo rustc go python3 objcopy readelf ldd tar apt-get dpkg dpkg-query dpkg-deb sha256sum \
    $( ((check == 0)) || echo unshare chroot); do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} is needed (none on PATH)"
done
python3 -m pip --version >/dev/null 2>&1 || die "python3's pip is needed (for the Python worker's wheels)"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[[ -s "${ca_bundle}" ]] || die "${ca_bundle} is missing: apt-get install ca-certificates"
if ((EUID != 0)); then
    ((check == 0)) || die "--check runs the binaries under chroot: run it as root"
    say "not root: building rootless, so /home/nonroot is owned by root, not 65532"
fi

target_dir="$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
out="${out:-${target_dir}/images}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

# The binaries. `--workspace` in the dev build resolves features as `cargo test --workspace`
# does (dev-dependencies included, as the example needs them), so it reuses the test build's
# dependencies and its operator binary and compiles only the example's plain binary.
start=${SECONDS}
if [[ "${profile}" == release ]]; then
    say "cargo build --release (the Dockerfile's build; fat LTO takes minutes)"
    cargo build --release --locked -p swarm-operator --bin swarm-operator --example swarm-worker
    bin_dir="${target_dir}/release"
else
    say "cargo build (dev profile)"
    cargo build --workspace --locked --bin swarm-operator --example swarm-worker
    bin_dir="${target_dir}/debug"
fi
# The Go worker is static (CGO_ENABLED=0): its image is the binary and stage_base's files.
scripts/go-worker.sh build "${target_dir}/go/images/swarm-go-worker" >/dev/null ||
    die "building the Go example worker failed (scripts/go-worker.sh build; the error is above)"
say "binaries built in $((SECONDS - start)) s"

umoci="${UMOCI:-$(scripts/install-umoci.sh)}"
rootless=()
((EUID == 0)) || rootless=(--rootless)

epoch="${SOURCE_DATE_EPOCH:-$(git -C "${repo_root}" log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"
# What each image says it is (the Dockerfile's LABELs): its source and licence from Cargo.toml's
# [workspace.package], its version, the commit built and the images' one time; written as the
# manifest's OCI annotations and the config's labels.
mapfile -t oci_annotations < <(python3 - "${repo_root}/Cargo.toml" \
    "$(git -C "${repo_root}" rev-parse HEAD 2>/dev/null || echo unknown)" "${created}" <<'EOF'
import sys, tomllib
manifest, revision, created = sys.argv[1:]
package = tomllib.load(open(manifest, "rb"))["workspace"]["package"]
for key, value in (("source", package["repository"]), ("licenses", package["license"]),
                   ("version", package["version"]), ("revision", revision), ("created", created)):
    print(f"org.opencontainers.image.{key}={value}")
EOF
)
((${#oci_annotations[@]} == 5)) || die "cannot read the images' annotations from Cargo.toml's [workspace.package]"
oci_flags=()
for annotation in "${oci_annotations[@]}"; do
    oci_flags+=(--manifest.annotation "${annotation}" --config.label "${annotation}")
done

work="$(mktemp -d "${out}/.build-images.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

python_pins="${repo_root}/hack/debian/python-image-packages"
python_requirements="${repo_root}/examples/python-worker/requirements.txt"
python_worker="${repo_root}/examples/python-worker/swarm_worker"
# The wheels' platform: CPython 3.11 on bookworm's glibc 2.36. pip 23 does not widen a
# manylinux_2_X platform to the older ones, so each is named.
wheel_platform=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311
    --platform manylinux2014_x86_64)
for glibc_minor in $(seq 17 36); do wheel_platform+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
python_debs="${cache_root}/python-image-$(sha256sum "${python_pins}" | cut -c1-12)"
python_wheels="${cache_root}/python-wheels-$(cat "${python_requirements}" <(echo "${wheel_platform[*]}") |
    sha256sum | cut -c1-12)"

# stage_base <rootfs>: what every image has: CA certificates, and distroless's users, /tmp and
# /home/nonroot.
stage_base() {
    local rootfs="$1"
    install -d -m 0755 "${rootfs}/etc/ssl/certs"
    install -d -m 1777 "${rootfs}/tmp"
    install -d -m 0700 "${rootfs}/home/nonroot"
    ((EUID != 0)) || chown 65532:65532 "${rootfs}/home/nonroot"
    printf '%s\n' \
        'root:x:0:0:root:/root:/sbin/nologin' \
        'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
        'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"${rootfs}/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' \
        >"${rootfs}/etc/group"
    printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"${rootfs}/etc/nsswitch.conf"
    install -m 0644 "${ca_bundle}" "${rootfs}/etc/ssl/certs/ca-certificates.crt"
}

# stage_binary <rootfs> <binary> <name> [<bin|example> <cargo target>]: the image's files: the
# stripped binary at /usr/local/bin/<name>, its shared libraries and loader with their Debian
# packages' status entries, and stage_base's. No shell, nothing else. A Rust binary (its cargo
# target named) carries its crates in a .dep-v0 section (stage_rust_deps).
stage_binary() {
    local rootfs="$1" binary="$2" name="$3" cargo_target=("${@:4}")
    [[ -x "${binary}" ]] || die "${binary} was not built"
    stage_base "${rootfs}"
    install -d -m 0755 "${rootfs}/usr/local/bin"
    local objcopy_flags=(--strip-debug)
    if ((${#cargo_target[@]})); then
        stage_rust_deps "${work}/${name}.dep-v0" "${cargo_target[@]}"
        objcopy_flags+=(--add-section ".dep-v0=${work}/${name}.dep-v0" --set-section-flags ".dep-v0=noload,readonly")
    fi
    objcopy "${objcopy_flags[@]}" "${binary}" "${rootfs}/usr/local/bin/${name}"
    chmod 0755 "${rootfs}/usr/local/bin/${name}"

    # The loader at the exact path the binary asks for, and each library at the path the
    # loader found it on this machine (a directory the loader searches in the image too).
    local interp ldd_out libs=() lib
    interp="$(readelf --program-headers --wide "${binary}" |
        sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')"
    if [[ -n "${interp}" ]]; then
        ldd_out="$(ldd "${binary}")" || die "ldd ${binary} failed"
        if grep -q 'not found' <<<"${ldd_out}"; then
            die "${binary} needs libraries this machine lacks: ${ldd_out}"
        fi
        mapfile -t libs < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"${ldd_out}")
        for lib in "${interp}" "${libs[@]}"; do
            [[ -e "${rootfs}${lib}" ]] && continue
            install -D -m 0755 "$(readlink -f "${lib}")" "${rootfs}${lib}"
        done
        stage_host_dpkg_status "${rootfs}" "${interp}" "${libs[@]}"
    fi
}

# stage_rust_deps <out file> <bin|example> <cargo target>: the crates the root package's target
# links, as cargo-auditable records them (scripts/lib/rust-deps.py). Not `cargo auditable build`:
# the images take the binaries the tests built with plain cargo, and the list is cargo's own
# resolve of what the binary links, with no other tool to pin and no second build of every
# dependency.
stage_rust_deps() {
    local out="$1" kind="$2" target="$3" triple
    triple="$(rustc -vV | sed -n 's/^host: //p')"
    python3 "${repo_root}/scripts/lib/rust-deps.py" swarm-operator "${kind}" "${target}" "${triple}" "${out}" ||
        die "cannot list the crates of ${kind} ${target} (scripts/lib/rust-deps.py; the error is above)"
}

# stage_host_dpkg_status <rootfs> <path>...: for each Debian package of this machine that owns one
# of the paths (dpkg -S), its status entry (dpkg-query -s) at /var/lib/dpkg/status.d/<package>, as
# distroless writes them: what syft's and scanners' dpkg cataloguers read in place of a dpkg
# database; and this machine's /etc/os-release, the release they come from, without which they
# cannot name the packages (no purl, no vulnerability match). Fails when a path belongs to no
# package.
stage_host_dpkg_status() {
    local rootfs="$1" path owner packages=()
    shift
    for path in "$@"; do
        # dpkg knows a file by the path its package installed; one reached through a symbolic
        # link (usr-merge's /lib -> usr/lib) by the link's target.
        owner="$(dpkg -S "${path}" 2>/dev/null || dpkg -S "$(readlink -f "${path}")" 2>/dev/null)" ||
            die "${path}: no Debian package of this machine owns it (dpkg -S), so the image's SBOM cannot name it"
        packages+=("${owner%%: *}")
    done
    install -d -m 0755 "${rootfs}/var/lib/dpkg/status.d"
    install -m 0644 "$(readlink -f /etc/os-release)" "${rootfs}/etc/os-release"
    local package
    for package in $(printf '%s\n' "${packages[@]}" | sed 's/, /\n/g' | sort -u); do
        dpkg-query -s "${package}" | sed '/^Conffiles:/,/^[^ ]/{/^Conffiles:/d;/^ /d}' \
            >"${rootfs}/var/lib/dpkg/status.d/${package%%:*}" ||
            die "dpkg-query -s ${package} failed"
    done
}

# stage_deb_dpkg_status <rootfs> <deb>...: each unpacked package's control fields (dpkg-deb -f) at
# /var/lib/dpkg/status.d/<package>, and the release they are pinned from (bookworm) in
# /etc/os-release, as stage_host_dpkg_status.
stage_deb_dpkg_status() {
    local rootfs="$1" deb package
    shift
    install -d -m 0755 "${rootfs}/etc" "${rootfs}/var/lib/dpkg/status.d"
    printf '%s\n' 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' 'NAME="Debian GNU/Linux"' 'VERSION_ID="12"' \
        'VERSION="12 (bookworm)"' 'VERSION_CODENAME=bookworm' 'ID=debian' >"${rootfs}/etc/os-release"
    for deb in "$@"; do
        package="$(dpkg-deb -f "${deb}" Package)" || die "cannot read ${deb}'s control fields"
        { dpkg-deb -f "${deb}" && echo 'Status: install ok installed'; } \
            >"${rootfs}/var/lib/dpkg/status.d/${package}"
    done
}

# fetch_python_packages: the pinned Debian packages and wheels, each downloaded once into the
# cache (a directory is complete once it has .done).
fetch_python_packages() {
    local partial specs=() count=0 started=${SECONDS}
    if [[ ! -f "${python_debs}/.done" ]]; then
        say "swarm-python-worker: downloading the Debian packages of ${python_pins#"${repo_root}/"} into ${python_debs}"
        partial="$(mktemp -d "${python_debs}.partial.XXXXXX")"
        mapfile -t specs < <(debian_pins "${python_pins}")
        count=${#specs[@]}
        debian_fetch "${partial}" "${specs[@]}" ||
            die "cannot download the Debian packages pinned in ${python_pins} (\`apt-cache policy <package>\` names the versions the mirror has)"
        (($(find "${partial}" -name '*.deb' | wc -l) == count)) || die "${partial}: not one .deb per pin"
        touch "${partial}/.done"
        rm -rf "${python_debs}"
        mv -T "${partial}" "${python_debs}" 2>/dev/null || rm -rf "${partial}"
        say "swarm-python-worker: ${count} Debian packages downloaded in $((SECONDS - started)) s"
    fi
    started=${SECONDS}
    if [[ ! -f "${python_wheels}/.done" ]]; then
        say "swarm-python-worker: downloading the wheels of ${python_requirements#"${repo_root}/"} into ${python_wheels}"
        partial="$(mktemp -d "${python_wheels}.partial.XXXXXX")"
        python3 -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
            "${wheel_platform[@]}" --dest "${partial}" --requirement "${python_requirements}" >&2 ||
            die "cannot download the wheels of ${python_requirements} for CPython 3.11 on manylinux_2_36_x86_64"
        count="$(grep -c '^[^#[:space:]]' "${python_requirements}")"
        (($(find "${partial}" -name '*.whl' | wc -l) == count)) || die "${partial}: not one wheel per pin"
        touch "${partial}/.done"
        rm -rf "${python_wheels}"
        mv -T "${partial}" "${python_wheels}" 2>/dev/null || rm -rf "${partial}"
        say "swarm-python-worker: ${count} wheels downloaded in $((SECONDS - started)) s"
    fi
}

# stage_python <rootfs>: python3.11 and the part of its standard library the image keeps, unpacked
# from the pinned Debian packages; the pinned wheels in /usr/lib/python3/dist-packages; the
# swarm_worker package at /app; and stage_base's. Fails when a shared object needs a library
# the image lacks.
stage_python() {
    local rootfs="$1"
    fetch_python_packages
    debian_unpack "${rootfs}" "${python_debs}"/*.deb || die "swarm-python-worker: cannot unpack ${python_debs}"
    stage_deb_dpkg_status "${rootfs}" "${python_debs}"/*.deb
    stage_base "${rootfs}"

    # Documentation but the copyrights, iconv's modules, binfmt registrations.
    find "${rootfs}/usr/share" -mindepth 1 ! -type d ! -path "${rootfs}/usr/share/doc/*/copyright" -delete
    find "${rootfs}/usr/share" -mindepth 1 -depth -type d -empty -delete
    rm -rf "${rootfs}/usr/lib/x86_64-linux-gnu/gconv" "${rootfs}/usr/lib/binfmt.d"
    # The standard library: no test suites, pydoc topics, venv (no ensurepip here) or turtle, and
    # none of the modules whose libraries are not pinned.
    local stdlib="${rootfs}/usr/lib/python3.11"
    rm -rf "${stdlib:?}"/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3,pydoc_data,venv,turtle.py} \
        "${stdlib}"/{sqlite3,crypt.py,curses}
    rm -f "${stdlib}"/lib-dynload/{_test,_ctypes_test.,_xxtestfuzz.,xxlimited}*.so \
        "${stdlib}"/lib-dynload/{_sqlite3.,_crypt.,_curses,readline.,_dbm.,nis.}*.so

    local site="${rootfs}/usr/lib/python3/dist-packages"
    install -d -m 0755 "${site}" "${rootfs}/app"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-input \
        --no-deps --no-index --find-links "${python_wheels}" --no-compile --target "${site}" \
        "${wheel_platform[@]}" --requirement "${python_requirements}" >&2 ||
        die "cannot install the wheels of ${python_requirements} from ${python_wheels}"
    rm -rf "${site:?}/bin" "${site}/kubernetes/aio"
    find "${site}/kubernetes" -name '*_test.py' -delete
    # The package's files as its wheel holds them: a checkout's byte code goes with the rest below.
    cp -R --no-preserve=all "${python_worker}" "${rootfs}/app/swarm_worker"
    find "${rootfs}" -name __pycache__ -prune -exec rm -rf {} +
    # Byte code, compiled here by the image's own interpreter: on a read-only root filesystem a
    # worker would otherwise compile the kubernetes client again at every start, seconds that a
    # crashed worker's jobs wait. Unchecked hashes: the files never change, and the build stays
    # reproducible (no timestamps).
    chroot "${rootfs}" /usr/bin/python3.11 -m compileall -q --invalidation-mode unchecked-hash \
        /usr/lib/python3.11 /usr/lib/python3/dist-packages /app >&2 ||
        die "swarm-python-worker: cannot compile the image's Python modules"
    chmod -R u+w,a+rX "${site}" "${rootfs}/app"

    check_image_libraries "${rootfs}"
}

# check_image_libraries <rootfs>: fails when a shared object in the image needs a library the
# image lacks.
check_image_libraries() {
    # Every shared object's libraries, looked up as the loader does (RPATH/RUNPATH with $ORIGIN,
    # then the system directories), inside the image: symbolic links are resolved in the root.
    python3 - "$1" <<'EOF' || die "swarm-python-worker: a shared object needs a library the image lacks (above)"
import os, re, subprocess, sys
root = sys.argv[1]

def resolve(path, hops=0):
    """The host path of the image's absolute `path`, its links followed inside the image."""
    parts, done = [p for p in path.split("/") if p], "/"
    while parts:
        part = parts.pop(0)
        here = os.path.normpath(os.path.join(done, part))
        full = root + here
        if os.path.islink(full):
            if hops > 40:
                return None
            target = os.readlink(full)
            rest = "/".join(parts)
            base = target if target.startswith("/") else os.path.join(done, target)
            return resolve(os.path.normpath(os.path.join(base, rest)), hops + 1)
        done = here
    return root + done if os.path.exists(root + done) else None

system = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
missing, checked = [], 0
for dirpath, dirnames, filenames in os.walk(root):
    for filename in filenames:
        full = os.path.join(dirpath, filename)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            if f.read(4) != b"ELF":
                continue
        checked += 1
        inner = "/" + os.path.relpath(full, root)
        dynamic = subprocess.run(["readelf", "--dynamic", "--program-headers", "--wide", full],
                                 capture_output=True, text=True).stdout
        interp = re.search(r"Requesting program interpreter: (\S+)\]", dynamic)
        if interp and not resolve(interp.group(1)):
            missing.append(f"{inner}: its loader {interp.group(1)}")
        paths = []
        for found in re.findall(r"\((?:RPATH|RUNPATH)\).*\[(.*)\]", dynamic):
            paths += [p.replace("$ORIGIN", os.path.dirname(inner)).replace("${ORIGIN}", os.path.dirname(inner))
                      for p in found.split(":")]
        for needed in re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic):
            if not any(resolve(os.path.join(d, needed)) for d in paths + system):
                missing.append(f"{inner}: {needed}")
for line in missing:
    print(f"build-images.sh: swarm-python-worker: {line} is not in the image", file=sys.stderr)
print(f"build-images.sh: swarm-python-worker: the libraries of {checked} shared objects are in the image",
      file=sys.stderr)
sys.exit(1 if missing or checked == 0 else 0)
EOF
}

# build_image <name> <created by> <stage function> [its arguments...] -- [umoci config flags...]:
# writes <out>/<name>.tar, whose one layer is what the stage function puts in the root filesystem
# it is given first, and whose history says the layer holds <created by>.
build_image() {
    local name="$1" created_by="$2" stage=()
    shift 2
    while [[ $# -gt 0 && "$1" != -- ]]; do
        stage+=("$1")
        shift
    done
    [[ $# -gt 0 ]] && shift
    local layout="${work}/${name}/layout" bundle="${work}/${name}/bundle"
    mkdir -p "${work}/${name}"
    "${umoci}" init --layout "${layout}"
    "${umoci}" new --image "${layout}:${tag}"
    "${umoci}" unpack "${rootless[@]}" --image "${layout}:${tag}" "${bundle}" >/dev/null
    "${stage[0]}" "${bundle}/rootfs" "${stage[@]:1}"
    find "${bundle}/rootfs" -exec touch -h -d "@${epoch}" {} +
    "${umoci}" repack --image "${layout}:${tag}" --history.created "${created}" \
        --history.created_by "scripts/build-images.sh: ${created_by}" \
        "${bundle}"
    "${umoci}" config --image "${layout}:${tag}" --created "${created}" \
        --history.created "${created}" --history.created_by "scripts/build-images.sh: config" \
        --config.user 65532:65532 --config.workingdir /home/nonroot \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        "${oci_flags[@]}" "$@"
    "${umoci}" gc --layout "${layout}"
    tar --sort=name --mtime="@${epoch}" --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w \
        -C "${layout}" -cf "${out}/${name}.tar.partial" oci-layout index.json blobs
    mv "${out}/${name}.tar.partial" "${out}/${name}.tar"
    # The manifest's digest (what a runtime shows as the image's id), the size a node
    # downloads (compressed layers and config) and the unpacked size.
    python3 - "${layout}" "${name}:${tag}" "${out}/${name}.tar" <<'EOF' >&2
import json, os, sys
layout, name, archive = sys.argv[1:]
blob = lambda d: os.path.join(layout, "blobs", *d.split(":"))
manifest = json.load(open(os.path.join(layout, "index.json")))["manifests"][0]
m = json.load(open(blob(manifest["digest"])))
packed = m["config"]["size"] + sum(l["size"] for l in m["layers"])
unpacked = sum(int(l.get("annotations", {}).get("ci.umo.uncompressed_blob_size", 0)) for l in m["layers"])
mib = lambda n: f"{n / 1048576:.1f} MiB"
print(f"build-images.sh: {name}  {manifest['digest']}  {mib(packed)} compressed, "
      f"{mib(unpacked)} unpacked  ({archive}, {mib(os.path.getsize(archive))})")
EOF
    printf '%s:%s\t%s\n' "${name}" "${tag}" "${out}/${name}.tar"
}

# unpack_check <name>: unpacks the archive as a runtime would, into ${work}/check-<name>/bundle
# (config.json and rootfs), and fails if the image has a shell.
unpack_check() {
    local name="$1" dir="${work}/check-$1" sh
    mkdir -p "${dir}/layout"
    tar -xf "${out}/${name}.tar" -C "${dir}/layout"
    "${umoci}" unpack --image "${dir}/layout:${tag}" "${dir}/bundle" >/dev/null
    for sh in bin/sh usr/bin/sh bin/bash bin/busybox; do
        [[ ! -e "${dir}/bundle/rootfs/${sh}" ]] || die "${name}: the image has /${sh}"
    done
}

# in_image <name> <output file> <command...>: runs the command as uid 65532 under chroot of the
# unpacked image's root filesystem mounted read-only, with the image's environment (its
# config's, HOME=/home/nonroot) and nothing else; its status is the command's.
in_image() {
    local name="$1" output="$2" bundle="${work}/check-$1/bundle" image_env=()
    shift 2
    mapfile -d '' -t image_env < <(python3 -c '
import json, sys
sys.stdout.write("".join(e + "\0" for e in json.load(open(sys.argv[1]))["process"]["env"]))' \
        "${bundle}/config.json")
    # shellcheck disable=SC2016 # $1 and $@ are the inner shell's arguments.
    unshare --mount --propagation private -- bash -c '
        mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"' \
        check "${bundle}/rootfs" env -i "${image_env[@]}" HOME=/home/nonroot \
        "$(command -v chroot)" --userspec=65532:65532 "${bundle}/rootfs" "$@" >"${output}" 2>&1
}

# check_image <name>: runs `/usr/local/bin/<name> --help` in the image (in_image).
check_image() {
    local name="$1" help="${work}/check-$1/help.txt"
    unpack_check "${name}"
    if ! in_image "${name}" "${help}" "/usr/local/bin/${name}" --help; then
        cat "${help}" >&2
        die "${name}: /usr/local/bin/${name} --help failed in the image (output above)"
    fi
    say "${name}: --help runs as 65532 on the read-only image ($(head -n 1 "${help}"))"
}

# check_python_image <name>: in the image (in_image), imports the worker's modules, then runs the
# image's entrypoint, which must stop at the missing pod environment: without a cluster, as far
# as the worker can go.
check_python_image() {
    local name="$1" output="${work}/check-$1/output.txt" entrypoint=() status=0
    unpack_check "${name}"
    if ! in_image "${name}" "${output}" /usr/bin/python3.11 -c '
import sys
import kubernetes, urllib3, yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
import swarm_worker
client.CoreV1Api, client.CoordinationV1Api, client.V1Lease
print("python", sys.version.split()[0], "kubernetes", kubernetes.__version__, "PyYAML", yaml.__version__,
      "urllib3", urllib3.__version__, "from", kubernetes.__file__)'; then
        cat "${output}" >&2
        die "${name}: the worker's modules do not import in the image (output above)"
    fi
    say "${name}: imports as 65532 on the read-only image ($(tail -n 1 "${output}"))"
    mapfile -d '' -t entrypoint < <(python3 -c '
import json, sys
sys.stdout.write("".join(a + "\0" for a in json.load(open(sys.argv[1]))["process"]["args"]))' \
        "${work}/check-${name}/bundle/config.json")
    in_image "${name}" "${output}" "${entrypoint[@]}" || status=$?
    if ((status != 1)) || ! grep -q '^swarm_worker: missing environment variables: POD_NAME' "${output}"; then
        cat "${output}" >&2
        die "${name}: its entrypoint (${entrypoint[*]}) did not stop at the missing POD_NAME (status ${status}; output above)"
    fi
    say "${name}: its entrypoint runs as 65532 on the read-only image ($(tail -n 1 "${output}"))"
}

say "writing the images into ${out} with ${umoci}"
build_image swarm-operator "swarm-operator, its libraries, CA certificates, passwd" stage_binary "${bin_dir}/swarm-operator" swarm-operator bin swarm-operator -- \
    --config.entrypoint /usr/local/bin/swarm-operator --config.cmd run \
    --config.exposedports 8080/tcp --config.exposedports 8443/tcp
build_image swarm-worker "swarm-worker, its libraries, CA certificates, passwd" stage_binary "${bin_dir}/examples/swarm-worker" swarm-worker example swarm-worker -- \
    --config.entrypoint /usr/local/bin/swarm-worker
build_image swarm-go-worker "swarm-go-worker, its libraries, CA certificates, passwd" stage_binary "${target_dir}/go/images/swarm-go-worker" swarm-go-worker -- \
    --config.entrypoint /usr/local/bin/swarm-go-worker
python_start=${SECONDS}
build_image swarm-python-worker \
    "python3.11 from Debian bookworm (${python_pins#"${repo_root}/"}), the wheels of ${python_requirements#"${repo_root}/"}, the swarm_worker package, CA certificates, passwd" \
    stage_python -- \
    --config.entrypoint /usr/bin/python3.11 --config.entrypoint=-m --config.entrypoint swarm_worker \
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 --config.env PYTHONPATH=/app
say "swarm-python-worker: written in $((SECONDS - python_start)) s"
if ((check)); then
    check_image swarm-operator
    check_image swarm-worker
    check_image swarm-go-worker
    check_python_image swarm-python-worker
fi
say "done in $((SECONDS - start)) s"
