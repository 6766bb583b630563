#!/usr/bin/env bash
# Builds the kubectl plugin for release and packages it the way .krew.yaml expects:
# dist/kubectl-swarm_<os>_<arch>.tar.gz with the binary and the LICENSE at its root, and prints
# the archive's path and sha256.
#
#   scripts/package-plugin.sh                            # this machine's platform
#   scripts/package-plugin.sh aarch64-unknown-linux-gnu  # another Rust target (its toolchain
#                                                        # and linker must be installed)
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${repo_root}"

target="${1:-$(rustc -vV | sed -n 's/^host: //p')}"
case "${target}" in
    x86_64-*) arch=amd64 ;;
    aarch64-*) arch=arm64 ;;
    *) say "no krew arch for target ${target}"; exit 2 ;;
esac
case "${target}" in
    *-linux-*) os=linux ;;
    *-apple-darwin) os=darwin ;;
    *) say "no krew os for target ${target}"; exit 2 ;;
esac

cargo build --release --locked --bin kubectl-swarm --target "${target}" >&2
staging="$(mktemp -d)"
trap 'rm -rf "${staging}"' EXIT
cp "target/${target}/release/kubectl-swarm" LICENSE "${staging}/"
mkdir -p dist
archive="dist/kubectl-swarm_${os}_${arch}.tar.gz"
tar -C "${staging}" -czf "${archive}" kubectl-swarm LICENSE
# sha256sum on Linux, shasum on macOS.
if command -v sha256sum >/dev/null; then
    sum="$(sha256sum "${archive}")"
else
    sum="$(shasum -a 256 "${archive}")"
fi
echo "${archive} ${sum%% *}"
