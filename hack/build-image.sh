#!/usr/bin/env bash
# Build the project's container image for real, from the repository's Dockerfile, with no registry.
#
# Steps (each cached; a warm re-run takes seconds):
#   1. hack/docker-daemon.sh: use the Docker engine that answers, or install and start one.
#   2. A Python base image built from Debian packages (debootstrap + `docker import`), because no
#      registry (Docker Hub's python:*-slim) is reachable here. Tag: deepseek-operator-base:<suite>-
#      <hash of the recipe>; rebuilt only when the recipe in this script changes.
#   3. A wheelhouse of the runtime dependencies at the versions in constraints.txt, downloaded by
#      the host's pip (which has the host's index, proxy and CA settings; a build container has
#      none of them) for the base image's Python and C library, cached under the cache dir.
#   4. `docker build` of the Dockerfile with --build-arg BASE_IMAGE=<the local base>, its pip
#      pointed (PIP_NO_INDEX / PIP_FIND_LINKS build args) at the wheelhouse, served for the
#      duration of the build on 127.0.0.1 (the build runs with --network host to reach it):
#      the operator image (target runtime), then the router image (target router: vllm-router
#      and its pins from router-requirements.txt, which the wheelhouse holds too).
#
# Cache: ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/image/ (wheelhouse, logs) and the Docker
# daemon's own data root. Nothing is written into the repository.
#
# Environment:
#   DSO_IMAGE        tag to build (default deepseek-operator:local)
#   DSO_ROUTER_IMAGE tag of the router image (default deepseek-operator-router:local)
#   DSO_BASE_SUITE   Debian suite of the base image: bookworm (default, Python 3.11) or trixie
#                    (Python 3.13); both meet the project's requires-python >= 3.11
#   DSO_DEBIAN_MIRROR  Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   PYTHON           host Python with pip, for the wheelhouse (default .venv/bin/python, else python3)
#   DSO_WHEEL_PORT   127.0.0.1 port the wheelhouse is served on during the build (default 38417)
#
# Usage: hack/build-image.sh   Prints `DOCKER_HOST=<value> IMAGE=<tag> BASE=<tag> ROUTER_IMAGE=<tag>`
# on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/.." && pwd)"
CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
WORK="${CACHE}/image"
IMAGE="${DSO_IMAGE:-deepseek-operator:local}"
ROUTER_IMAGE="${DSO_ROUTER_IMAGE:-deepseek-operator-router:local}"
SUITE="${DSO_BASE_SUITE:-bookworm}"
MIRROR="${DSO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The project's venv has pip for sure (Debian's python3 may lack it); python3 otherwise.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${ROOT}/.venv/bin/python" ]]; then PYTHON="${ROOT}/.venv/bin/python"; else PYTHON=python3; fi
fi
mkdir -p "${WORK}"

log() { printf '[build-image %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
T_ALL=${SECONDS}

# --- 1. a Docker engine ----------------------------------------------------------------------
line="$("${HERE}/docker-daemon.sh" start | tail -n 1)"
export DOCKER_HOST="${line#DOCKER_HOST=}"
[[ -n "${DOCKER_HOST}" ]] || unset DOCKER_HOST
# The legacy builder: BuildKit would resolve the Dockerfile frontend and base images against a
# registry in some Docker versions; the classic builder uses the local image store only.
export DOCKER_BUILDKIT=0

# One build at a time per cache: concurrent test sessions would race on the base image and port.
exec 8>"${WORK}/.lock"
flock 8

# --- 2. the Python base image from Debian packages -------------------------------------------
# python3-venv: the Dockerfile's `python -m venv` (ensurepip); python-is-python3: the `python`
# command the official image has; passwd: groupadd/useradd for the non-root user; ca-certificates:
# TLS to the API server and registries, as in the official slim image.
PACKAGES="python3,python3-venv,python-is-python3,passwd,ca-certificates"
RECIPE="suite=${SUITE} variant=minbase include=${PACKAGES} cleanup=v1"
BASE="deepseek-operator-base:${SUITE}-$(printf '%s' "${RECIPE}" | sha256sum | cut -c1-12)"

if docker image inspect "${BASE}" >/dev/null 2>&1; then
  log "base ${BASE}: up to date"
else
  if ! command -v debootstrap >/dev/null; then
    [[ "$(id -u)" == 0 ]] || { echo "error: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
    log "installing debootstrap (apt-get)"
    "${HERE}/apt-install.sh" debootstrap
  fi
  [[ "$(id -u)" == 0 ]] || { echo "error: building the base image needs root (debootstrap)" >&2; exit 1; }
  t0=${SECONDS}
  rootfs="${WORK}/rootfs-${SUITE}"
  rm -rf "${rootfs}"
  log "base ${BASE}: debootstrap ${SUITE} (${PACKAGES}) from ${MIRROR}"
  debootstrap --variant=minbase --include="${PACKAGES}" "${SUITE}" "${rootfs}" "${MIRROR}" \
    >"${WORK}/debootstrap-${SUITE}.log" 2>&1 \
    || { tail -n 30 "${WORK}/debootstrap-${SUITE}.log" >&2; exit 1; }
  # What a container image does not need: package lists and caches (apt-get update refetches
  # them), docs and man pages, debootstrap's own leftovers.
  rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/apt/* "${rootfs}"/debootstrap \
    "${rootfs}"/usr/share/doc/* "${rootfs}"/usr/share/man/* "${rootfs}"/var/log/*.log
  tar --numeric-owner -C "${rootfs}" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "${BASE}" >/dev/null
  rm -rf "${rootfs}"
  log "base ${BASE}: built in $((SECONDS - t0)) s"
fi
# The project needs Python >= 3.11 (pyproject.toml); fail here, not halfway through the build.
read -r PYVER GLIBC < <(docker run --rm --network none "${BASE}" python3 -c \
  'import platform, sys; assert sys.version_info >= (3, 11), sys.version; print(f"{sys.version_info[0]}.{sys.version_info[1]}", platform.libc_ver()[1])')
log "base ${BASE}: Python ${PYVER}, glibc ${GLIBC}"

# --- 3. the wheelhouse -----------------------------------------------------------------------
# Every wheel the image's `pip install -c constraints.txt .` needs: the runtime dependencies (their
# own dependencies follow, pinned by the same constraints file) and the build backend that
# pyproject.toml's [build-system] names. Binary wheels only, for the base image's Python and glibc.
ARCH="$(uname -m)"
platforms=()
for minor in $(seq 17 "${GLIBC#2.}"); do platforms+=(--platform "manylinux_2_${minor}_${ARCH}"); done
platforms+=(--platform "manylinux2014_${ARCH}" --platform "linux_${ARCH}")
mapfile -t reqs < <("${PYTHON}" - "${ROOT}/pyproject.toml" <<'EOF'
import sys, tomllib
doc = tomllib.load(open(sys.argv[1], "rb"))
print(*doc["project"]["dependencies"], *doc["build-system"]["requires"], sep="\n")
EOF
)
WHEELS="${WORK}/wheels-cp${PYVER/./}"
stamp="$(cat "${ROOT}/constraints.txt" "${ROOT}/pyproject.toml" "${ROOT}/router-requirements.txt" | sha256sum | cut -c1-16) ${ARCH} glibc${GLIBC}"
if [[ -f "${WHEELS}/.stamp" && "$(cat "${WHEELS}/.stamp")" == "${stamp}" ]]; then
  log "wheelhouse ${WHEELS}: up to date"
else
  t0=${SECONDS}
  rm -rf "${WHEELS}"
  mkdir -p "${WHEELS}"
  log "wheelhouse ${WHEELS}: downloading for cp${PYVER/./} (${#reqs[@]} requirements)"
  "${PYTHON}" -m pip download --quiet --disable-pip-version-check --dest "${WHEELS}" \
    --only-binary=:all: --python-version "${PYVER}" --implementation cp "${platforms[@]}" \
    -c "${ROOT}/constraints.txt" "${reqs[@]}"
  # The router image's pins (their own set: vllm-router's dependencies are not the operator's).
  "${PYTHON}" -m pip download --quiet --disable-pip-version-check --dest "${WHEELS}" \
    --only-binary=:all: --python-version "${PYVER}" --implementation cp "${platforms[@]}" \
    --no-deps -r "${ROOT}/router-requirements.txt"
  echo "${stamp}" >"${WHEELS}/.stamp"
  log "wheelhouse: $(find "${WHEELS}" -name '*.whl' | wc -l) wheels in $((SECONDS - t0)) s"
fi

# --- 4. docker build ------------------------------------------------------------------------
# A fixed port: the build args are part of Docker's cache key for the RUN that installs, so a new
# port every time would rebuild the venv on every run. Builds in one cache are serialised by the
# lock above; only when another program holds the port does a free one (and a cache miss) follow.
port="${DSO_WHEEL_PORT:-38417}"
if ! "${PYTHON}" -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "${port}" 2>/dev/null; then
  port="$("${PYTHON}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  log "port ${DSO_WHEEL_PORT:-38417} is taken; serving the wheelhouse on ${port} (the install layer rebuilds)"
fi
"${PYTHON}" -m http.server --bind 127.0.0.1 --directory "${WHEELS}" "${port}" \
  >"${WORK}/wheel-server.log" 2>&1 &
server=$!
trap 'kill "${server}" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
  "${PYTHON}" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${port}/')" 2>/dev/null && break
  sleep 0.1
done
t0=${SECONDS}
old_id="$(docker image inspect --format '{{.Id}}' "${IMAGE}" 2>/dev/null || true)"
log "docker build -t ${IMAGE} (base ${BASE})"
docker build --network host --tag "${IMAGE}" --target runtime \
  --build-arg "BASE_IMAGE=${BASE}" \
  --build-arg PIP_NO_INDEX=1 \
  --build-arg "PIP_FIND_LINKS=http://127.0.0.1:${port}/" \
  "${ROOT}" >"${WORK}/docker-build.log" 2>&1 \
  || { tail -n 40 "${WORK}/docker-build.log" >&2; exit 1; }
# The image this build replaced (now untagged): removed unless a container or tag still uses it.
# The build stages' intermediate images stay: they are the layer cache.
if [[ -n "${old_id}" && "${old_id}" != "$(docker image inspect --format '{{.Id}}' "${IMAGE}")" ]]; then
  docker rmi "${old_id}" >/dev/null 2>&1 || true
fi
log "image ${IMAGE}: built in $((SECONDS - t0)) s ($(docker image inspect --format '{{.Size}}' "${IMAGE}" | awk '{printf "%.0f MB", $1/1e6}')); total $((SECONDS - T_ALL)) s"
# The router image, from the same Dockerfile and wheelhouse (its stages are cached by now: the
# classic builder built them on the way to the runtime stage).
t0=${SECONDS}
old_router="$(docker image inspect --format '{{.Id}}' "${ROUTER_IMAGE}" 2>/dev/null || true)"
log "docker build --target router -t ${ROUTER_IMAGE}"
docker build --network host --tag "${ROUTER_IMAGE}" --target router \
  --build-arg "BASE_IMAGE=${BASE}" \
  --build-arg PIP_NO_INDEX=1 \
  --build-arg "PIP_FIND_LINKS=http://127.0.0.1:${port}/" \
  "${ROOT}" >"${WORK}/docker-build-router.log" 2>&1 \
  || { tail -n 40 "${WORK}/docker-build-router.log" >&2; exit 1; }
if [[ -n "${old_router}" && "${old_router}" != "$(docker image inspect --format '{{.Id}}' "${ROUTER_IMAGE}")" ]]; then
  docker rmi "${old_router}" >/dev/null 2>&1 || true
fi
log "image ${ROUTER_IMAGE}: built in $((SECONDS - t0)) s ($(docker image inspect --format '{{.Size}}' "${ROUTER_IMAGE}" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "DOCKER_HOST=${DOCKER_HOST:-} IMAGE=${IMAGE} BASE=${BASE} ROUTER_IMAGE=${ROUTER_IMAGE}"
