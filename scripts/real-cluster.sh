#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, for the end-to-end suite: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok playing the kubelet for a few fake nodes, and
# one real node (kubelet, containerd, runc, CNI, kube-proxy: scripts/lib/real-node.sh) whose pods
# are real containers. SWARM_REAL_NODE=0 leaves the real node out; SWARM_AUDIT=0 the API
# server's audit log; SWARM_PROFILING=1 serves the API server's /debug/pprof (to the admin
# kubeconfig) for `go tool pprof`.
#
#   scripts/real-cluster.sh up <DIR>     build once (cached), start, wait until ready
#   scripts/real-cluster.sh down <DIR>   stop exactly the processes `up` started in <DIR>
#   scripts/real-cluster.sh build        only build (or find) the pinned binaries
#   scripts/real-cluster.sh restart <DIR> <COMPONENT> [SECONDS]
#                                        SIGKILL a component (etcd, kube-apiserver, ...), keep
#                                        it down SECONDS (default 0), start it again with the
#                                        same command line and wait until it serves
#   scripts/real-cluster.sh signal <DIR> <COMPONENT> <SIGNAL>
#                                        send SIGNAL (STOP, CONT, KILL, ...) to a component
#   scripts/real-cluster.sh load <DIR> <NAME:TAG> <ARCHIVE>
#                                        import an OCI image archive into the real node
#   scripts/real-cluster.sh ctr <DIR> <ARGS...>
#                                        ctr against the real node's containerd (namespace k8s.io)
#   scripts/real-cluster.sh check-clean <DIR>
#                                        after `down`: fail if anything of the cluster is left
#                                        on the machine (process, mount, cgroup, interface,
#                                        nftables or iptables rule, changed kernel setting)
#
# `up` writes an admin kubeconfig to <DIR>/kubeconfig, and logs, pid files, certificates and
# etcd's data under <DIR>. Everything is built from Go modules at the versions pinned in
# hack/{kube,etcd,kwok,containerd,cni}/go.mod (runc and nft are Debian packages pinned in
# hack/debian/packages); the binaries, module and build caches live in
# ${SWARM_CLUSTER_CACHE:-~/.cache/swarm-operator}, keyed by version, so only the first `up`
# on a machine builds (see docs/testing.md for what that costs).
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=scripts/lib/components.sh
source "${repo_root}/scripts/lib/components.sh"
# shellcheck source=scripts/lib/kubeconfig.sh
source "${repo_root}/scripts/lib/kubeconfig.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"

# The globals the functions below read: the fake nodes, the Services' range, whether there is a
# real node (SWARM_REAL_NODE), whether the API server writes an audit log (SWARM_AUDIT) and
# serves profiles (SWARM_PROFILING), the
# control plane's pinned versions and build directories (and
# repo_root and cache_root, from common.sh; the real node's, from real-node.sh).
nodes=(kwok-node-0 kwok-node-1 kwok-node-2)
service_cidr="10.0.0.0/24"
real_node="${SWARM_REAL_NODE:-1}"
audit="${SWARM_AUDIT:-1}"
profiling="${SWARM_PROFILING:-0}"
kube_version="$(pinned kube k8s.io/kubernetes)"
etcd_version="$(pinned etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(pinned kwok sigs.k8s.io/kwok)"
[[ -n "${kube_version}" && -n "${etcd_version}" && -n "${kwok_version}" ]] ||
    die "cannot read the pinned versions from hack/*/go.mod"
kube_bin="${cache_root}/kube-${kube_version}"
etcd_bin="${cache_root}/etcd-${etcd_version}"
kwok_bin="${cache_root}/kwok-${kwok_version}"

# shellcheck source=scripts/lib/real-node.sh
source "${repo_root}/scripts/lib/real-node.sh"

# Builds everything once per version. A second caller (.ci/run starts the build before its
# lints, scripts/test.sh asks again later) waits for the first one's build and reuses it.
build_all() {
    mkdir -p "${cache_root}"
    local lock
    exec {lock}>"${cache_root}/real-cluster-build.lock"
    build_lock "${lock}" "${cache_root}/real-cluster-build.lock" "the real cluster's programs"
    build_all_unlocked
    exec {lock}>&-
}

build_all_unlocked() {
    local version=k8s.io/component-base/version
    local major="${kube_version#v}" minor
    minor="${major#*.}"
    minor="${minor%%.*}"
    major="${major%%.*}"
    go_build kube "${kube_bin}" \
        "-s -w -X ${version}.gitVersion=${kube_version} -X ${version}.gitMajor=${major} -X ${version}.gitMinor=${minor} -X ${version}.gitTreeState=clean" \
        -tags selinux,notest -- \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler
    go_build etcd "${etcd_bin}" "-s -w" -tags selinux,notest -- go.etcd.io/etcd/server/v3
    # etcd's main package is its server module's root, so go names the binary `server`.
    if [[ -f "${etcd_bin}/server" && ! -e "${etcd_bin}/etcd" ]]; then
        mv "${etcd_bin}/server" "${etcd_bin}/etcd"
    fi
    go_build kwok "${kwok_bin}" "-s -w" -tags selinux,notest -- sigs.k8s.io/kwok/cmd/kwok
    say "kube-apiserver, kube-controller-manager, kube-scheduler ${kube_version}; etcd ${etcd_version}; kwok ${kwok_version}"
    if [[ "${real_node}" != 0 ]]; then
        node_build
    fi
}

# The path of the pinned kubectl (scripts/install-kubectl.sh installs it once).
kubectl_path() {
    "${repo_root}/scripts/install-kubectl.sh" || die "cannot install kubectl"
}

# What a component answers once it serves again after a restart.
wait_serving() {
    local dir="$1" name="$2"
    case "${name}" in
    etcd)
        wait_for "${dir}" "etcd to be healthy" 60 etcd curl -fsS "$(cat "${dir}/etcd-url")/health"
        ;;
    kube-apiserver)
        local kubectl
        kubectl="$(kubectl_path)"
        wait_for "${dir}" "kube-apiserver to be ready" 120 kube-apiserver \
            "${kubectl}" --kubeconfig "${dir}/kubeconfig" get --raw /readyz
        ;;
    esac
}

# Kills component `name` (SIGKILL, as a crash or a lost node would), keeps it down `seconds`,
# then starts it with the command line `up` gave it and waits until it serves.
restart() {
    local dir="$1" name="$2" seconds="${3:-0}"
    [[ -f "${dir}/cmds/${name}" ]] || die "no component ${name} in ${dir} (see ${dir}/cmds)"
    kill_component "${dir}" "${name}"
    sleep "${seconds}"
    local cmd=()
    mapfile -d '' -t cmd <"${dir}/cmds/${name}"
    echo "--- restarted by real-cluster.sh at $(date -u +%FT%TZ)" >>"${dir}/logs/${name}.log"
    start_component "${dir}" "${name}" "${cmd[@]}"
    wait_serving "${dir}" "${name}"
    say "restarted ${name} (down ${seconds} s)"
}

up() {
    local dir="$1"
    mkdir -p "${dir}"
    dir="$(cd "${dir}" && pwd)"
    if compgen -G "${dir}/pids/*.pid" >/dev/null; then
        die "${dir} already has a cluster (pid files in ${dir}/pids); run: $0 down ${dir}"
    fi
    build_all
    # A failed start leaves nothing running.
    # shellcheck disable=SC2064 # expanded now on purpose: the directory of this `up`.
    trap "down $(printf '%q' "${dir}") >/dev/null 2>&1" EXIT
    local kubectl
    kubectl="$(kubectl_path)"
    rm -rf "${dir}/logs" "${dir}/etcd" "${dir}/pki" "${dir}/cmds"
    mkdir -p "${dir}/logs" "${dir}/pids"
    local started=${SECONDS}
    # With a real node the API server serves on this machine's address too: the `kubernetes`
    # Service's endpoint, which kube-proxy sends the pods' in-cluster connections to.
    local ip=127.0.0.1
    if [[ "${real_node}" != 0 ]]; then
        ip="$(node_ip)"
        [[ -n "${ip}" ]] || die "cannot find this machine's address for the real node (SWARM_REAL_NODE=0 leaves it out)"
    fi
    make_pki "${dir}/pki" "${ip}" "${real_node_name}"
    if [[ "${real_node}" != 0 ]]; then
        node_snapshot_host "${dir}"
    fi

    local etcd_client etcd_peer apiserver cm_port sched_port kwok_port
    read -r etcd_client etcd_peer apiserver cm_port sched_port kwok_port < <(free_ports 6)
    local server="https://127.0.0.1:${apiserver}"
    write_kubeconfig "${dir}/kubeconfig" "${dir}/pki" admin "${server}"
    write_kubeconfig "${dir}/controller-manager.kubeconfig" "${dir}/pki" controller-manager "${server}"
    write_kubeconfig "${dir}/scheduler.kubeconfig" "${dir}/pki" scheduler "${server}"

    up_etcd "${dir}" "${etcd_client}" "${etcd_peer}"
    up_apiserver "${dir}" "${kubectl}" "${apiserver}" "${etcd_client}" "${ip}"
    up_controllers "${dir}" "${cm_port}" "${sched_port}" "${kwok_port}"
    up_fake_nodes "${dir}" "${kubectl}" "${sched_port}"
    local real=""
    if [[ "${real_node}" != 0 ]]; then
        node_up "${dir}" "${server}" "${dir}/pki" "${kubectl}"
        real=" and the real node ${real_node_name} (${ip})"
    fi

    trap - EXIT
    say "up in $((SECONDS - started)) s: API server ${server}, ${#nodes[@]} fake nodes${real}"
    say "kubeconfig: ${dir}/kubeconfig (logs in ${dir}/logs)"
}

# up_etcd <dir> <client port> <peer port>: etcd, healthy; its client URL in <dir>/etcd-url.
up_etcd() {
    local dir="$1" client="$2" peer="$3"
    start_component "${dir}" etcd "${etcd_bin}/etcd" \
        --name=default --data-dir="${dir}/etcd" --log-level=warn --unsafe-no-fsync=true \
        --listen-client-urls="http://127.0.0.1:${client}" \
        --advertise-client-urls="http://127.0.0.1:${client}" \
        --listen-peer-urls="http://127.0.0.1:${peer}" \
        --initial-advertise-peer-urls="http://127.0.0.1:${peer}" \
        --initial-cluster="default=http://127.0.0.1:${peer}"
    wait_for "${dir}" "etcd to be healthy" 60 etcd \
        curl -fsS "http://127.0.0.1:${client}/health"
    echo "http://127.0.0.1:${client}" >"${dir}/etcd-url"
}

# up_apiserver <dir> <kubectl> <port> <etcd client port> <ip>: kube-apiserver, ready. With a
# real node (<ip> is this machine's address) it serves on every address, advertising <ip>.
up_apiserver() {
    local dir="$1" kubectl="$2" port="$3" etcd_client="$4" ip="$5" pki="$1/pki"
    local bind_flags=(--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
    if [[ "${real_node}" != 0 ]]; then
        bind_flags=(--bind-address=0.0.0.0 --advertise-address="${ip}")
    fi
    # The audit log records the requests of every ServiceAccount outside kube-system (the
    # operator's among them), so the suite can check what the operator did and that RBAC
    # allowed it. SWARM_AUDIT=0 (the benchmark's clusters) leaves it out: written as each
    # request is answered, it would cost 10,000 workers' reads more than serving them does.
    local audit_flags=()
    if [[ "${audit}" != 0 ]]; then
        cp "${repo_root}/hack/real-cluster/audit-policy.yaml" "${dir}/audit-policy.yaml"
        audit_flags=(--audit-policy-file="${dir}/audit-policy.yaml" --audit-log-path="${dir}/logs/audit.log")
    fi
    start_component "${dir}" kube-apiserver "${kube_bin}/kube-apiserver" \
        "${audit_flags[@]}" \
        --etcd-servers="http://127.0.0.1:${etcd_client}" \
        "${bind_flags[@]}" --secure-port="${port}" \
        --kubelet-client-certificate="${pki}/apiserver-kubelet-client.crt" \
        --kubelet-client-key="${pki}/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types=InternalIP \
        --tls-cert-file="${pki}/apiserver.crt" --tls-private-key-file="${pki}/apiserver.key" \
        --client-ca-file="${pki}/ca.crt" \
        --authorization-mode=Node,RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="${pki}/service-account.pub" \
        --service-account-signing-key-file="${pki}/service-account.key" \
        --service-cluster-ip-range="${service_cidr}" \
        --allow-privileged=true --profiling="$([[ "${profiling}" != 0 ]] && echo true || echo false)"
    wait_for "${dir}" "kube-apiserver to be ready" 120 kube-apiserver \
        "${kubectl}" --kubeconfig "${dir}/kubeconfig" get --raw /readyz
}

# up_controllers <dir> <controller-manager port> <scheduler port> <kwok port>: starts the
# controller-manager, the scheduler and kwok (up_fake_nodes waits for them).
up_controllers() {
    local dir="$1" cm_port="$2" sched_port="$3" kwok_port="$4" pki="$1/pki"
    start_component "${dir}" kube-controller-manager "${kube_bin}/kube-controller-manager" \
        --kubeconfig="${dir}/controller-manager.kubeconfig" \
        --authentication-kubeconfig="${dir}/controller-manager.kubeconfig" \
        --authorization-kubeconfig="${dir}/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="${cm_port}" --leader-elect=false \
        --cluster-name=swarm-test --use-service-account-credentials=true \
        --service-account-private-key-file="${pki}/service-account.key" \
        --root-ca-file="${pki}/ca.crt" --profiling=false \
        --flex-volume-plugin-dir="${dir}/flexvolume"
    start_component "${dir}" kube-scheduler "${kube_bin}/kube-scheduler" \
        --kubeconfig="${dir}/scheduler.kubeconfig" \
        --authentication-kubeconfig="${dir}/scheduler.kubeconfig" \
        --authorization-kubeconfig="${dir}/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="${sched_port}" --leader-elect=false \
        --profiling=false
    # kwok renews a node's Lease every quarter of its duration from its watch cache, so every
    # other update conflicts with its own last one: 20 s renews every 10 s, as a kubelet does.
    start_component "${dir}" kwok "${kwok_bin}/kwok" \
        --kubeconfig="${dir}/kubeconfig" --config="${repo_root}/hack/kwok/stages.yaml" \
        --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
        --node-lease-duration-seconds=20 \
        --server-address="127.0.0.1:${kwok_port}" --node-ip=10.1.0.1 --cidr=10.2.0.0/16
}

# up_fake_nodes <dir> <kubectl> <scheduler port>: the kwok nodes, Ready; then waits for the
# controller-manager and the scheduler to serve.
up_fake_nodes() {
    local dir="$1" scheduler_port="$3" node
    local admin=("$2" --kubeconfig "${dir}/kubeconfig")
    for node in "${nodes[@]}"; do
        cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: ${node}
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: ${node}
    kubernetes.io/os: linux
    type: kwok
---
EOF
    done | "${admin[@]}" apply -f - >/dev/null
    wait_for "${dir}" "the fake nodes to be Ready" 120 kwok \
        "${admin[@]}" wait --for=condition=Ready node --all --timeout=5s
    # The controller-manager is serving once it has given namespace default its ServiceAccount;
    # the scheduler once its health check answers.
    wait_for "${dir}" "kube-controller-manager to run its controllers" 120 kube-controller-manager \
        "${admin[@]}" -n default get serviceaccount default
    wait_for "${dir}" "kube-scheduler to be healthy" 60 kube-scheduler \
        curl -fsSk "https://127.0.0.1:${scheduler_port}/healthz"
}

down() {
    local dir="$1" name
    [[ -d "${dir}/pids" ]] || {
        say "no cluster in ${dir}"
        return 0
    }
    # The real node first (it needs nothing of the control plane to go), then the control
    # plane in the reverse order of start.
    node_down "${dir}"
    for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
        stop_component "${dir}" "${name}"
    done
    say "stopped the cluster in ${dir}"
}

# Fails, naming each, if anything of the cluster in `dir` is left on the machine.
check_clean() {
    local dir="$1" left
    left="$(node_leftovers "${dir}")"
    if [[ -n "${left}" ]]; then
        printf '%s\n' "${left}" >&2
        die "the cluster in ${dir} left the above on this machine"
    fi
    say "nothing of the cluster in ${dir} is left on this machine"
}

# Imports OCI archive `archive` into the real node's containerd as image `name` (NAME:TAG, in
# Docker Hub's library namespace, as an unqualified image name in a pod spec resolves).
load_image() {
    local dir="$1" name="$2" archive="$3"
    [[ -f "${archive}" ]] || die "no image archive ${archive}"
    local repo="${name%:*}"
    [[ "${repo}" == */* ]] || repo="docker.io/library/${repo}"
    ctr_node "${dir}" images import --base-name "${repo}" "${archive}" >/dev/null ||
        die "cannot import ${archive} into the real node of ${dir}"
    # Listed first, then searched: `grep -q` stops reading at the first match, and under
    # pipefail the ctr it cut off would fail the check.
    local listed
    listed="$(ctr_node "${dir}" images ls -q)"
    grep -qxF "${repo}:${name##*:}" <<<"${listed}" ||
        die "${archive} holds no image tagged ${name##*:} (ctr images ls: $(tr '\n' ' ' <<<"${listed}"))"
    say "loaded ${repo}:${name##*:} into ${real_node_name}"
}

case "${1:-}" in
up)
    [[ $# -eq 2 ]] || die "usage: $0 up <DIR>"
    up "$2"
    ;;
down)
    [[ $# -eq 2 ]] || die "usage: $0 down <DIR>"
    down "$(cd "$2" 2>/dev/null && pwd || echo "$2")"
    ;;
build)
    build_all
    ;;
restart)
    [[ $# -ge 3 && $# -le 4 ]] || die "usage: $0 restart <DIR> <COMPONENT> [SECONDS]"
    restart "$(cd "$2" && pwd)" "$3" "${4:-0}"
    ;;
load)
    [[ $# -eq 4 ]] || die "usage: $0 load <DIR> <NAME:TAG> <ARCHIVE>"
    load_image "$(cd "$2" && pwd)" "$3" "$4"
    ;;
ctr)
    [[ $# -ge 2 ]] || die "usage: $0 ctr <DIR> <ARGS...>"
    dir="$(cd "$2" && pwd)"
    shift 2
    ctr_node "${dir}" "$@"
    ;;
check-clean)
    [[ $# -eq 2 ]] || die "usage: $0 check-clean <DIR>"
    check_clean "$(cd "$2" 2>/dev/null && pwd || echo "$2")"
    ;;
signal)
    [[ $# -eq 4 ]] || die "usage: $0 signal <DIR> <COMPONENT> <SIGNAL>"
    dir="$(cd "$2" && pwd)"
    pid="$(component_pid "${dir}" "$3")" || die "component $3 of ${dir} is not running"
    kill -s "$4" "${pid}"
    ;;
*)
    die "usage: $0 up <DIR> | down <DIR> | build | restart <DIR> <COMPONENT> [SECONDS] | signal <DIR> <COMPONENT> <SIGNAL> | load <DIR> <NAME:TAG> <ARCHIVE> | ctr <DIR> <ARGS...> | check-clean <DIR>"
    ;;
esac
