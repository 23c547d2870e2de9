#!/usr/bin/env bash
# Install vLLM's router (vllm-router, PyPI) into a cached virtualenv, once, for the tests that run
# its own code: the conformance check of the router argv the operator renders (its argument
# parser, vllm_router.router_args) and the P/D protocol test of the vLLM stand-in behind the real
# router binary (tests/integration/test_router_standin.py).
#
# Pins: router-requirements.txt (vllm-router and every dependency, installed with --no-deps), the
# same file the router image installs (Dockerfile, target router).
# Output: ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/vllm-router/<version>/  (outside the repo).
# A stamp (<venv>/.stamp-dso) holds the hash of the pins and the Python it was made with; a re-run
# with a matching stamp does nothing (~0.1 s). Cold: one 23 MB wheel plus ~30 small ones (~20 s).
#
# Usage: hack/install-vllm-router.sh   Prints the virtualenv's python on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/.." && pwd)"
CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
PYTHON="${PYTHON:-python3}"
PINS="${ROOT}/router-requirements.txt"
VERSION="$(sed -n 's/^vllm-router==\(.*\)$/\1/p' "${PINS}")"
[[ -n "${VERSION}" ]] || { echo "error: no vllm-router== pin in ${PINS}" >&2; exit 2; }
VENV="${CACHE}/vllm-router/${VERSION}"
mkdir -p "${CACHE}/vllm-router"
exec 9>"${CACHE}/vllm-router/.install.lock"
flock 9

stamp="$(cat "${PINS}" | sha256sum | cut -c1-16) $("${PYTHON}" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
if [[ -x "${VENV}/bin/vllm-router" && -f "${VENV}/.stamp-dso" && "$(cat "${VENV}/.stamp-dso")" == "${stamp}" ]]; then
  echo "${VENV}/bin/python"
  exit 0
fi
printf '[install-vllm-router %s] vllm-router %s: installing into %s\n' "$(date -u +%H:%M:%S)" "${VERSION}" "${VENV}" >&2
rm -rf "${VENV}"
"${PYTHON}" -m venv "${VENV}"
"${VENV}/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "${PINS}"
"${VENV}/bin/vllm-router" --help >/dev/null
echo "${stamp}" >"${VENV}/.stamp-dso"
echo "${VENV}/bin/python"
