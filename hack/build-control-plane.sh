#!/usr/bin/env bash
# Build the local test control plane from the Go module proxy, once, and cache it.
#
# Binaries: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, helm,
#           lws-controller (with its CRDs and webhook manifests in bin/lws-manifests/),
#           kueue (in bin/kueue-<version>/: the manager binary, its CRDs and webhook manifests).
# Versions: hack/versions.env (the one place they are pinned).
# Output:   ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/bin/  (outside the repo; nothing committed)
#
# Each component has a stamp file (bin/.stamp-<component>) holding the version it was built at; a
# re-run with matching stamps and present binaries does nothing and takes well under a second.
# Set DSO_FORCE_REBUILD=1 to ignore the stamps. Recipe and background: docs/development.md.
#
# Usage: hack/build-control-plane.sh [component ...]   (components: etcd kubernetes kwok helm lws
#        kueue; default: all). Prints the bin directory on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
BIN="${CACHE}/bin"
WORK="${CACHE}/build"
mkdir -p "${BIN}" "${WORK}"
# One build of a component at a time per cache (concurrent runs would share its wrapper
# directory), but a lock per component: `make test` runs this script and hack/build-kind-node.sh
# (which asks for kubernetes, etcd and lws) side by side, and the second need not wait for the
# components it does not ask for.
lock_component() {
  exec 9>"${CACHE}/.build-$1.lock"  # closing the previous fd 9 releases the previous lock
  flock 9
}

# shellcheck source=go-build-env.sh
source "${HERE}/go-build-env.sh"

log() { printf '[build-control-plane %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# up_to_date STAMP_NAME STAMP_VALUE BINARY... -> 0 when every binary exists and the stamp matches.
up_to_date() {
  local name="$1" want="$2"; shift 2
  [[ "${DSO_FORCE_REBUILD:-0}" == "1" ]] && return 1
  [[ -f "${BIN}/.stamp-${name}" && "$(cat "${BIN}/.stamp-${name}")" == "${want}" ]] || return 1
  local b
  for b in "$@"; do [[ -x "${BIN}/${b}" ]] || return 1; done
  return 0
}

# new_wrapper DIR MODULE -> a fresh wrapper module directory (old contents removed).
new_wrapper() {
  local dir="$1" mod="$2"
  rm -rf "${dir}"; mkdir -p "${dir}"
  (cd "${dir}" && "${GO}" mod init "${mod}" >/dev/null 2>&1)
}

build_etcd() {
  local stamp="etcd=${ETCD_VERSION} $("${GO}" env GOVERSION)"
  if up_to_date etcd "${stamp}" etcd; then log "etcd ${ETCD_VERSION}: up to date"; return; fi
  log "etcd ${ETCD_VERSION}: building"
  local w="${WORK}/etcd-${ETCD_VERSION}" t0=${SECONDS}
  new_wrapper "${w}" localbuild/etcdbin
  (
    cd "${w}"
    # server/v3's go.mod has no replace of its own; it requires published module versions.
    "${GO}" get -tool "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    "${GO}" build -mod=mod -ldflags="-s -w" -o "${w}/out/etcd" go.etcd.io/etcd/server/v3
  )
  install -m 0755 "${w}/out/etcd" "${BIN}/etcd"
  echo "${stamp}" > "${BIN}/.stamp-etcd"
  log "etcd ${ETCD_VERSION}: built in $((SECONDS - t0))s: $("${BIN}/etcd" --version | head -1)"
}

build_kubernetes() {
  local k="${KUBERNETES_VERSION}"
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local stamp="kubernetes=${k} $("${GO}" env GOVERSION)"
  if up_to_date kubernetes "${stamp}" "${bins[@]}"; then
    log "kubernetes ${k}: up to date"; return
  fi
  log "kubernetes ${k}: building ${bins[*]}"
  local w="${WORK}/kubernetes-${k}" t0=${SECONDS}
  local minor="${k#v1.}"            # 36.3
  local mm="${minor%%.*}"           # 36
  new_wrapper "${w}" localbuild/k8sbin
  (
    cd "${w}"
    # Upstream's go.mod requires every staging module at v0.0.0 and maps it to ./staging/...;
    # replace each with the published v0.<minor>.<patch>, derived from upstream's own go.mod.
    local gomod
    gomod="$("${GO}" mod download -json "k8s.io/kubernetes@${k}" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -f "${gomod}" ]] || { echo "error: cannot download go.mod of k8s.io/kubernetes@${k}" >&2; exit 1; }
    local staging
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "${gomod}")"
    [[ -n "${staging}" ]] || { echo "error: no staging replaces found in ${gomod}" >&2; exit 1; }
    local m
    for m in ${staging}; do
      "${GO}" mod edit -replace="${m}=${m}@v0.${minor}"
    done
    # Mirror upstream's language version and GODEBUG defaults.
    "${GO}" mod edit -go="$(sed -n 's/^go //p' "${gomod}")"
    grep '^godebug' "${gomod}" >> go.mod || true
    local pkgs=()
    for m in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${m}@${k}"); done
    "${GO}" get -tool "${pkgs[@]}"
    local date v key
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    v=""
    for key in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      v+=" -X ${key}.gitVersion=${k} -X ${key}.gitMajor=1 -X ${key}.gitMinor=${mm}"
      v+=" -X ${key}.gitTreeState=clean -X ${key}.buildDate=${date}"
    done
    local targets=()
    for m in "${bins[@]}"; do targets+=("k8s.io/kubernetes/cmd/${m}"); done
    mkdir -p out
    "${GO}" build -mod=mod -pgo=off -tags=selinux,notest,grpcnotrace \
      -ldflags="-s -w${v}" -o out/ "${targets[@]}"
  )
  for m in "${bins[@]}"; do install -m 0755 "${w}/out/${m}" "${BIN}/${m}"; done
  echo "${stamp}" > "${BIN}/.stamp-kubernetes"
  log "kubernetes ${k}: built in $((SECONDS - t0))s: $("${BIN}/kube-apiserver" --version)"
}

build_kwok() {
  local stamp="kwok=${KWOK_VERSION} $("${GO}" env GOVERSION)"
  if up_to_date kwok "${stamp}" kwok; then log "kwok ${KWOK_VERSION}: up to date"; return; fi
  log "kwok ${KWOK_VERSION}: building"
  local w="${WORK}/kwok-${KWOK_VERSION}" t0=${SECONDS}
  new_wrapper "${w}" localbuild/kwokbin
  (
    cd "${w}"
    "${GO}" get -tool "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
    "${GO}" build -mod=mod -ldflags="-s -w" -o "${w}/out/kwok" sigs.k8s.io/kwok/cmd/kwok
  )
  install -m 0755 "${w}/out/kwok" "${BIN}/kwok"
  echo "${stamp}" > "${BIN}/.stamp-kwok"
  log "kwok ${KWOK_VERSION}: built in $((SECONDS - t0))s"
}

build_helm() {
  local h="${HELM_VERSION}"
  local major="${h%%.*}"            # v3 or v4
  local stamp="helm=${h} kube=${KUBERNETES_VERSION} $("${GO}" env GOVERSION)"
  if up_to_date helm "${stamp}" helm; then log "helm ${h}: up to date"; return; fi
  log "helm ${h}: building"
  local w="${WORK}/helm-${h}" t0=${SECONDS}
  local kminor="${KUBERNETES_VERSION#v1.}"; kminor="${kminor%%.*}"
  new_wrapper "${w}" localbuild/helmbin
  (
    cd "${w}"
    local mod="helm.sh/helm/${major}"
    "${GO}" get -tool "${mod}/cmd/helm@${h}"
    # Stamp the version and the offline default Kubernetes version (helm's Makefile does the same;
    # without it `helm template` assumes Kubernetes 1.20).
    local ld="-s -w -X ${mod}/internal/version.version=${h} -X ${mod}/internal/version.gitTreeState=clean"
    local p
    for p in pkg/chartutil pkg/lint/rules pkg/chart/common pkg/chart/common/util internal/version; do
      ld+=" -X ${mod}/${p}.k8sVersionMajor=1 -X ${mod}/${p}.k8sVersionMinor=${kminor}"
    done
    "${GO}" build -mod=mod -ldflags="${ld}" -o "${w}/out/helm" "${mod}/cmd/helm"
  )
  install -m 0755 "${w}/out/helm" "${BIN}/helm"
  echo "${stamp}" > "${BIN}/.stamp-helm"
  log "helm ${h}: built in $((SECONDS - t0))s: $("${BIN}/helm" version --short)"
}

build_lws() {
  local l="${LWS_VERSION}"
  local stamp="lws=${l} $("${GO}" env GOVERSION)"
  local manifests="${BIN}/lws-manifests"
  if up_to_date lws "${stamp}" lws-controller \
    && [[ -f "${manifests}/leaderworkerset.x-k8s.io_leaderworkersets.yaml" ]]; then
    log "lws ${l}: up to date"; return
  fi
  log "lws ${l}: building"
  local w="${WORK}/lws-${l}" t0=${SECONDS}
  new_wrapper "${w}" localbuild/lwsbin
  (
    cd "${w}"
    # The module has no replace directives; its main package is sigs.k8s.io/lws/cmd.
    "${GO}" get -tool "sigs.k8s.io/lws/cmd@${l}"
    local ld="-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=${l}"
    ld+=" -X sigs.k8s.io/lws/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "${GO}" build -mod=mod -ldflags="${ld}" -o "${w}/out/lws-controller" sigs.k8s.io/lws/cmd
  )
  # The CRDs and webhook manifests the release ships (config/ of the same module version).
  local src
  src="$(cd "${w}" && "${GO}" list -m -f '{{.Dir}}' "sigs.k8s.io/lws")"
  [[ -d "${src}/config/crd/bases" ]] || { echo "error: no config/crd/bases in ${src}" >&2; exit 1; }
  rm -rf "${manifests}"; mkdir -p "${manifests}"
  install -m 0644 "${src}"/config/crd/bases/*.yaml "${manifests}/"
  install -m 0644 "${src}/config/webhook/manifests.yaml" "${manifests}/webhooks.yaml"
  install -m 0644 "${src}/config/webhook/mutating-patch.yaml" "${manifests}/webhooks-mutating-patch.yaml"
  install -m 0644 "${src}/config/webhook/validating-patch.yaml" "${manifests}/webhooks-validating-patch.yaml"
  install -m 0755 "${w}/out/lws-controller" "${BIN}/lws-controller"
  echo "${stamp}" > "${BIN}/.stamp-lws"
  log "lws ${l}: built in $((SECONDS - t0))s: $("${BIN}/lws-controller" --version | head -1)"
}

build_kueue() {
  local q="${KUEUE_VERSION}"
  # A versioned directory: a new pin builds beside the old one instead of replacing it.
  local dir="${BIN}/kueue-${q}"
  local stamp="kueue=${q} $("${GO}" env GOVERSION)"
  if up_to_date "kueue-${q}" "${stamp}" "kueue-${q}/kueue" \
    && [[ -f "${dir}/manifests/webhooks.yaml" ]]; then
    log "kueue ${q}: up to date"; return
  fi
  log "kueue ${q}: building"
  local w="${WORK}/kueue-${q}" t0=${SECONDS}
  new_wrapper "${w}" localbuild/kueuebin
  (
    cd "${w}"
    # The module has no replace directives; its manager is sigs.k8s.io/kueue/cmd/kueue.
    "${GO}" get -tool "sigs.k8s.io/kueue/cmd/kueue@${q}"
    local ld="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${q}"
    ld+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    "${GO}" build -mod=mod -ldflags="${ld}" -o "${w}/out/kueue" sigs.k8s.io/kueue/cmd/kueue
  )
  # The CRDs and webhook manifests the release ships (config/components of the same version).
  local src
  src="$(cd "${w}" && "${GO}" list -m -f '{{.Dir}}' "sigs.k8s.io/kueue")"
  [[ -d "${src}/config/components/crd/bases" ]] \
    || { echo "error: no config/components/crd/bases in ${src}" >&2; exit 1; }
  rm -rf "${dir}"; mkdir -p "${dir}/manifests/crd"
  install -m 0644 "${src}"/config/components/crd/bases/*.yaml "${dir}/manifests/crd/"
  install -m 0644 "${src}/config/components/webhook/manifests.yaml" "${dir}/manifests/webhooks.yaml"
  install -m 0755 "${w}/out/kueue" "${dir}/kueue"
  echo "${stamp}" > "${BIN}/.stamp-kueue-${q}"
  log "kueue ${q}: built in $((SECONDS - t0))s"
}

main() {
  local components=("$@")
  [[ ${#components[@]} -gt 0 ]] || components=(etcd kubernetes kwok helm lws kueue)
  local t0=${SECONDS} c
  for c in "${components[@]}"; do
    [[ "${c}" == k8s ]] && c=kubernetes
    lock_component "${c}"
    case "${c}" in
      etcd) build_etcd ;;
      kubernetes | k8s) build_kubernetes ;;
      kwok) build_kwok ;;
      helm) build_helm ;;
      lws) build_lws ;;
      kueue) build_kueue ;;
      *) echo "error: unknown component '${c}' (etcd kubernetes kwok helm lws kueue)" >&2; exit 2 ;;
    esac
  done
  exec 9>&-
  log "done in $((SECONDS - t0))s; binaries in ${BIN}"
  echo "${BIN}"
}

main "$@"
