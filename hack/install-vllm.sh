#!/usr/bin/env bash
# Install the supported vLLM releases from PyPI into cached virtualenvs, once, for the conformance
# harness (conformance/, `make conformance`).
#
# Releases and pins: hack/versions.env (VLLM_RELEASES, UV_VERSION, VLLM_HARNESS_REQUIREMENTS).
# Output: ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/vllm/<release>/  (outside the repo).
#
# What gets installed: vLLM itself with --no-deps, then only the requirements its parser, config
# and guard modules import (VLLM_HARNESS_REQUIREMENTS), each at the version specifier the release's
# own metadata gives. torch comes from PyPI with its CUDA wheels: PyPI has no CPU-only torch for
# Linux and `import torch` loads the CUDA libraries even when no GPU is present. No kernel runs:
# the harness sets VLLM_TARGET_DEVICE=cpu and fakes the platform.
# uv installs with hard links out of one cache (same filesystem), so releases that pin the same
# torch / CUDA wheels share their files on disk.
#
# Each release has a stamp (<release>/.stamp-dso) holding what it was installed with; a re-run
# with a matching stamp does nothing. DSO_FORCE_REINSTALL=1 ignores the stamps.
#
# Usage: hack/install-vllm.sh [--newest] [release ...]   (default: every release in VLLM_RELEASES;
#        --newest: only the newest). Prints one line per release: "<release> <venv python>".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
ROOT="${CACHE}/vllm"
PYTHON="${PYTHON:-python3}"
mkdir -p "${ROOT}"
# One install at a time per cache (two sessions would write the same virtualenv).
exec 9>"${ROOT}/.install.lock"
flock 9

log() { printf '[install-vllm %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

read -r -a all_releases <<<"${VLLM_RELEASES}"
releases=()
if [[ "${1:-}" == "--newest" ]]; then
  releases=("${all_releases[-1]}")
elif (($#)); then
  for r in "$@"; do
    [[ " ${VLLM_RELEASES} " == *" ${r} "* ]] || {
      echo "error: vLLM ${r} is not a supported release (hack/versions.env VLLM_RELEASES: ${VLLM_RELEASES})" >&2
      exit 2
    }
    releases+=("${r}")
  done
else
  releases=("${all_releases[@]}")
fi

# uv itself, from PyPI, in its own small virtualenv.
UV_HOME="${ROOT}/uv-${UV_VERSION}"
UV="${UV_HOME}/bin/uv"
if [[ ! -x "${UV}" ]]; then
  log "uv ${UV_VERSION}: installing"
  rm -rf "${UV_HOME}"
  "${PYTHON}" -m venv "${UV_HOME}"
  "${UV_HOME}/bin/pip" install --quiet --disable-pip-version-check "uv==${UV_VERSION}"
fi
export UV_CACHE_DIR="${ROOT}/uv-cache" UV_LINK_MODE=hardlink UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1

py_version="$("${PYTHON}" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
requirements_hash="$(printf '%s' "${VLLM_HARNESS_REQUIREMENTS}" | sha256sum | cut -c1-12)"

# harness_requirements VENV_PYTHON -> vLLM's own requirement lines for VLLM_HARNESS_REQUIREMENTS,
# one per line (extras and environment markers kept; uv evaluates the markers).
harness_requirements() {
  "$1" - "${VLLM_HARNESS_REQUIREMENTS}" <<'PY'
import re, sys
from importlib.metadata import requires

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

wanted = {norm(n) for n in sys.argv[1].split()}
found = set()
for line in requires("vllm") or []:
    if "extra ==" in line:
        continue
    name = norm(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0))
    if name in wanted:
        found.add(name)
        print(line)
# A requirement this release does not declare is installed unpinned (e.g. one vLLM gets
# transitively in some releases).
for name in sorted(wanted - found):
    print(name)
PY
}

for release in "${releases[@]}"; do
  venv="${ROOT}/${release}"
  stamp="vllm=${release} python=${py_version} uv=${UV_VERSION} requirements=${requirements_hash}"
  if [[ "${DSO_FORCE_REINSTALL:-0}" != "1" && -x "${venv}/bin/python" && -f "${venv}/.stamp-dso" \
        && "$(cat "${venv}/.stamp-dso")" == "${stamp}" ]]; then
    log "vLLM ${release}: up to date"
    echo "${release} ${venv}/bin/python"
    continue
  fi
  log "vLLM ${release}: installing into ${venv}"
  t0=${SECONDS}
  rm -rf "${venv}"
  "${UV}" venv --quiet --python "${PYTHON}" "${venv}"
  "${UV}" pip install --quiet --python "${venv}/bin/python" --no-deps "vllm==${release}"
  mapfile -t reqs < <(harness_requirements "${venv}/bin/python")
  "${UV}" pip install --quiet --python "${venv}/bin/python" "${reqs[@]}"
  # Smoke test: the modules the harness drives import on a CPU-only machine.
  VLLM_TARGET_DEVICE=cpu "${venv}/bin/python" -c \
    'import vllm.entrypoints.cli.serve, vllm.engine.arg_utils, vllm.config.kernel' >/dev/null
  echo "${stamp}" >"${venv}/.stamp-dso"
  log "vLLM ${release}: installed in $((SECONDS - t0))s"
  echo "${release} ${venv}/bin/python"
done
