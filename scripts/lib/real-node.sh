# Sourced by scripts/real-cluster.sh: one real node beside the kwok nodes. A kubelet from the
# control plane's Kubernetes module, containerd 2.x with runc, the CNI reference plugins (ptp and
# host-local) and kube-proxy in nftables mode, so pods run as real containers and reach the API
# server through the `kubernetes` Service's ClusterIP, as on any cluster.
#
# Everything the node writes stays under <DIR>/node, with three exceptions `node_down` undoes:
# cgroups under one root of its own in every hierarchy (`swarm-<id>`), kube-proxy's nftables
# tables, and the kernel settings the kubelet changes at start (restored). The node is tainted
# `swarm.io/real-node:NoSchedule`, so the scenarios' kwok workloads never land on it; what is
# meant to run there tolerates the taint and selects the label `swarm.io/real-node=true`.
#
# The caller defines repo_root, cache_root, kube_version, say, die, start, wait_for,
# write_kubeconfig and go_build.

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

containerd_version="$(pinned containerd github.com/containerd/containerd/v2)"
cni_version="$(pinned cni github.com/containernetworking/plugins)"
[[ -n "${containerd_version}" && -n "${cni_version}" ]] ||
    die "cannot read the pinned containerd and CNI versions from hack/{containerd,cni}/go.mod"
# Debian's runc (built with libseccomp, which RuntimeDefault profiles need) and nft (which
# kube-proxy's nftables mode runs), unpacked into the cache, never installed on the host.
debian_pins="${repo_root}/hack/debian/packages"
debian_key="$(sha256sum "${debian_pins}" | cut -c1-12)"
pause_version=3.10.2

node_bin="${cache_root}/kube-node-${kube_version}"
containerd_bin="${cache_root}/containerd-${containerd_version}"
cni_bin="${cache_root}/cni-${cni_version}"
debian_root="${cache_root}/debian-${debian_key}"
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
    say "kubelet, kube-proxy ${kube_version}; containerd ${containerd_version}; CNI plugins ${cni_version}; $(awk '!/^#/ && NF { printf "%s%s %s", sep, $1, $2; sep = ", " }' "${debian_pins}") (Debian)"
}

# apt-get download + dpkg -x of the pinned packages into ${debian_root}.
node_debian_packages() {
    [[ -f "${debian_root}/.built" ]] && return 0
    command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to fetch runc and nft (Debian packages)"
    local partial="${debian_root}.partial" pkg version
    rm -rf "${partial}"
    mkdir -p "${partial}/debs" "${partial}/root"
    while read -r pkg version; do
        [[ -z "${pkg}" || "${pkg}" == \#* ]] && continue
        (cd "${partial}/debs" && apt-get download "${pkg}=${version}" >/dev/null 2>&1) ||
            (apt-get update >/dev/null 2>&1 && cd "${partial}/debs" && apt-get download "${pkg}=${version}" >/dev/null) ||
            die "cannot download the Debian package ${pkg}=${version} (pinned in ${debian_pins})"
    done <"${debian_pins}"
    local deb
    for deb in "${partial}"/debs/*.deb; do dpkg -x "${deb}" "${partial}/root"; done
    [[ -x "${partial}/root/usr/sbin/runc" && -x "${partial}/root/usr/sbin/nft" ]] ||
        die "the packages of ${debian_pins} hold no runc or nft"
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

# node_up <dir> <server> <pki>: starts containerd, the kubelet and kube-proxy, waits until the
# node is Ready.
node_up() {
    local dir="$1" server="$2" pki="$3" n="$1/node"
    local ip cgroup kubelet_port kubelet_healthz proxy_healthz proxy_metrics
    ip="$(node_ip)"
    [[ -n "${ip}" ]] || die "cannot find this machine's address (ip -4 route get 1.1.1.1)"
    cgroup="$(node_cgroup_name "${dir}")"
    read -r kubelet_port kubelet_healthz proxy_healthz proxy_metrics < <(free_ports 4)
    mkdir -p "${n}"/{containerd,runc,cni/net.d,cni/ipam,kubelet,logs}
    echo "${ip}" >"${n}/ip"
    echo "${cgroup}" >"${n}/cgroup"

    # The kubelet needs its cgroup root to exist; a new cpuset cgroup starts with no CPUs.
    local mnt
    while read -r mnt; do
        mkdir -p "${mnt}/${cgroup}"
        if [[ -f "${mnt}/cpuset.cpus" ]]; then
            cat "${mnt}/cpuset.cpus" >"${mnt}/${cgroup}/cpuset.cpus"
            cat "${mnt}/cpuset.mems" >"${mnt}/${cgroup}/cpuset.mems"
        fi
    done < <(cgroup_mounts)

    cat >"${n}/cni/net.d/10-swarm.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "swarm-real-node",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "${n}/cni/ipam",
        "ranges": [[{ "subnet": "${real_node_subnet}", "gateway": "${real_node_gateway}" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF
    cat >"${n}/containerd/config.toml" <<EOF
version = 3
root = "${n}/containerd/root"
state = "${n}/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "${n}/containerd/containerd.sock"
[ttrpc]
  address = "${n}/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "${n}/containerd/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:${pause_version}"
[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE here: a negative oom_score_adj cannot be written.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  enable_criu = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "${debian_root}/root/usr/sbin/runc"
      Root = "${n}/runc"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["${cni_bin}"]
    conf_dir = "${n}/cni/net.d"
    use_internal_loopback = true
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF
    start "${dir}" containerd env PATH="${containerd_bin}:${PATH}" \
        "${containerd_bin}/containerd" --config "${n}/containerd/config.toml"
    wait_for "${dir}" "containerd to serve" 60 containerd ctr_node "${dir}" version
    ctr_node "${dir}" images import --base-name registry.k8s.io/pause "${pause_archive}" >/dev/null 2>&1 ||
        die "cannot import the pause image into containerd"

    write_kubeconfig "${n}/kubelet.kubeconfig" "${pki}" node "${server}"
    write_kubeconfig "${n}/kube-proxy.kubeconfig" "${pki}" kube-proxy "${server}"
    cat >"${n}/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 is all this machine has: 1.37 still supports it when asked.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /${cgroup}
containerRuntimeEndpoint: unix://${n}/containerd/containerd.sock
port: ${kubelet_port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${kubelet_healthz}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ${pki}/ca.crt
authorization:
  mode: Webhook
failSwapOn: false
resolvConf: /etc/resolv.conf
registerWithTaints:
  - key: swarm.io/real-node
    effect: NoSchedule
# The machine's disk is shared with the builds: no eviction or image GC for the tests' sake.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
# Kept under <DIR>, not in /var/log/pods and /usr/libexec/kubernetes.
podLogsDir: ${n}/pod-logs
volumePluginDir: ${n}/kubelet/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
    start "${dir}" kubelet "${node_bin}/kubelet" \
        --config="${n}/kubelet.yaml" --kubeconfig="${n}/kubelet.kubeconfig" \
        --root-dir="${n}/kubelet" --cert-dir="${n}/kubelet/pki" \
        --hostname-override="${real_node_name}" --node-ip="${ip}" \
        --node-labels="swarm.io/real-node=true"

    cat >"${n}/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: ${n}/kube-proxy.kubeconfig
hostnameOverride: ${real_node_name}
clusterCIDR: ${real_node_subnet}
healthzBindAddress: 127.0.0.1:${proxy_healthz}
metricsBindAddress: 127.0.0.1:${proxy_metrics}
nodePortAddresses: ["primary"]
# Leave the machine's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
    start "${dir}" kube-proxy env PATH="${debian_root}/root/usr/sbin:${PATH}" \
        LD_LIBRARY_PATH="${debian_root}/root/usr/lib/x86_64-linux-gnu" \
        "${node_bin}/kube-proxy" --config="${n}/kube-proxy.yaml"

    local admin=("${kubectl}" --kubeconfig "${dir}/kubeconfig")
    wait_for "${dir}" "the real node to register" 120 kubelet "${admin[@]}" get node "${real_node_name}"
    wait_for "${dir}" "the real node to be Ready" 120 kubelet \
        "${admin[@]}" wait --for=condition=Ready node "${real_node_name}" --timeout=5s
    wait_for "${dir}" "kube-proxy to sync its rules" 60 kube-proxy \
        curl -fsS "http://127.0.0.1:${proxy_healthz}/healthz"
}

# Stops the node's processes and removes everything they left on the machine. Safe to run on a
# node that never started or is half gone.
node_down() {
    local dir="$1" n="$1/node" name pid
    [[ -d "${n}" ]] || return 0
    local cgroup
    cgroup="$(cat "${n}/cgroup" 2>/dev/null || node_cgroup_name "${dir}")"
    for name in kube-proxy kubelet; do
        stop_component "${dir}" "${name}"
    done
    # The containers' processes: every process in the node's cgroups (the pods' and the
    # shims'), then the shims and containerd.
    local round
    for round in 1 2 3 4 5; do
        local pids
        pids="$(node_cgroup_pids "${cgroup}")"
        [[ -z "${pids}" ]] && break
        # shellcheck disable=SC2086
        kill -KILL ${pids} 2>/dev/null || true
        sleep 0.2
    done
    stop_component "${dir}" containerd
    for pid in $(pgrep -f -- "${n}/" || true); do
        kill -KILL "${pid}" 2>/dev/null || true
    done

    # Mounts under the node's directory (container root file systems, the kubelet's volumes and
    # its bind-mounted root, network namespaces), deepest first.
    local mounts
    for round in 1 2 3; do
        mapfile -t mounts < <(awk -v p="${n}/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
        ((${#mounts[@]} == 0)) && break
        for name in "${mounts[@]}"; do
            umount "${name}" 2>/dev/null || umount -l "${name}" 2>/dev/null || true
        done
    done
    # cgroups, innermost first.
    local mnt
    while read -r mnt; do
        [[ -d "${mnt}/${cgroup}" ]] || continue
        find "${mnt}/${cgroup}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done < <(cgroup_mounts)
    # What follows is the machine's, not this directory's: only the node's owner removes it.
    [[ -f "${n}/owner" ]] || return 0
    # Host ends of the pods' veth pairs (gone with their namespaces, unless one is held).
    local link
    for link in $(ip -o -4 addr show 2>/dev/null | awk -v gw="${real_node_gateway}/32" '$4 == gw { print $2 }'); do
        ip link delete "${link}" 2>/dev/null || true
    done
    # kube-proxy's tables (it has no rules anywhere else in nftables mode).
    local family
    for family in ip ip6; do
        node_nft delete table "${family}" kube-proxy 2>/dev/null || true
    done
    # Shim sockets containerd keeps in /run/containerd/s, whatever its state directory.
    if [[ -d /run/containerd/s ]]; then
        local sock
        for sock in $(ls -A /run/containerd/s); do
            grep -qxF "${sock}" "${n}/shim-sockets-before" 2>/dev/null || rm -f "/run/containerd/s/${sock}"
        done
        if [[ ! -s "${n}/shim-sockets-before" ]]; then
            rmdir /run/containerd/s /run/containerd 2>/dev/null || true
        fi
    fi
    # What the daemons wrote outside <DIR>: the links to this node's container logs, and every
    # path of node_host_paths that did not exist before `up`.
    local link_path
    for link_path in /var/log/containers/*; do
        [[ -L "${link_path}" && "$(readlink "${link_path}")" == "${n}/"* ]] && rm -f "${link_path}"
    done
    if [[ -f "${n}/host-paths-before" ]]; then
        local path
        for path in "${node_host_paths[@]}"; do
            grep -qxF "${path}" "${n}/host-paths-before" || rm -rf "${path}"
        done
    fi
    if [[ -f "${n}/sysctls-before" ]]; then
        while IFS='=' read -r key value; do
            sysctl -qw "${key}=${value}" 2>/dev/null || say "cannot restore ${key}=${value}"
        done <"${n}/sysctls-before"
        rm -f "${n}/sysctls-before"
    fi
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
    local dir="$1" n="$1/node" cgroup mnt
    cgroup="$(cat "${n}/cgroup" 2>/dev/null || node_cgroup_name "${dir}")"
    awk -v p="${dir}/" 'index($2, p) == 1 { print "mount: " $2 }' /proc/self/mounts
    while read -r mnt; do
        [[ -d "${mnt}/${cgroup}" ]] && echo "cgroup: ${mnt}/${cgroup}"
    done < <(cgroup_mounts)
    local pid
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
    local path
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
