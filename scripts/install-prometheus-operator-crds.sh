#!/usr/bin/env bash
# Installs the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, at a pinned
# release, into <repo>/.tools and prints their directory. The e2e tests install them in a
# cluster to check that deploy/monitoring's objects are valid against their schemas.
#
# The CRD manifests ship in the prometheus-operator Go module (example/prometheus-operator-crd),
# so they come from the Go module proxy, checked against the module's pinned hash. Running the
# script again is cheap: it reuses an installed copy of the pinned version.
set -euo pipefail

MODULE="github.com/prometheus-operator/prometheus-operator"
VERSION="v0.85.0"
# The go.sum hash of ${MODULE}@${VERSION}: a different download is refused.
MODULE_SUM="h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
CRDS=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml)

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
tools_dir="${repo_root}/.tools"
install_dir="${tools_dir}/prometheus-operator-crds-${VERSION}"
link="${tools_dir}/prometheus-operator-crds"

if [[ -f "${install_dir}/.complete" ]]; then
    ln -sfn "prometheus-operator-crds-${VERSION}" "${link}"
    echo "${link}"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "Go is needed to fetch ${MODULE}@${VERSION} from the module proxy (none on PATH)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
# Outside any module, `go mod download` fetches just this module (and verifies it against the
# checksum database, as any download does).
if ! info="$(cd "${work}" && GOMODCACHE="${cache_root}/gomod" GOFLAGS=-modcacherw \
    GOTOOLCHAIN=local go mod download -json "${MODULE}@${VERSION}")"; then
    die "go mod download ${MODULE}@${VERSION} failed: ${info}"
fi
field() {
    sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}$/\\1/p" <<<"${info}" | head -n 1
}
sum="$(field Sum)"
[[ "${sum}" == "${MODULE_SUM}" ]] ||
    die "${MODULE}@${VERSION} has hash '${sum}', expected ${MODULE_SUM}"
source_dir="$(field Dir)/example/prometheus-operator-crd"

rm -rf "${install_dir}"
mkdir -p "${install_dir}"
for crd in "${CRDS[@]}"; do
    [[ -f "${source_dir}/${crd}" ]] || die "${crd} is not in ${MODULE}@${VERSION}"
    cp "${source_dir}/${crd}" "${install_dir}/${crd}"
done
touch "${install_dir}/.complete"
ln -sfn "prometheus-operator-crds-${VERSION}" "${link}"
echo "${link}"
