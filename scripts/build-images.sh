#!/usr/bin/env bash
# Builds the operator's and the example worker's container images as OCI archives, without a
# container engine or a registry, keeping the Dockerfile's contract (binary path, entrypoint,
# cmd, user 65532:65532, exposed port; no shell; CA certificates; /etc/passwd and /etc/group
# with distroless's `nonroot` 65532).
#
#   scripts/build-images.sh [--profile release|dev] [--tag TAG] [--out DIR] [--check]
#
#   --profile release   (default) the Dockerfile's build: `cargo build --release --locked`
#   --profile dev       the debug binaries; after `cargo test --workspace --no-run` this
#                       compiles only the example's plain binary, no dependency
#   --tag TAG           the images' tag (default: dev)
#   --out DIR           where the archives go (default: <target dir>/images)
#   --check             then unpack each archive (umoci unpack, as root) and run its binary's
#                       --help under chroot of the read-only root filesystem, as uid 65532
#
# It writes <out>/swarm-operator.tar and <out>/swarm-worker.tar, and prints one line
# "<name>:<tag>\t<archive>" per image on stdout (progress, digests and sizes go to stderr).
# Each archive is an OCI image layout in a tar whose index names the image by its tag
# (org.opencontainers.image.ref.name), as containerd imports it:
#
#   ctr -n k8s.io images import --base-name docker.io/library/swarm-operator <out>/swarm-operator.tar
#
# There is no musl target here: the binaries are linked with glibc, so the image carries the
# shared libraries `ldd` names and the dynamic loader at the binary's interpreter path, as
# distroless/cc does; the binaries' debug info is stripped. The images are written with umoci
# (scripts/install-umoci.sh builds the pinned one; UMOCI names another). Files, layers and
# configs carry one fixed time, SOURCE_DATE_EPOCH or else the last commit's, so the same
# binaries give the same digests.
set -euo pipefail
umask 022

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

say() { echo "build-images.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}
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
for tool in cargo python3 objcopy readelf ldd tar $( ((check == 0)) || echo unshare chroot); do
    command -v "${tool}" >/dev/null 2>&1 || die "${tool} is needed (none on PATH)"
done
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
say "binaries built in $((SECONDS - start)) s"

umoci="${UMOCI:-$(scripts/install-umoci.sh)}"
rootless=()
((EUID == 0)) || rootless=(--rootless)

epoch="${SOURCE_DATE_EPOCH:-$(git -C "${repo_root}" log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)"

work="$(mktemp -d "${out}/.build-images.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# stage_rootfs <rootfs> <binary> <name>: the image's files: the stripped binary at
# /usr/local/bin/<name>, its shared libraries and loader, CA certificates, and distroless's
# users, /tmp and /home/nonroot. No shell, nothing else.
stage_rootfs() {
    local rootfs="$1" binary="$2" name="$3"
    install -d -m 0755 "${rootfs}/etc/ssl/certs" "${rootfs}/usr/local/bin"
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

    objcopy --strip-debug "${binary}" "${rootfs}/usr/local/bin/${name}"
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
    fi
    find "${rootfs}" -exec touch -h -d "@${epoch}" {} +
}

# build_image <name> <binary> [umoci config flags...]: writes <out>/<name>.tar.
build_image() {
    local name="$1" binary="$2"
    shift 2
    [[ -x "${binary}" ]] || die "${binary} was not built"
    local layout="${work}/${name}/layout" bundle="${work}/${name}/bundle"
    mkdir -p "${work}/${name}"
    "${umoci}" init --layout "${layout}"
    "${umoci}" new --image "${layout}:${tag}"
    "${umoci}" unpack "${rootless[@]}" --image "${layout}:${tag}" "${bundle}" >/dev/null
    stage_rootfs "${bundle}/rootfs" "${binary}" "${name}"
    "${umoci}" repack --image "${layout}:${tag}" --history.created "${created}" \
        --history.created_by "scripts/build-images.sh: ${name}, its libraries, CA certificates, passwd" \
        "${bundle}"
    "${umoci}" config --image "${layout}:${tag}" --created "${created}" \
        --history.created "${created}" --history.created_by "scripts/build-images.sh: config" \
        --config.user 65532:65532 --config.workingdir /home/nonroot \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        "$@"
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

# check_image <name>: unpacks the archive as a runtime would and runs `<binary> --help` as uid
# 65532 under chroot of the root filesystem mounted read-only, with the image's environment.
check_image() {
    local name="$1"
    local dir="${work}/check-${name}"
    mkdir -p "${dir}/layout"
    tar -xf "${out}/${name}.tar" -C "${dir}/layout"
    "${umoci}" unpack --image "${dir}/layout:${tag}" "${dir}/bundle" >/dev/null
    local rootfs="${dir}/bundle/rootfs" sh
    for sh in bin/sh usr/bin/sh bin/bash bin/busybox; do
        [[ ! -e "${rootfs}/${sh}" ]] || die "${name}: the image has /${sh}"
    done
    # shellcheck disable=SC2016 # $1, $2 and $3 are the inner shell's arguments.
    if ! unshare --mount --propagation private -- bash -c '
        mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" &&
            exec env -i PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
                HOME=/home/nonroot "$3" --userspec=65532:65532 "$1" "/usr/local/bin/$2" --help' \
        check "${rootfs}" "${name}" "$(command -v chroot)" >"${dir}/help.txt" 2>&1; then
        cat "${dir}/help.txt" >&2
        die "${name}: /usr/local/bin/${name} --help failed in the image (output above)"
    fi
    say "${name}: --help runs as 65532 on the read-only image ($(head -n 1 "${dir}/help.txt"))"
}

say "writing the images into ${out} with ${umoci}"
build_image swarm-operator "${bin_dir}/swarm-operator" \
    --config.entrypoint /usr/local/bin/swarm-operator --config.cmd run \
    --config.exposedports 8080/tcp
build_image swarm-worker "${bin_dir}/examples/swarm-worker" \
    --config.entrypoint /usr/local/bin/swarm-worker
if ((check)); then
    check_image swarm-operator
    check_image swarm-worker
fi
say "done in $((SECONDS - start)) s"
