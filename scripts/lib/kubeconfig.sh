# shellcheck shell=bash
# Sourced by scripts/real-cluster.sh and scripts/lib/real-node.sh: the cluster's certificates
# and kubeconfigs.
#
#   make_pki <pki-dir> <ip> <node-name>
#                       a CA, the API server's serving certificate (for 127.0.0.1, <ip> and
#                       the `kubernetes` Service's names), a client certificate per identity of
#                       the control plane and of the real node <node-name>, and the
#                       service-account signing key
#   write_kubeconfig <file> <pki-dir> <name> <server>
#                       a kubeconfig for client certificate <pki-dir>/<name>.crt against
#                       <server>, certificates embedded
#
# Globals it reads: none of its own (common.sh's die).

[[ -n "${swarm_lib_kubeconfig:-}" ]] && return 0
swarm_lib_kubeconfig=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# pki_sign <name> <subject> <extensions>, in the PKI directory: a key and a certificate signed
# by ca.key.
pki_sign() {
    openssl req -new -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}

make_pki() {
    local pki="$1" ip="$2" node_name="$3"
    command -v openssl >/dev/null 2>&1 || die "openssl is needed to make the cluster's certificates"
    mkdir -p "${pki}"
    (
        cd "${pki}" || exit 1
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=swarm-test-ca" \
            -keyout ca.key -out ca.crt 2>/dev/null
        pki_sign apiserver "/CN=kube-apiserver" \
            "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:${ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
        pki_sign admin "/O=system:masters/CN=swarm-admin" "extendedKeyUsage=clientAuth"
        pki_sign controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
        pki_sign scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
        # The real node's kubelet and kube-proxy, and the API server's identity towards kubelets
        # (for logs, exec and port-forward).
        pki_sign node "/O=system:nodes/CN=system:node:${node_name}" "extendedKeyUsage=clientAuth"
        pki_sign kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
        pki_sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
        openssl genrsa -out service-account.key 2048 2>/dev/null
        openssl rsa -in service-account.key -pubout -out service-account.pub 2>/dev/null
    )
}

write_kubeconfig() {
    local file="$1" pki="$2" name="$3" server="$4"
    cat >"${file}" <<EOF_KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: swarm-test
    cluster:
      server: ${server}
      certificate-authority-data: $(base64 -w0 <"${pki}/ca.crt")
users:
  - name: ${name}
    user:
      client-certificate-data: $(base64 -w0 <"${pki}/${name}.crt")
      client-key-data: $(base64 -w0 <"${pki}/${name}.key")
contexts:
  - name: swarm-test
    context:
      cluster: swarm-test
      user: ${name}
current-context: swarm-test
EOF_KUBECONFIG
}
