# shellcheck shell=bash
# Sourced by scripts/real-cluster.sh: one real node beside the kwok nodes. A kubelet from the
# control plane's Kubernetes module, containerd 2.x with runc, the CNI reference plugins (ptp and
# host-local) and kube-proxy in nftables mode, so pods run as real containers and reach the API
# server through the `kubernetes` Service's ClusterIP, as on any cluster.
#
# Everything the node writes stays under <DIR>/node, with three exceptions `node_down` undoes:
# cgroups under one root of its own in every hierarchy (`swarm-<id>`), kube-proxy's nftables
# tables, and the kernel settings the kubelet changes at start (restored). The node is tainted
# `swarm.io/real-node:NoSchedule`, so the scenarios' kwok workloads never land on it; what is
# meant to run there tolerates the taint and selects the label `swarm.io/real-node=true`. Its
# configuration files are the templates of hack/real-node/, rendered into <DIR>/node.
#
#   node_build                          builds (once per version) what the node runs
#   node_ip                             this machine's address for the node
#   node_snapshot_host <dir>            records what node_down restores (before `up` starts)
#   node_up <dir> <server> <pki-dir> <kubectl>
#                                       starts the node, waits until it is Ready
#   node_down <dir>                     stops it and removes what it left on the machine
#   node_leftovers <dir>                prints what it left, nothing when clean
#   ctr_node <dir> <args...>            ctr against its containerd
#
# Globals it reads: repo_root and cache_root (common.sh); kube_version, the Kubernetes version
# of hack/kube/go.mod (read here unless the caller has set it).
# Globals it sets: real_node_name, real_node_subnet, real_node_gateway, node_host_paths,
# kubelet_sysctls, containerd_version, cni_version, pause_version, node_debian_pins,
# node_templates, and the build directories node_bin, containerd_bin, cni_bin, debian_root and
# pause_archive.

[[ -n "${swarm_lib_real_node:-}" ]] && return 0
swarm_lib_real_node=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/lib/components.sh
source "${repo_root}/scripts/lib/components.sh"
# shellcheck source=scripts/lib/kubeconfig.sh
source "${repo_root}/scripts/lib/kubeconfig.sh"
# shellcheck source=scripts/lib/debian.sh
source "${repo_root}/scripts/lib/debian.sh"
# shellcheck source=scripts/lib/go-build.sh
source "${repo_root}/scripts/lib/go-build.sh"

real_node_name=real-node
real_node_subnet=10.244.0.0/24
real_node_gateway=10.244.0.1
# Paths outside <DIR> the daemons write whatever their configuration says: the kubelet's
# device-plugin socket directory and its /var/log/containers links, and the CNI result cache
# of containerd's CNI library. `down` removes each one that was not there before `up`.
node_host_paths=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni
    /usr/libexec/kubernetes /run/containerd)
# The kernel settings the kubelet sets at start (pkg/kubelet/cm/container_manager_linux.go).
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

kube_version="${kube_version:-$(pinned kube k8s.io/kubernetes)}"
containerd_version="$(pinned containerd github.com/containerd/containerd/v2)"
cni_version="$(pinned cni github.com/containernetworking/plugins)"
[[ -n "${kube_version}" && -n "${containerd_version}" && -n "${cni_version}" ]] ||
    die "cannot read the pinned Kubernetes, containerd and CNI versions from hack/{kube,containerd,cni}/go.mod"
# Debian's runc (built with libseccomp, which RuntimeDefault profiles need) and nft (which
# kube-proxy's nftables mode runs), unpacked into the cache, never installed on the host.
node_debian_pins="${repo_root}/hack/debian/packages"
pause_version=3.10.2
node_templates="${repo_root}/hack/real-node"

node_bin="${cache_root}/kube-node-${kube_version}"
containerd_bin="${cache_root}/containerd-${containerd_version}"
cni_bin="${cache_root}/cni-${cni_version}"
debian_root="${cache_root}/debian-$(sha256sum "${node_debian_pins}" | cut -c1-12)"
pause_archive="${cache_root}/pause-${pause_version}-${kube_version}/pause.tar"

# Builds (once per version) everything the node runs.
node_build() {
    go_build kube "${node_bin}" "-s -w -X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitTreeState=clean" \
        -tags selinux,notest -- k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
    go_build containerd "${containerd_bin}" \
        "-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version}" \
        -tags "no_btrfs no_devmapper no_zfs" -- \
        github.com/containerd/containerd/v2/cmd/containerd \
        github.com/containerd/containerd/v2/cmd/ctr \
        github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    go_build cni "${cni_bin}" "-s -w" -- \
        github.com/containernetworking/plugins/plugins/main/ptp \
        github.com/containernetworking/plugins/plugins/ipam/host-local
    node_debian_packages
    node_pause_image
    say "kubelet, kube-proxy ${kube_version}; containerd ${containerd_version}; CNI plugins ${cni_version}; $(awk '!/^#/ && NF { printf "%s%s %s", sep, $1, $2; sep = ", " }' "${node_debian_pins}") (Debian)"
}

# The pinned packages, downloaded and unpacked into ${debian_root}.
node_debian_packages() {
    [[ -f "${debian_root}/.built" ]] && return 0
    local partial="${debian_root}.partial" specs=()
    rm -rf "${partial}"
    mkdir -p "${partial}/debs" "${partial}/root"
    mapfile -t specs < <(debian_pins "${node_debian_pins}")
    debian_fetch "${partial}/debs" "${specs[@]}" ||
        die "cannot download runc and nft, the Debian packages pinned in ${node_debian_pins}"
    debian_unpack "${partial}/root" "${partial}"/debs/*.deb ||
        die "cannot unpack the Debian packages of ${partial}/debs"
    [[ -x "${partial}/root/usr/sbin/runc" && -x "${partial}/root/usr/sbin/nft" ]] ||
        die "the packages of ${node_debian_pins} hold no runc or nft"
    touch "${partial}/.built"
    rm -rf "${debian_root}"
    mv "${partial}" "${debian_root}"
}

# The sandbox ("pause") image, from the Kubernetes module's own source, built static, as an OCI
# archive under the name containerd looks for.
node_pause_image() {
    [[ -f "${pause_archive}" ]] && return 0
    local src="${cache_root}/gomod/k8s.io/kubernetes@${kube_version}/build/pause/linux/pause.c"
    [[ -f "${src}" ]] || die "no ${src}: the Kubernetes module is not in the module cache"
    local umoci work
    umoci="$("${repo_root}/scripts/install-umoci.sh")" || die "cannot install umoci"
    work="$(mktemp -d "${TMPDIR:-/tmp}/swarm-pause.XXXXXX")"
    mkdir -p "${work}/rootfs"
    gcc -Os -Wall -Werror -static -DVERSION="v${pause_version}-swarm" -o "${work}/rootfs/pause" "${src}" ||
        die "cannot compile ${src} (gcc -static)"
    strip "${work}/rootfs/pause"
    (
        cd "${work}"
        "${umoci}" init --layout layout
        "${umoci}" new --image "layout:${pause_version}"
        "${umoci}" insert --image "layout:${pause_version}" --history.created 1970-01-01T00:00:00Z \
            rootfs/pause /pause
        "${umoci}" config --image "layout:${pause_version}" --created 1970-01-01T00:00:00Z \
            --history.created 1970-01-01T00:00:00Z --config.user 65535:65535 \
            --config.entrypoint /pause
        "${umoci}" gc --layout layout
        tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C layout -cf pause.tar .
    ) >/dev/null || die "cannot write the pause image (work dir ${work})"
    mkdir -p "$(dirname "${pause_archive}")"
    mv "${work}/pause.tar" "${pause_archive}"
    rm -rf "${work}"
}

# The address pods and the API server reach this machine on: the source address of the
# default route.
node_ip() {
    ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }'
}

node_cgroup_name() { echo "swarm-$(echo "$1" | sha256sum | cut -c1-10)"; }

# Every cgroup v1 hierarchy and the cgroup2 mount of this machine.
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts; }

# ctr against the node's containerd, without its warning on every call that cgroup v1 is
# deprecated.
ctr_node() {
    local dir="$1"
    shift
    "${containerd_bin}/ctr" --address "${dir}/node/containerd/containerd.sock" -n k8s.io "$@" \
        2> >(grep -v 'support for cgroup v1 is deprecated' >&2)
}

# Records what `down` must restore or leave: the kernel settings the kubelet changes, the shim
# sockets and the host paths that exist already. Called before the first component starts.
node_snapshot_host() {
    local n="$1/node" key path other
    # One real node per machine: the pod network's addresses, kube-proxy's tables and the
    # paths above are the machine's, so only the cluster that owns the node (`owner` in its
    # directory) may remove them.
    if other="$(pgrep -a -f -- "${node_bin}/kubelet")"; then
        die "another cluster's real node runs on this machine (${other}); take it down first, or set SWARM_REAL_NODE=0"
    fi
    mkdir -p "${n}"
    touch "${n}/owner"
    for key in "${kubelet_sysctls[@]}"; do
        printf '%s=%s\n' "${key}" "$(sysctl -n "${key}")"
    done >"${n}/sysctls-before"
    ls -A /run/containerd/s 2>/dev/null >"${n}/shim-sockets-before" || true
    for path in "${node_host_paths[@]}"; do
        [[ -e "${path}" ]] && echo "${path}"
    done >"${n}/host-paths-before"
    return 0
}

# node_up <dir> <server> <pki> <kubectl>: starts containerd, the kubelet and kube-proxy, waits
# until the node is Ready.
node_up() {
    local dir="$1" server="$2" pki="$3" kubectl="$4" n="$1/node"
    local ip cgroup kubelet_port kubelet_healthz proxy_healthz proxy_metrics
    ip="$(node_ip)"
    [[ -n "${ip}" ]] || die "cannot find this machine's address (ip -4 route get 1.1.1.1)"
    cgroup="$(node_cgroup_name "${dir}")"
    read -r kubelet_port kubelet_healthz proxy_healthz proxy_metrics < <(free_ports 4)
    mkdir -p "${n}"/{containerd/certs.d,runc,cni/net.d,cni/ipam,kubelet,logs}
    echo "${ip}" >"${n}/ip"
    echo "${cgroup}" >"${n}/cgroup"
    node_make_cgroup "${cgroup}"
    node_start_containerd "${dir}"
    write_kubeconfig "${n}/kubelet.kubeconfig" "${pki}" node "${server}"
    write_kubeconfig "${n}/kube-proxy.kubeconfig" "${pki}" kube-proxy "${server}"
    node_start_kubelet "${dir}" "${pki}" "${ip}" "${cgroup}" "${kubelet_port}" "${kubelet_healthz}"
    node_start_kube_proxy "${dir}" "${proxy_healthz}" "${proxy_metrics}"

    local admin=("${kubectl}" --kubeconfig "${dir}/kubeconfig")
    wait_for "${dir}" "the real node to register" 120 kubelet "${admin[@]}" get node "${real_node_name}"
    wait_for "${dir}" "the real node to be Ready" 120 kubelet \
        "${admin[@]}" wait --for=condition=Ready node "${real_node_name}" --timeout=5s
    wait_for "${dir}" "kube-proxy to sync its rules" 60 kube-proxy \
        curl -fsS "http://127.0.0.1:${proxy_healthz}/healthz"
}

# The kubelet needs its cgroup root to exist in every hierarchy; a new cpuset cgroup starts with
# no CPUs.
node_make_cgroup() {
    local cgroup="$1" mnt
    while read -r mnt; do
        mkdir -p "${mnt}/${cgroup}"
        if [[ -f "${mnt}/cpuset.cpus" ]]; then
            cat "${mnt}/cpuset.cpus" >"${mnt}/${cgroup}/cpuset.cpus"
            cat "${mnt}/cpuset.mems" >"${mnt}/${cgroup}/cpuset.mems"
        fi
    done < <(cgroup_mounts)
}

# containerd with the CNI configuration, serving, with the pause image imported.
node_start_containerd() {
    local dir="$1" n="$1/node"
    render "${node_templates}/10-swarm.conflist.tmpl" "${n}/cni/net.d/10-swarm.conflist" \
        NODE_DIR="${n}" SUBNET="${real_node_subnet}" GATEWAY="${real_node_gateway}"
    render "${node_templates}/containerd.toml.tmpl" "${n}/containerd/config.toml" \
        NODE_DIR="${n}" PAUSE_VERSION="${pause_version}" RUNC="${debian_root}/root/usr/sbin/runc" \
        CNI_BIN_DIR="${cni_bin}"
    start_component "${dir}" containerd env PATH="${containerd_bin}:${PATH}" \
        "${containerd_bin}/containerd" --config "${n}/containerd/config.toml"
    wait_for "${dir}" "containerd to serve" 60 containerd ctr_node "${dir}" --timeout 10s version
    ctr_node "${dir}" images import --base-name registry.k8s.io/pause "${pause_archive}" >/dev/null 2>&1 ||
        die "cannot import the pause image into containerd"
}

# node_start_kubelet <dir> <pki> <ip> <cgroup> <port> <healthz port>
node_start_kubelet() {
    local dir="$1" pki="$2" ip="$3" cgroup="$4" port="$5" healthz="$6" n="$1/node"
    render "${node_templates}/kubelet.yaml.tmpl" "${n}/kubelet.yaml" \
        NODE_DIR="${n}" CGROUP="${cgroup}" PORT="${port}" HEALTHZ_PORT="${healthz}" PKI_DIR="${pki}"
    start_component "${dir}" kubelet "${node_bin}/kubelet" \
        --config="${n}/kubelet.yaml" --kubeconfig="${n}/kubelet.kubeconfig" \
        --root-dir="${n}/kubelet" --cert-dir="${n}/kubelet/pki" \
        --hostname-override="${real_node_name}" --node-ip="${ip}" \
        --node-labels="swarm.io/real-node=true"
}

# node_start_kube_proxy <dir> <healthz port> <metrics port>
node_start_kube_proxy() {
    local dir="$1" healthz="$2" metrics="$3" n="$1/node"
    render "${node_templates}/kube-proxy.yaml.tmpl" "${n}/kube-proxy.yaml" \
        NODE_DIR="${n}" NODE_NAME="${real_node_name}" CLUSTER_CIDR="${real_node_subnet}" \
        HEALTHZ_PORT="${healthz}" METRICS_PORT="${metrics}"
    start_component "${dir}" kube-proxy env PATH="${debian_root}/root/usr/sbin:${PATH}" \
        LD_LIBRARY_PATH="${debian_root}/root/usr/lib/x86_64-linux-gnu" \
        "${node_bin}/kube-proxy" --config="${n}/kube-proxy.yaml"
}

# Stops the node's processes and removes everything they left on the machine. Safe to run on a
# node that never started or is half gone.
node_down() {
    local dir="$1" n="$1/node" cgroup
    [[ -d "${n}" ]] || return 0
    cgroup="$(cat "${n}/cgroup" 2>/dev/null || node_cgroup_name "${dir}")"
    stop_component "${dir}" kube-proxy
    stop_component "${dir}" kubelet
    node_kill_containers "${dir}" "${cgroup}"
    node_unmount "${n}"
    node_remove_cgroups "${cgroup}"
    # What follows is the machine's, not this directory's: only the node's owner removes it.
    [[ -f "${n}/owner" ]] || return 0
    node_remove_network
    node_remove_shim_sockets "${n}"
    node_remove_host_paths "${n}"
    node_restore_sysctls "${n}"
}

# The containers' processes: every process in the node's cgroups (the pods' and the shims'),
# then the shims and containerd, then whatever still runs from the node's directory.
node_kill_containers() {
    local dir="$1" cgroup="$2" pids=() pid
    for _ in 1 2 3 4 5; do
        read -r -a pids <<<"$(node_cgroup_pids "${cgroup}")"
        ((${#pids[@]} == 0)) && break
        kill -KILL "${pids[@]}" 2>/dev/null || true
        sleep 0.2
    done
    stop_component "${dir}" containerd
    for pid in $(pgrep -f -- "${dir}/node/" || true); do
        kill -KILL "${pid}" 2>/dev/null || true
    done
}

# Mounts under the node's directory (container root file systems, the kubelet's volumes and its
# bind-mounted root, network namespaces), deepest first.
node_unmount() {
    local n="$1" mounts=() mnt
    for _ in 1 2 3; do
        mapfile -t mounts < <(awk -v p="${n}/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
        ((${#mounts[@]} == 0)) && break
        for mnt in "${mounts[@]}"; do
            umount "${mnt}" 2>/dev/null || umount -l "${mnt}" 2>/dev/null || true
        done
    done
}

# The node's cgroups, innermost first.
node_remove_cgroups() {
    local cgroup="$1" mnt
    while read -r mnt; do
        [[ -d "${mnt}/${cgroup}" ]] || continue
        find "${mnt}/${cgroup}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done < <(cgroup_mounts)
}

# Host ends of the pods' veth pairs (gone with their namespaces, unless one is held), and
# kube-proxy's tables (it has no rules anywhere else in nftables mode).
node_remove_network() {
    local link family
    for link in $(ip -o -4 addr show 2>/dev/null | awk -v gw="${real_node_gateway}/32" '$4 == gw { print $2 }'); do
        ip link delete "${link}" 2>/dev/null || true
    done
    for family in ip ip6; do
        node_nft delete table "${family}" kube-proxy 2>/dev/null || true
    done
}

# Shim sockets containerd keeps in /run/containerd/s, whatever its state directory: those that
# were not there before `up`.
node_remove_shim_sockets() {
    local n="$1" sock
    [[ -d /run/containerd/s ]] || return 0
    while IFS= read -r sock; do
        grep -qxF "${sock}" "${n}/shim-sockets-before" 2>/dev/null || rm -f "/run/containerd/s/${sock}"
    done < <(find /run/containerd/s -mindepth 1 -maxdepth 1 -printf '%f\n')
    if [[ ! -s "${n}/shim-sockets-before" ]]; then
        rmdir /run/containerd/s /run/containerd 2>/dev/null || true
    fi
}

# What the daemons wrote outside <DIR>: the links to this node's container logs, and every path
# of node_host_paths that did not exist before `up`.
node_remove_host_paths() {
    local n="$1" link_path path
    for link_path in /var/log/containers/*; do
        [[ -L "${link_path}" && "$(readlink "${link_path}")" == "${n}/"* ]] && rm -f "${link_path}"
    done
    [[ -f "${n}/host-paths-before" ]] || return 0
    for path in "${node_host_paths[@]}"; do
        grep -qxF "${path}" "${n}/host-paths-before" || rm -rf "${path}"
    done
}

# The kernel settings as they were before `up`.
node_restore_sysctls() {
    local n="$1" key value
    [[ -f "${n}/sysctls-before" ]] || return 0
    while IFS='=' read -r key value; do
        sysctl -qw "${key}=${value}" 2>/dev/null || say "cannot restore ${key}=${value}"
    done <"${n}/sysctls-before"
    rm -f "${n}/sysctls-before"
}

node_nft() {
    PATH="${debian_root}/root/usr/sbin:${PATH}" LD_LIBRARY_PATH="${debian_root}/root/usr/lib/x86_64-linux-gnu" nft "$@"
}

# The pids of every process in the node's cgroups.
node_cgroup_pids() {
    local cgroup="$1" mnt
    while read -r mnt; do
        [[ -d "${mnt}/${cgroup}" ]] || continue
        find "${mnt}/${cgroup}" -name cgroup.procs -exec cat {} + 2>/dev/null
    done < <(cgroup_mounts) | sort -u | tr '\n' ' '
}

# What the node leaves on the machine: prints one line per leftover, nothing when clean.
node_leftovers() {
    local dir="$1" n="$1/node" cgroup mnt pid
    cgroup="$(cat "${n}/cgroup" 2>/dev/null || node_cgroup_name "${dir}")"
    awk -v p="${dir}/" 'index($2, p) == 1 { print "mount: " $2 }' /proc/self/mounts
    while read -r mnt; do
        [[ -d "${mnt}/${cgroup}" ]] && echo "cgroup: ${mnt}/${cgroup}"
    done < <(cgroup_mounts)
    for pid in $(pgrep -f -- "${dir}/" || true); do
        [[ "${pid}" == "$$" ]] && continue
        echo "process: ${pid} $(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)"
    done
    # The machine's own state, when this cluster owned the node.
    [[ -f "${n}/owner" ]] || return 0
    ip -o -4 addr show 2>/dev/null | awk -v gw="${real_node_gateway}/32" '$4 == gw { print "interface: " $2 }'
    if [[ -x "${debian_root}/root/usr/sbin/nft" ]]; then
        node_nft list tables 2>/dev/null | awk '$3 == "kube-proxy" { print "nftables: " $0 }'
    fi
    if command -v iptables-save >/dev/null 2>&1; then
        iptables-save 2>/dev/null | grep -E '^:KUBE-|-j KUBE-' | sed 's/^/iptables: /'
    fi
    if [[ -f "${n}/sysctls-before" ]]; then
        echo "sysctls: not restored (${n}/sysctls-before)"
    fi
    node_host_path_leftovers "${n}"
}

# The paths of node_host_paths that `up` made and `down` left, and the links to this node's
# container logs.
node_host_path_leftovers() {
    local n="$1" path
    for path in "${node_host_paths[@]}"; do
        [[ -e "${path}" ]] || continue
        if [[ ! -f "${n}/host-paths-before" ]] || ! grep -qxF "${path}" "${n}/host-paths-before"; then
            echo "path: ${path}"
        fi
    done
    for path in /var/log/containers/*; do
        [[ -L "${path}" && "$(readlink "${path}")" == "${n}/"* ]] && echo "log link: ${path}"
    done
    return 0
}
