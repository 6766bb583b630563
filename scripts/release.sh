#!/usr/bin/env bash
# Cuts a release: one version everywhere, every image built with its SBOM and pushed by digest,
# the chart pushed, the commit tagged; prints what it published.
#
#   scripts/release.sh VERSION --registry HOST[:PORT][/PATH] [--out DIR] [--plain-http] [--allow-dirty]
#
#   VERSION          MAJOR.MINOR.PATCH, or with a pre-release (1.2.0-rc.1); no `v`, no `+build`
#                    (an image tag cannot hold a `+`)
#   --registry R     where the images (R/<name>:VERSION) and the chart
#                    (oci://R/charts/swarm-operator, version VERSION) go; docker's credentials
#                    (~/.docker/config.json) and helm's (`helm registry login`) are used as they are
#   --out DIR        the archives, their SBOMs and the chart's package (default: dist/VERSION)
#   --plain-http     the registry speaks HTTP, not HTTPS (implied for localhost and 127.0.0.1)
#   --allow-dirty    run on uncommitted changes, to try a release: the versions are set and the
#                    artifacts pushed, but nothing is committed or tagged, as a tag must name
#                    the tree the images were built from
#
# In order, stopping at the first failure (a run again after a failure resumes: the version is
# already set and committed, nothing is tagged yet):
#  1. sets VERSION in Cargo.toml's [workspace.package] (every crate inherits it) and Cargo.lock,
#     charts/swarm-operator/Chart.yaml (version and appVersion), deploy/manager/kustomization.yaml
#     (the operator image's tag), examples/python-worker/pyproject.toml and README.md's build
#     command, and commits them as "release VERSION" (tests/integration/versions.rs holds them
#     equal);
#  2. builds the images with scripts/build-images.sh --profile release --tag VERSION
#     (SWARM_RELEASE_PROFILE=dev builds the debug binaries instead: minutes, not a fat-LTO build,
#     for trying the release itself);
#  3. writes each image's SBOM, <out>/<name>.spdx.json (SPDX 2.3 JSON), with syft
#     (scripts/install-syft.sh) from its OCI archive;
#  4. pushes each image with crane (scripts/install-crane.sh) to R/<name>:VERSION, and fails
#     unless the registry's digest is the archive's manifest digest;
#  5. packages the chart (helm, scripts/install-helm.sh) with its image.repository R/swarm-operator
#     and image.digest the pushed one's, so it installs the image released with it, and pushes
#     it to oci://R/charts;
#  6. tags the commit vVERSION (the operator's release) and worker-go/vVERSION (the Go module's
#     version: Go finds a module in a subdirectory by tags with its directory as a prefix), and
#     prints the `git push` that publishes them. It never pushes them itself: Go's module proxy
#     and checksum database keep a version forever, so that step comes after the release is
#     checked (RELEASING.md).
#
# stdout: one line per published artifact, "<name>\t<reference>\t<digest>"; progress on stderr.
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${repo_root}"

usage() {
    sed -n '2,/^set -euo pipefail$/{/^#/{s/^# \{0,1\}//;p}}' "${BASH_SOURCE[0]}" >&2
    exit "$1"
}

# The files that hold the version, all committed together.
version_files=(Cargo.toml Cargo.lock charts/swarm-operator/Chart.yaml deploy/manager/kustomization.yaml
    examples/python-worker/pyproject.toml README.md)

# parse_args "$@": sets version, registry, out, plain_http, allow_dirty, or exits naming what to fix.
parse_args() {
    version="" registry="" out="" plain_http=0 allow_dirty=0
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --registry | --out)
            [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
            if [[ "$1" == --registry ]]; then registry="$2"; else out="$2"; fi
            shift 2
            ;;
        --plain-http) plain_http=1 && shift ;;
        --allow-dirty) allow_dirty=1 && shift ;;
        -h | --help) usage 0 ;;
        -*) say "unknown option: $1" && usage 2 ;;
        *)
            [[ -z "${version}" ]] || die "one VERSION only: ${version} and $1"
            version="$1" && shift
            ;;
        esac
    done
    local number='(0|[1-9][0-9]*)' ident='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
    [[ -n "${version}" ]] || die "no VERSION: scripts/release.sh 1.2.3 --registry HOST:PORT"
    [[ "${version}" =~ ^${number}\.${number}\.${number}(-${ident}(\.${ident})*)?$ ]] ||
        die "VERSION ${version} is not a semantic version: MAJOR.MINOR.PATCH (1.2.3) or with a pre-release (1.2.3-rc.1), without a v or +build"
    [[ -n "${registry}" ]] ||
        die "no --registry: name where the images and the chart go, as HOST:PORT (or HOST:PORT/PATH)"
    [[ "${registry}" =~ ^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._/-][a-z0-9]+)*)?$ ]] ||
        die "--registry ${registry} is not HOST[:PORT][/PATH] (no scheme: oci://, https:// are implied)"
    case "${registry%%/*}" in
    localhost | localhost:* | 127.* | \[::1\]*) plain_http=1 ;;
    esac
    out="${out:-${repo_root}/dist/${version}}"
    profile="${SWARM_RELEASE_PROFILE:-release}"
    [[ "${profile}" == release || "${profile}" == dev ]] ||
        die "SWARM_RELEASE_PROFILE is release (the default) or dev, not ${profile}"
}

# Fails unless the tree is clean (or --allow-dirty), the tags are free and the registry answers.
preflight() {
    local dirty tag scheme code hint=""
    dirty="$(git status --porcelain)"
    if [[ -n "${dirty}" ]] && ((allow_dirty == 0)); then
        die "the working tree has uncommitted changes (commit or stash them; --allow-dirty to try a release without committing or tagging):
${dirty}"
    fi
    for tag in "v${version}" "worker-go/v${version}"; do
        ! git rev-parse -q --verify "refs/tags/${tag}" >/dev/null ||
            die "tag ${tag} exists: ${version} is released already (choose the next version)"
    done
    scheme=https hint=" (--plain-http if it speaks HTTP)"
    ((plain_http == 0)) || scheme=http hint=""
    # /v2/ is the registry API's base: 200, or 401 asking for credentials, means a registry.
    code="$(curl -s -o /dev/null -w '%{http_code} %{errormsg}' --max-time 10 "${scheme}://${registry%%/*}/v2/")" ||
        die "registry ${registry%%/*} is unreachable at ${scheme}://${registry%%/*}/v2/ (${code#* }); start it or correct --registry${hint}"
    code="${code%% *}"
    [[ "${code}" == 200 || "${code}" == 401 ]] ||
        die "${scheme}://${registry%%/*}/v2/ answered ${code}: not an OCI registry's API"
}

# Writes `version` into every file of version_files, then Cargo.lock.
set_versions() {
    python3 - "${version}" <<'EOF'
import re, sys
version = sys.argv[1]
# (file, the line's pattern, its replacement): each pattern must match exactly once, or no file
# is written.
edits = [
    ("Cargo.toml", r'(?m)(^\[workspace\.package\]\n(?:#.*\n)*)version = ".*"$', rf'\g<1>version = "{version}"'),
    ("Cargo.toml", r'(?m)^(swarm-protocol = \{ path = "protocol", version = "=)[^"]*(" \})$', rf"\g<1>{version}\g<2>"),
    ("charts/swarm-operator/Chart.yaml", r"(?m)^version: .*$", f"version: {version}"),
    ("charts/swarm-operator/Chart.yaml", r"(?m)^appVersion: .*$", f'appVersion: "{version}"'),
    ("deploy/manager/kustomization.yaml", r'(?m)^(    newTag: ).*$', rf'\g<1>"{version}"'),
    ("examples/python-worker/pyproject.toml", r'(?m)^version = ".*"$', f'version = "{version}"'),
    ("README.md", r"(?m)^(docker build -t swarm-operator:)\S+( \.)", rf"\g<1>{version}\g<2>"),
]
texts = {}
for path, pattern, replacement in edits:
    texts[path], count = re.subn(pattern, replacement, texts.get(path) or open(path).read())
    if count != 1:
        sys.exit(f"release.sh: {path}: {count} matches of {pattern!r}, not one: correct the file or scripts/release.sh")
for path, text in texts.items():
    open(path, "w").write(text)
EOF
    # The workspace's own entries only; every dependency stays as locked.
    cargo update --workspace --offline --quiet || die "cargo update --workspace could not rewrite Cargo.lock"
    say "version ${version} set in ${version_files[*]}"
}

# Commits the version files (unless --allow-dirty, or they hold the version already).
commit_versions() {
    if ((allow_dirty)); then
        say "--allow-dirty: the version edits stay uncommitted"
    elif git diff --quiet -- "${version_files[@]}"; then
        say "the version is ${version} already: nothing to commit"
    else
        git commit -q -m "release ${version}: the crates, the chart, the images' tag and the Python package at ${version}" \
            -- "${version_files[@]}" || die "git commit of the version failed (see above)"
        say "committed $(git rev-parse --short HEAD): release ${version}"
    fi
}

# build_images: fills `images` with "<name>\t<archive>" lines from scripts/build-images.sh.
build_images() {
    local start=${SECONDS} lines
    say "building the images (profile ${profile}, tag ${version}) into ${out}"
    mkdir -p "${out}"
    lines="$(scripts/build-images.sh --profile "${profile}" --tag "${version}" --out "${out}")" ||
        die "scripts/build-images.sh failed (see above)"
    mapfile -t images < <(sed -n "s/^\([^:]*\):${version//./\\.}\t/\1\t/p" <<<"${lines}")
    ((${#images[@]} > 0)) || die "scripts/build-images.sh printed no image: ${lines}"
    say "built ${#images[@]} images in $((SECONDS - start)) s"
}

# The manifest digest of an OCI archive: its index's one manifest.
archive_digest() {
    tar -xOf "$1" index.json | python3 -c '
import json, sys
manifests = json.load(sys.stdin)["manifests"]
if len(manifests) != 1:
    sys.exit(f"{sys.argv[1]}: {len(manifests)} manifests in index.json, not one")
print(manifests[0]["digest"])' "$1"
}

# sbom_and_push: for each image, its SBOM beside the archive, then the push; prints the lines.
sbom_and_push() {
    local syft crane entry name archive expected layout pushed digest insecure=()
    syft="$(scripts/install-syft.sh)"
    crane="$(scripts/install-crane.sh)"
    ((plain_http == 0)) || insecure=(--insecure)
    for entry in "${images[@]}"; do
        name="${entry%%$'\t'*}" archive="${entry#*$'\t'}"
        expected="$(archive_digest "${archive}")"
        SYFT_CHECK_FOR_APP_UPDATE=false "${syft}" scan --quiet "oci-archive:${archive}" \
            --source-name "${name}" --source-version "${version}" \
            -o "spdx-json=${out}/${name}.spdx.json" || die "syft could not write ${name}'s SBOM"
        say "${name}: SBOM ${out}/${name}.spdx.json"
        # crane reads a docker tarball or an OCI layout directory, not a layout in a tar.
        layout="${out}/${name}.layout"
        rm -rf "${layout}" && mkdir -p "${layout}" && tar -xf "${archive}" -C "${layout}"
        pushed="$("${crane}" push "${insecure[@]}" "${layout}" "${registry}/${name}:${version}")" ||
            die "crane push of ${name} to ${registry} failed (see above)"
        rm -rf "${layout}"
        digest="$("${crane}" digest "${insecure[@]}" "${registry}/${name}:${version}")"
        [[ "${digest}" == "${expected}" && "${pushed}" == *"@${expected}" ]] ||
            die "${registry}/${name}:${version} is ${digest} (push said ${pushed}), not the archive's ${expected}"
        printf '%s\t%s\t%s\n' "${name}" "${registry}/${name}:${version}" "${digest}"
        [[ "${name}" != swarm-operator ]] || operator_digest="${digest}"
    done
}

# push_chart: packages the chart, naming the pushed operator image by its registry and digest
# (so `helm install oci://R/charts/swarm-operator --version VERSION` needs no --set image...),
# pushes it, prints its line.
push_chart() {
    local helm crane chart package digest plain=() insecure=()
    helm="$(scripts/install-helm.sh)"
    crane="$(scripts/install-crane.sh)"
    ((plain_http == 0)) || plain=(--plain-http) insecure=(--insecure)
    [[ -n "${operator_digest:-}" ]] || die "no swarm-operator image was pushed: nothing for the chart to name"
    chart="$(mktemp -d)/swarm-operator"
    cp -r charts/swarm-operator "${chart}"
    released_image_values "${chart}/values.yaml" "${registry}/swarm-operator" "${operator_digest}"
    "${helm}" package "${chart}" --destination "${out}" >&2 || die "helm package failed (see above)"
    rm -rf "$(dirname "${chart}")"
    package="${out}/swarm-operator-${version}.tgz"
    [[ -f "${package}" ]] || die "helm package wrote no ${package}: is Chart.yaml's version ${version}?"
    "${helm}" push "${package}" "oci://${registry}/charts" "${plain[@]}" >&2 ||
        die "helm push of ${package} to oci://${registry}/charts failed (see above; \`helm registry login ${registry%%/*}\` if it needs credentials)"
    digest="$("${crane}" digest "${insecure[@]}" "${registry}/charts/swarm-operator:${version}")"
    printf '%s\t%s\t%s\n' "swarm-operator chart" "${registry}/charts/swarm-operator:${version}" "${digest}"
}

# released_image_values <values.yaml> <repository> <digest>: the image block's repository and
# digest set in place, comments kept; fails unless each line was found once.
released_image_values() {
    python3 - "$@" <<'PY'
import re, sys
path, repository, digest = sys.argv[1:]
text = open(path).read()
for key, value in (("repository", repository), ("digest", digest)):
    text, n = re.subn(rf"(?m)^(image:\n(?:  .*\n|\n)*?  {key}: ).*$", rf'\g<1>"{value}"', text)
    if n != 1:
        sys.exit(f"{path}: no image.{key} line to set")
open(path, "w").write(text)
PY
}

# Tags the release commit (unless --allow-dirty) and says how to publish the tags.
tag_release() {
    if ((allow_dirty)); then
        say "--allow-dirty: not tagged (the images hold uncommitted changes)"
        return
    fi
    git tag -a "v${version}" -m "swarm-operator ${version}"
    git tag -a "worker-go/v${version}" -m "swarm-operator worker-go module ${version}"
    say "tagged $(git rev-parse --short HEAD) v${version} and worker-go/v${version}; once the release is checked (RELEASING.md):"
    say "  git push origin HEAD v${version} worker-go/v${version}"
}

parse_args "$@"
command -v curl >/dev/null 2>&1 || die "curl is needed (to reach the registry)"
preflight
set_versions
commit_versions
build_images
sbom_and_push
push_chart
tag_release
