#!/usr/bin/env bash
# Build a kind node image here, with no registry: `kind create cluster --image <it>` then works with
# the unmodified kind CLI. (`kind build node-image` cannot: it `ctr pull`s kindnetd, pause, etcd,
# CoreDNS and the local-path images from registries this machine cannot reach.)
#
# What it assembles, in kind's node layout (the kind module's images/base files: systemd units,
# containerd config, entrypoint, /kind/version):
#   - a Debian bookworm rootfs (debootstrap) with systemd, Debian's containerd and runc, the CNI
#     plugins, iptables/nftables, jq (kind's OCI hook needs it), ...;
#   - kubelet, kubeadm, kube-proxy built from source at KUBERNETES_VERSION (the test control
#     plane's, hack/versions.env) and the cached kubectl;
#   - the images kubeadm asks for (`kubeadm config images list`), built locally from the cached
#     control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) and
#     kube-proxy, plus a pause image (a Go program that waits for SIGTERM), shipped in /kind/images
#     and imported into containerd at boot (kind-preload.service, before the kubelet);
#   - CoreDNS at the version kubeadm asks for, built from the Go module proxy, under the tag kubeadm
#     expects, so kubeadm's CoreDNS Deployment runs unchanged (cluster DNS);
#   - the cluster add-ons of the kind tier, also preloaded: kube-network-policies (the NetworkPolicy
#     agent kindnetd embeds; KUBE_NETWORK_POLICIES_VERSION; its queue verdicts given as the xtables
#     NFQUEUE target for kernels without nft_queue, see below), the LeaderWorkerSet controller
#     (LWS_VERSION, the binary hack/build-control-plane.sh builds) and the pod network agent
#     (hack/kind-pod-network.sh: per-node bridge CNI config and routes between nodes, what kindnetd
#     does; its image cannot be pulled here). No static CNI config: a node turns Ready once the
#     agent (hack/kind-network.yaml) has written its own from the node's spec.podCIDR.
#   - next to the image, what the recipe applies: ${WORK}/manifests/kube-network-policies.yaml (the
#     module's install.yaml with the image built here) and ${WORK}/charts/lws (LWS's Helm chart).
# Not built: the local-path provisioner (kind falls back to its built-in storage manifest, whose
# pods cannot pull).
#
# On a host whose capability bounding set lacks CAP_SYS_RESOURCE, containerd in the node gets
# `restrict_oom_score_adj = true` (nothing may lower oom_score_adj there); the Docker daemon of
# hack/docker-daemon.sh already runs privileged containers through its runc wrapper. On a cgroup v1
# host the kubelet needs `failCgroupV1: false`, which hack/kind-cluster.yaml sets.
#
# Cache: ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/kind/ (binaries with version stamps, build
# context); images in the Docker daemon. A warm re-run takes seconds.
#
# Usage: hack/build-kind-node.sh
# Prints `DOCKER_HOST=<value> NODE_IMAGE=<tag> KIND=<path to the kind CLI>` on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"
CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
WORK="${CACHE}/kind"
KBIN="${WORK}/bin"
K="${KUBERNETES_VERSION}"
NODE_IMAGE="${DSO_KIND_NODE_IMAGE:-deepseek-operator-kind-node:${K}}"
# The pod network agent's image (hack/kind-network.yaml names it).
NET_IMAGE="deepseek-operator-kind-network:v1"
MIRROR="${DSO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "${KBIN}"
# shellcheck source=go-build-env.sh
source "${HERE}/go-build-env.sh"

log() { printf '[build-kind-node %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
T_ALL=${SECONDS}
[[ "$(id -u)" == 0 ]] || { echo "error: building the node rootfs needs root (debootstrap)" >&2; exit 1; }

line="$("${HERE}/docker-daemon.sh" start | tail -n 1)"
export DOCKER_HOST="${line#DOCKER_HOST=}"
[[ -n "${DOCKER_HOST}" ]] || unset DOCKER_HOST
export DOCKER_BUILDKIT=0  # the classic builder: local images only (see hack/build-image.sh)

exec 7>"${WORK}/.lock"
flock 7


stamp_ok() { [[ -f "${KBIN}/.stamp-$1" && "$(cat "${KBIN}/.stamp-$1")" == "$2" ]]; }
# A module's source directory in the Go module cache (downloaded first if needed).
mod_dir() { "${GO}" mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'; }

# --- 1. Go binaries: kind CLI, pause ----------------------------------------------------------
stamp="kind=${KIND_VERSION} $("${GO}" env GOVERSION)"
if stamp_ok kind "${stamp}" && [[ -x "${KBIN}/kind" ]]; then
  log "kind ${KIND_VERSION}: up to date"
else
  t0=${SECONDS}
  GOBIN="${KBIN}" "${GO}" install "sigs.k8s.io/kind@${KIND_VERSION}"
  echo "${stamp}" >"${KBIN}/.stamp-kind"
  log "kind ${KIND_VERSION}: built in $((SECONDS - t0)) s"
fi

stamp="pause=v1 $("${GO}" env GOVERSION)"
if stamp_ok pause "${stamp}" && [[ -x "${KBIN}/pause" ]]; then
  log "pause: up to date"
else
  # The pod sandbox's process: it only holds the namespaces, and exits on SIGTERM/SIGINT (as
  # PID 1 without a handler it would ignore them and be SIGKILLed after the grace period).
  p="${WORK}/pause-src"
  rm -rf "${p}"; mkdir -p "${p}"
  cat >"${p}/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
EOF
  printf 'module localbuild/pause\n\ngo 1.24\n' >"${p}/go.mod"
  (cd "${p}" && "${GO}" build -ldflags="-s -w" -o "${KBIN}/pause" .)
  echo "${stamp}" >"${KBIN}/.stamp-pause"
  log "pause: built"
fi

# --- 2. the node rootfs from Debian packages ---------------------------------------------------
# kind's base image package list (images/base/Dockerfile), with Debian's containerd, runc and CNI
# plugins instead of kind's own builds, and without fuse-overlayfs / nfs / iscsi (rootless and
# storage extras the tests do not use).
PACKAGES="systemd,systemd-sysv,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,jq,procps,socat"
ROOTFS_IMAGE="deepseek-operator-kind-rootfs:bookworm-$(printf '%s' "${PACKAGES} v1" | sha256sum | cut -c1-12)"
if docker image inspect "${ROOTFS_IMAGE}" >/dev/null 2>&1; then
  log "rootfs ${ROOTFS_IMAGE}: up to date"
else
  command -v debootstrap >/dev/null \
    || "${HERE}/apt-install.sh" debootstrap
  t0=${SECONDS}
  r="${WORK}/rootfs"
  rm -rf "${r}"
  log "rootfs: debootstrap bookworm (${PACKAGES})"
  debootstrap --variant=minbase --include="${PACKAGES}" bookworm "${r}" "${MIRROR}" \
    >"${WORK}/debootstrap.log" 2>&1 || { tail -n 30 "${WORK}/debootstrap.log" >&2; exit 1; }
  rm -rf "${r}"/var/lib/apt/lists/* "${r}"/var/cache/apt/* "${r}"/usr/share/doc/* "${r}"/usr/share/man/*
  tar --numeric-owner -C "${r}" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "${ROOTFS_IMAGE}" >/dev/null
  rm -rf "${r}"
  log "rootfs ${ROOTFS_IMAGE}: built in $((SECONDS - t0)) s"
fi

# CoreDNS at the tag kubeadm's image list names (its Deployment then runs unchanged; pinned in
# versions.env and checked against kubeadm below), and kube-network-policies; both built from the
# Go module proxy before this script waits for the control plane's Kubernetes build, so that on a
# cold machine they overlap with it.
#
# CoreDNS with the plugins kubeadm's Corefile uses (and `log`, for debugging), not all ~60 of
# upstream's main package: the cloud DNS back ends (route53, azure, clouddns), etcd, dnstap, ...
# are half of its compile time and never run in the tier. The directives are read from kubeadm's
# own Corefile template in the Kubernetes module and mapped to packages through CoreDNS's
# plugin.cfg; the binary is checked to register each of them, so a directive a new kubeadm adds
# fails here, not as a CoreDNS crash loop in the tier.
build_coredns() {
  local v="${COREDNS_VERSION}"
  local template
  template="$(mod_dir "k8s.io/kubernetes@${K}")/cmd/kubeadm/app/phases/addons/dns/manifests.go"
  [[ -f "${template}" ]] || { echo "error: kubeadm's CoreDNS template not found: ${template}" >&2; exit 1; }
  # The server block's directives: the words indented by exactly 8 spaces in `CoreDNSConfigMap`.
  local directives
  directives="$(sed -n '/CoreDNSConfigMap = /,/^`/p' "${template}" | sed -n 's/^        \([a-z0-9_]\{1,\}\)\( .*\)\{0,1\}$/\1/p' | sort -u | tr '\n' ' ')log"
  local stamp="coredns=${v} plugins=$(echo ${directives} | tr ' ' ,) $("${GO}" env GOVERSION)"
  if stamp_ok coredns "${stamp}" && [[ -x "${KBIN}/coredns" ]]; then
    log "coredns ${v}: up to date"; return
  fi
  local t0=${SECONDS} src="${WORK}/coredns-${v}" cfg d pkg imports=""
  cfg="$(mod_dir "github.com/coredns/coredns@${v}")/plugin.cfg"
  for d in ${directives}; do
    pkg="$(sed -n "s/^${d}:\(.*\)$/\1/p" "${cfg}")"
    [[ -n "${pkg}" ]] || { echo "error: kubeadm's Corefile names '${d}', which CoreDNS ${v}'s plugin.cfg lacks" >&2; exit 1; }
    [[ "${pkg}" == */* ]] || pkg="github.com/coredns/coredns/plugin/${pkg}"
    imports+=$'\t_ "'"${pkg}"$'"\n'
  done
  rm -rf "${src}"; mkdir -p "${src}"
  printf 'package main\n\nimport (\n%s\n\t"github.com/coredns/coredns/coremain"\n)\n\nfunc main() { coremain.Run() }\n' \
    "${imports}" >"${src}/main.go"
  (
    cd "${src}"
    "${GO}" mod init localbuild/coredns >/dev/null 2>&1
    "${GO}" get "github.com/coredns/coredns@${v}"
    "${GO}" build -mod=mod -ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=${v}" \
      -o "${KBIN}/coredns" .
  )
  local registered
  registered="$("${KBIN}/coredns" -plugins)"
  for d in ${directives}; do
    grep -qx "[[:space:]]*\(dns\.\)\{0,1\}${d}" <<<"${registered}" \
      || { echo "error: the CoreDNS built lacks the '${d}' plugin: ${registered}" >&2; exit 1; }
  done
  rm -rf "${src}"
  echo "${stamp}" >"${KBIN}/.stamp-coredns"
  log "coredns ${v} (plugins: ${directives}): built in $((SECONDS - t0)) s"
}
build_coredns
# kube-network-policies hands new connections to user space with nftables' `queue` expression,
# which kernels built without CONFIG_NFT_QUEUE refuse (ENOENT: "netlink receive: no such file or
# directory", and no rule is installed: nothing is enforced); such kernels (this project's dev VMs)
# often still have nft_compat and the xtables NFQUEUE target. So the module's source is built with
# its three queue verdicts given as that target (revision 3, same queue number and bypass flag):
# the same verdict, the same user-space agent. Its main package is cmd/ (upstream calls the binary
# netpol).
build_kube_network_policies() {
  local v="${KUBE_NETWORK_POLICIES_VERSION}"
  local stamp="kube-network-policies=${v} nfqueue-compat=1 $("${GO}" env GOVERSION)"
  if stamp_ok kube-network-policies "${stamp}" && [[ -x "${KBIN}/kube-network-policies" ]]; then
    log "kube-network-policies ${v}: up to date"; return
  fi
  local t0=${SECONDS} src="${WORK}/kube-network-policies-${v}"
  rm -rf "${src}"
  cp -r "$(mod_dir "sigs.k8s.io/kube-network-policies@${v}")" "${src}"
  chmod -R u+w "${src}"
  local pkg="${src}/pkg/networkpolicy"
  perl -0pi -e 's/queue := &expr\.Queue\{Num: uint16\(c\.config\.QueueID\)\}\n\tif c\.config\.FailOpen \{\n\t\tqueue\.Flag = expr\.QueueFlagBypass\n\t\}\n/queue := nfqueueVerdict(uint16(c.config.QueueID), c.config.FailOpen)\n/g' "${pkg}/controller.go"
  perl -pi -e 's/&expr\.Queue\{Num: uint16\(n\.nfQueueID\), Flag: expr\.QueueFlagBypass\}/nfqueueVerdict(uint16(n.nfQueueID), true)/' "${pkg}/dnsagent.go"
  cat >"${pkg}/nfqueue_compat.go" <<'EOF'
package networkpolicy

import (
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// nfqueueVerdict queues a packet to user space with the xtables NFQUEUE target (revision 3,
// struct xt_NFQ_info_v3: queuenum, queues_total, flags; 8 bytes aligned) through nft_compat.
// Added by deepseek-operator's hack/build-kind-node.sh for kernels without CONFIG_NFT_QUEUE.
func nfqueueVerdict(num uint16, bypass bool) expr.Any {
	var flags byte
	if bypass {
		flags = 1 // NFQ_FLAG_BYPASS
	}
	info := xt.Unknown{byte(num), byte(num >> 8), 1, 0, flags, 0, 0, 0}
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}
EOF
  if [[ "$(cat "${pkg}/controller.go" "${pkg}/dnsagent.go" | grep -c 'nfqueueVerdict(')" != 3 ]] \
    || grep -q 'expr\.Queue{' "${pkg}"/*.go; then
    echo "error: kube-network-policies ${v}: its queue verdicts moved; update build_kube_network_policies" >&2
    exit 1
  fi
  (cd "${src}" && GOFLAGS="${GOFLAGS} -mod=mod" "${GO}" build -ldflags="-s -w" -o "${KBIN}/kube-network-policies" ./cmd)
  rm -rf "${src}"
  echo "${stamp}" >"${KBIN}/.stamp-kube-network-policies"
  log "kube-network-policies ${v} (queue verdicts via xtables NFQUEUE): built in $((SECONDS - t0)) s"
}
build_kube_network_policies

# --- 3. what needs the control plane's Kubernetes build (the lock of build-control-plane.sh; the
# steps above overlap with it on a cold machine) ----------------------------------------------
# The control-plane binaries (and the Kubernetes wrapper module this script reuses).
CP_BIN="$("${HERE}/build-control-plane.sh" kubernetes etcd lws | tail -n 1)"
stamp="kubernetes=${K} $("${GO}" env GOVERSION)"
if stamp_ok node-kubernetes "${stamp}" && [[ -x "${KBIN}/kubelet" && -x "${KBIN}/kubeadm" && -x "${KBIN}/kube-proxy" ]]; then
  log "kubelet kubeadm kube-proxy ${K}: up to date"
else
  t0=${SECONDS}
  src="${CACHE}/build/kubernetes-${K}"
  [[ -f "${src}/go.mod" ]] || { echo "error: ${src}/go.mod missing (hack/build-control-plane.sh)" >&2; exit 1; }
  # A copy of build-control-plane.sh's wrapper module (staging replaces, GODEBUG defaults), so
  # its own go.mod stays untouched; the same flags and version stamping.
  w="${WORK}/kubernetes-${K}"
  rm -rf "${w}"; mkdir -p "${w}"; cp "${src}/go.mod" "${src}/go.sum" "${w}/"
  (
    cd "${w}"
    "${GO}" get -tool "k8s.io/kubernetes/cmd/kubelet@${K}" "k8s.io/kubernetes/cmd/kubeadm@${K}" \
      "k8s.io/kubernetes/cmd/kube-proxy@${K}"
    minor="${K#v1.}"; mm="${minor%%.*}"
    v=""
    for key in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      v+=" -X ${key}.gitVersion=${K} -X ${key}.gitMajor=1 -X ${key}.gitMinor=${mm}"
      v+=" -X ${key}.gitTreeState=clean -X ${key}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    done
    "${GO}" build -mod=mod -pgo=off -tags=selinux,notest,grpcnotrace -ldflags="-s -w${v}" \
      -o "${KBIN}/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm \
      k8s.io/kubernetes/cmd/kube-proxy
  )
  echo "${stamp}" >"${KBIN}/.stamp-node-kubernetes"
  log "kubelet kubeadm kube-proxy ${K}: built in $((SECONDS - t0)) s"
fi


COREDNS_REF="$("${KBIN}/kubeadm" config images list --kubernetes-version "${K}" 2>/dev/null | grep '/coredns:')"
[[ "${COREDNS_REF##*:}" == "${COREDNS_VERSION}" ]] || {
  echo "error: kubeadm ${K} lists CoreDNS '${COREDNS_REF##*:}', hack/versions.env pins ${COREDNS_VERSION}" >&2
  exit 1
}

# What the README's recipe applies besides hack/kind-network.yaml, from the same module versions
# as the images: kube-network-policies' own install.yaml (its RBAC, ServiceAccount and DaemonSet)
# with the image built here, and LWS's own Helm chart.
KNP_IMAGE="registry.k8s.io/networking/kube-network-policies:${KUBE_NETWORK_POLICIES_VERSION}"
LWS_IMAGE="registry.k8s.io/lws/lws:${LWS_VERSION}"
knp_src="$(mod_dir "sigs.k8s.io/kube-network-policies@${KUBE_NETWORK_POLICIES_VERSION}")"
lws_src="$(mod_dir "sigs.k8s.io/lws@${LWS_VERSION}")"
[[ -f "${knp_src}/install.yaml" && -d "${lws_src}/charts/lws" ]] \
  || { echo "error: install.yaml / charts/lws missing in the module sources" >&2; exit 1; }
mkdir -p "${WORK}/manifests" "${WORK}/charts"
# The release's install.yaml still names the previous tag; the image is the one built here.
sed "s#image: registry.k8s.io/networking/kube-network-policies:.*#image: ${KNP_IMAGE}#" \
  "${knp_src}/install.yaml" >"${WORK}/manifests/kube-network-policies.yaml"
grep -q "image: ${KNP_IMAGE}$" "${WORK}/manifests/kube-network-policies.yaml" \
  || { echo "error: no kube-network-policies image line in its install.yaml" >&2; exit 1; }
rm -rf "${WORK}/charts/lws"; cp -r "${lws_src}/charts/lws" "${WORK}/charts/lws"; chmod -R u+w "${WORK}/charts/lws"

# The recipe: this script, the pins, the binaries' stamps and the host facts it bakes in. The node
# image carries it as a label; an image with the same label is up to date.
cap_missing=0
(( (16#$(awk '/^CapBnd:/ { print $2 }' /proc/self/status) >> 24 & 1) == 0 )) && cap_missing=1
RECIPE="$(cat "${BASH_SOURCE[0]}" "${KBIN}"/.stamp-* "${CP_BIN}"/.stamp-kubernetes "${CP_BIN}"/.stamp-etcd \
  "${CP_BIN}"/.stamp-lws "${HERE}/kind-pod-network.sh" <(echo "${ROOTFS_IMAGE} ${KIND_VERSION} cap_missing=${cap_missing}") | sha256sum | cut -c1-16)"
if [[ "$(docker image inspect --format '{{index .Config.Labels "io.deepseek-operator.recipe"}}' "${NODE_IMAGE}" 2>/dev/null)" == "${RECIPE}" ]]; then
  log "node image ${NODE_IMAGE}: up to date; total $((SECONDS - T_ALL)) s"
  echo "DOCKER_HOST=${DOCKER_HOST:-} NODE_IMAGE=${NODE_IMAGE} KIND=${KBIN}/kind"
  exit 0
fi

# --- 4. the images kubeadm pulls, built from local binaries ----------------------------------
mapfile -t wanted < <("${KBIN}/kubeadm" config images list --kubernetes-version "${K}" 2>/dev/null)
IMG="${WORK}/images"
rm -rf "${IMG}"; mkdir -p "${IMG}"
cp "${CP_BIN}"/{kube-apiserver,kube-controller-manager,kube-scheduler,etcd} "${KBIN}/kube-proxy" "${KBIN}/pause" "${IMG}/"
tags=()
for ref in "${wanted[@]}"; do
  name="${ref##*/}"; name="${name%%:*}"
  case "${name}" in
    kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | etcd)
      # kubeadm's static pods and kube-proxy's DaemonSet call the binary by name (PATH).
      printf 'FROM %s\nCOPY %s /usr/local/bin/%s\n' "${ROOTFS_IMAGE}" "${name}" "${name}" >"${IMG}/Dockerfile.${name}"
      docker build -q -f "${IMG}/Dockerfile.${name}" -t "${ref}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
      tags+=("${ref}") ;;
    pause)
      printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"${IMG}/Dockerfile.pause"
      docker build -q -f "${IMG}/Dockerfile.pause" -t "${ref}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
      # containerd's sandbox_image in kind's config (images/base/files/etc/containerd).
      docker tag "${ref}" registry.k8s.io/pause:3.10
      tags+=("${ref}" registry.k8s.io/pause:3.10) ;;
    coredns)
      # Upstream's image: the static binary as /coredns, its entrypoint (kubeadm passes -conf).
      cp "${KBIN}/coredns" "${IMG}/coredns"
      printf 'FROM scratch\nCOPY coredns /coredns\nENTRYPOINT ["/coredns"]\n' >"${IMG}/Dockerfile.coredns"
      docker build -q -f "${IMG}/Dockerfile.coredns" -t "${ref}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
      tags+=("${ref}") ;;
    *) echo "error: kubeadm wants an image this script does not know: ${ref}" >&2; exit 1 ;;
  esac
done

# The add-ons, under the names their own manifests use (imagePullPolicy IfNotPresent finds them).
cp "${KBIN}/kube-network-policies" "${IMG}/netpol"
printf 'FROM scratch\nCOPY netpol /bin/netpol\nCMD ["/bin/netpol"]\n' >"${IMG}/Dockerfile.knp"
docker build -q -f "${IMG}/Dockerfile.knp" -t "${KNP_IMAGE}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
# LWS's chart runs /manager as a non-root user (runAsNonRoot), as its own image does.
cp "${CP_BIN}/lws-controller" "${IMG}/manager"
printf 'FROM scratch\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' >"${IMG}/Dockerfile.lws"
docker build -q -f "${IMG}/Dockerfile.lws" -t "${LWS_IMAGE}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
# The pod network agent: the script on the node rootfs (ip, iptables, jq) with kubectl.
cp "${HERE}/kind-pod-network.sh" "${CP_BIN}/kubectl" "${IMG}/"
printf 'FROM %s\nCOPY kubectl kind-pod-network.sh /usr/local/bin/\nENTRYPOINT ["/usr/local/bin/kind-pod-network.sh"]\n' \
  "${ROOTFS_IMAGE}" >"${IMG}/Dockerfile.net"
docker build -q -f "${IMG}/Dockerfile.net" -t "${NET_IMAGE}" "${IMG}" >/dev/null 2>>"${WORK}/docker-build.log"
tags+=("${KNP_IMAGE}" "${LWS_IMAGE}" "${NET_IMAGE}")

# --- 5. the node image ------------------------------------------------------------------------
KIND_SRC="$("${GO}" mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
[[ -d "${KIND_SRC}/images/base/files" ]] || { echo "error: kind ${KIND_VERSION} sources not found" >&2; exit 1; }
ctx="${WORK}/node"
rm -rf "${ctx}"; mkdir -p "${ctx}/files" "${ctx}/bin" "${ctx}/images"
cp -r "${KIND_SRC}/images/base/files/." "${ctx}/files/"
chmod -R u+w "${ctx}/files"
rm -rf "${ctx}/files/LICENSES"
cp "${KBIN}/kubelet" "${KBIN}/kubeadm" "${CP_BIN}/kubectl" "${ctx}/bin/"
docker save -o "${ctx}/images/images.tar" "${tags[@]}"
# kind's base image generates cri-base.json with `ctr oci spec` plus its product-files hook, minus
# the rlimits; Debian's ctr in the rootfs image does the same here.
docker run --rm --network none "${ROOTFS_IMAGE}" sh -c 'ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"} | del(.process.rlimits)"' \
  >"${ctx}/files/etc/containerd/cri-base.json"
if ((cap_missing)); then
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "${ctx}/files/etc/containerd/config.toml"
fi
mkdir -p "${ctx}/files/etc/cni/net.d"
cat >"${ctx}/files/kind/bin/preload-images.sh" <<'EOF'
#!/bin/sh
# Import the images shipped in /kind/images (no registry is reachable) and pin them against GC.
set -e
for f in /kind/images/*.tar; do ctr -n k8s.io images import "$f"; done
for i in $(ctr -n k8s.io images ls -q); do
  ctr -n k8s.io images label "$i" io.cri-containerd.pinned=pinned >/dev/null
done
EOF
cat >"${ctx}/files/etc/systemd/system/kind-preload.service" <<'EOF'
[Unit]
Description=Import the images preloaded in /kind/images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/preload-images.sh

[Install]
WantedBy=multi-user.target
EOF
# What kind's images/base/Dockerfile does after installing its packages, for this rootfs.
cat >"${ctx}/Dockerfile" <<EOF
FROM ${ROOTFS_IMAGE}
COPY files/ /
COPY bin/ /usr/bin/
COPY images/ /kind/images/
RUN chmod 0755 /usr/local/bin/* /kind/bin/* /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl \\
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \\
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service kind-preload.service \\
    && systemctl mask systemd-binfmt.service \\
    && mkdir -p /etc/kubernetes/manifests /opt/cni \\
    && ln -sf /usr/bin/containerd /usr/local/bin/containerd \\
    && ln -sfn /usr/lib/cni /opt/cni/bin \\
    && echo "${K}" > /kind/version
ENV container=docker
LABEL io.deepseek-operator.recipe="${RECIPE}"
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
EOF
t0=${SECONDS}
old_id="$(docker image inspect --format '{{.Id}}' "${NODE_IMAGE}" 2>/dev/null || true)"
docker build -q -t "${NODE_IMAGE}" "${ctx}" >"${WORK}/docker-build.log" 2>&1 \
  || { tail -n 30 "${WORK}/docker-build.log" >&2; exit 1; }
# The image this one replaces (1.3 GB, now untagged); kept if a container still uses it.
if [[ -n "${old_id}" && "${old_id}" != "$(docker image inspect --format '{{.Id}}' "${NODE_IMAGE}")" ]]; then
  docker rmi "${old_id}" >/dev/null 2>&1 || true
fi
rm -rf "${IMG}" "${ctx}/images" "${ctx}/bin"
log "node image ${NODE_IMAGE}: built in $((SECONDS - t0)) s ($(docker image inspect --format '{{.Size}}' "${NODE_IMAGE}" | awk '{printf "%.0f MB", $1/1e6}')); total $((SECONDS - T_ALL)) s"
echo "DOCKER_HOST=${DOCKER_HOST:-} NODE_IMAGE=${NODE_IMAGE} KIND=${KBIN}/kind"
