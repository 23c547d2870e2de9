#!/bin/bash
# The pod network of the kind tier, per node: what kindnetd does in a kind cluster, whose image
# cannot be pulled here. Runs as the DaemonSet of hack/kind-network.yaml (host network, privileged,
# the node's /etc/cni/net.d mounted), in an image hack/build-kind-node.sh builds from the node's own
# rootfs (ip, iptables, jq) plus kubectl, and preloads into the node image.
#
# Every few seconds it reads the Nodes (in-cluster credentials: get/list nodes) and
#   - writes this node's bridge CNI config from its spec.podCIDR (host-local IPAM on that subnet),
#     so pods on different nodes get addresses from different subnets; containerd picks the file
#     up and the kubelet turns the node Ready;
#   - routes every other node's podCIDR via that node's InternalIP (all nodes share one Docker
#     network, so the next hop is directly reachable): pod-to-pod traffic crosses nodes unmasked,
#     with the source pod's address, which NetworkPolicy enforcement depends on;
#   - masquerades only traffic from this node's pods to outside the cluster's pod subnet (the
#     bridge plugin's own ipMasq would hide pod addresses from other nodes too).
# Routes of deleted Nodes are left in place (a kind cluster's nodes live as long as it does).
#
# Env: NODE_NAME (the downward API's spec.nodeName), POD_SUBNET (the cluster's pod CIDR,
# networking.podSubnet of hack/kind-cluster.yaml), INTERVAL_S (default 5).
set -uo pipefail

: "${NODE_NAME:?NODE_NAME is not set}" "${POD_SUBNET:?POD_SUBNET is not set}"
CONF=/etc/cni/net.d/10-kind-pod-network.conflist
INTERVAL_S="${INTERVAL_S:-5}"

log() { printf '%s kind-pod-network node=%s %s\n' "$(date -u +%FT%TZ)" "${NODE_NAME}" "$*"; }

cni_config() {  # podCIDR
  cat <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kind-pod-network",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$1"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

sync_once() {
  local nodes name cidr ip want
  nodes="$(kubectl get nodes -o json | jq -r '.items[] | [.metadata.name, (.spec.podCIDR // "-"),
    ([.status.addresses[]? | select(.type == "InternalIP") | .address][0] // "-")] | @tsv')" || return 1
  while IFS=$'\t' read -r name cidr ip; do
    [[ -n "${name}" && "${cidr}" != "-" && "${ip}" != "-" ]] || continue
    if [[ "${name}" == "${NODE_NAME}" ]]; then
      want="$(cni_config "${cidr}")"
      if [[ "$(cat "${CONF}" 2>/dev/null)" != "${want}" ]]; then
        # libcni reads only *.conf, *.conflist and *.json: the temporary name is never half-read.
        printf '%s\n' "${want}" >"${CONF}.tmp" && mv -f "${CONF}.tmp" "${CONF}"
        log "msg=\"wrote CNI config\" podCIDR=${cidr}"
      fi
      iptables -t nat -C POSTROUTING -s "${cidr}" ! -d "${POD_SUBNET}" -m comment \
        --comment kind-pod-network -j MASQUERADE 2>/dev/null \
        || iptables -t nat -A POSTROUTING -s "${cidr}" ! -d "${POD_SUBNET}" -m comment \
          --comment kind-pod-network -j MASQUERADE
    elif [[ "$(ip -4 route show "${cidr}")" != *"via ${ip} "* ]]; then
      ip route replace "${cidr}" via "${ip}" && log "msg=\"route added\" dst=${cidr} via=${ip} peer=${name}"
    fi
  done <<<"${nodes}"
}

# Forwarding between the pod bridge and the node's interface (the bridge plugin enables it too,
# but only once a first pod is set up).
sysctl -qw net.ipv4.ip_forward=1
trap 'log "msg=\"stopping\""; exit 0' TERM INT
log "msg=\"started\" podSubnet=${POD_SUBNET}"
while true; do
  sync_once || log "msg=\"listing nodes failed; retrying\""
  sleep "${INTERVAL_S}" &
  wait $!
done
