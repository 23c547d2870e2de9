#!/usr/bin/env bash
# Make a Docker engine available to the image build and the container tests.
#
# If `docker info` already works (the user's own daemon, DOCKER_HOST set, Docker Desktop, ...), that
# engine is used and nothing is installed or started. Otherwise (CI and the dev VMs: no systemd, no
# daemon) this script:
#   1. installs Debian's docker.io with apt-get when `dockerd` is missing (needs root);
#   2. starts `dockerd` in the background with its own data root, exec root, socket and log under
#      ${DSO_CACHE:-$HOME/.cache/deepseek-operator}/docker/, so it never touches a system daemon's
#      state and its images (the cache) survive between runs;
#   3. waits until it answers.
# On a host whose capability bounding set lacks CAP_SYS_RESOURCE (some VMs), the daemon it starts
# runs containers through a small runc wrapper that drops that capability from the OCI spec, so
# `docker run --privileged` (a kind node) works; elsewhere nothing special happens.
# The daemon keeps running after the script ends (images and build cache stay warm for the next
# test run); `hack/docker-daemon.sh stop` stops a daemon this script started.
#
# Usage: hack/docker-daemon.sh [start|stop|env]   (default: start)
#   start  ensure an engine answers; prints DOCKER_HOST=<value> on its last line
#          (empty value: the default engine already answered).
#   env    like start, but prints only `export DOCKER_HOST=...` (for `eval "$(...)"`).
#   stop   stop the daemon this script started (no-op when none runs) and unmount what it left
#          mounted under the cache dir.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${DSO_CACHE:-${HOME}/.cache/deepseek-operator}"
DIR="${CACHE}/docker"
SOCK="${DIR}/docker.sock"
PIDFILE="${DIR}/dockerd.pid"
LOG="${DIR}/dockerd.log"
OWN_HOST="unix://${SOCK}"

log() { printf '[docker-daemon %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

answers() { timeout 20 docker "$@" info >/dev/null 2>&1; }

own_pid() {
  [[ -f "${PIDFILE}" ]] || return 1
  local pid
  pid="$(cat "${PIDFILE}")"
  [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null && echo "${pid}"
}

install_docker() {
  command -v dockerd >/dev/null && command -v docker >/dev/null && return 0
  if [[ "$(id -u)" != 0 ]]; then
    echo "error: no Docker engine answers and dockerd is not installed; install Docker" \
      "(Debian: apt-get install docker.io) or run this script as root" >&2
    exit 1
  fi
  log "installing docker.io (apt-get)"
  # iptables: dockerd's bridge network NATs through it; both are dependencies of docker.io, named
  # so a trimmed Debian without recommends still gets them.
  "${HERE}/apt-install.sh" docker.io iptables ca-certificates
}

# CAP_SYS_RESOURCE is capability 24. Some VMs (Firecracker here) drop it from the bounding set;
# then no process, root included, can hold it, and runc fails every container whose spec asks for
# it (`docker run --privileged` asks for all: "unable to apply caps: operation not permitted").
lacks_cap_sys_resource() {
  local bnd
  bnd="$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)"
  (( (16#${bnd} >> 24 & 1) == 0 ))
}

# A runtime for dockerd that removes CAP_SYS_RESOURCE from the OCI spec (config.json of the bundle
# for create/run, the --process file for exec) and then runs the real runc with the same
# arguments. Only installed where the capability is missing: asking for it could never succeed.
write_runc_wrapper() {
  local runc
  runc="$(command -v runc || echo /usr/sbin/runc)"
  cat >"${DIR}/runc-wrapper" <<WRAPPER
#!/usr/bin/env python3
"""runc, minus CAP_SYS_RESOURCE (absent from this host's bounding set). Written by hack/docker-daemon.sh."""
import json, os, sys

RUNC = "${runc}"
args = sys.argv[1:]


def value(flags):
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f + "="):
                return a.split("=", 1)[1]
    return None


def strip(path, key):
    with open(path) as fh:
        doc = json.load(fh)
    caps = (doc.get(key, {}) if key else doc).get("capabilities") or {}
    if any("CAP_SYS_RESOURCE" in v for v in caps.values() if isinstance(v, list)):
        for k, v in caps.items():
            if isinstance(v, list):
                caps[k] = [c for c in v if c != "CAP_SYS_RESOURCE"]
        with open(path, "w") as fh:
            json.dump(doc, fh)


command = next((a for a in args if a in ("create", "run", "exec")), None)
if command in ("create", "run"):
    bundle = value(("--bundle", "-b")) or "."
    strip(os.path.join(bundle, "config.json"), "process")
elif command == "exec":
    process = value(("--process", "-p"))
    if process:
        strip(process, None)
os.execv(RUNC, [RUNC, *args])
WRAPPER
  chmod 0755 "${DIR}/runc-wrapper"
}

start() {
  # 1. An engine that already answers wins: a user's laptop needs nothing from us.
  if command -v docker >/dev/null && answers; then
    echo "DOCKER_HOST=${DOCKER_HOST:-}"
    return
  fi
  if command -v docker >/dev/null && answers -H "${OWN_HOST}"; then
    echo "DOCKER_HOST=${OWN_HOST}"
    return
  fi
  mkdir -p "${DIR}/data" "${DIR}/exec"
  # `make test` builds the image and the kind node side by side: both come here, and only one may
  # install and launch the daemon (dockerd writes its pid file only once it runs).
  exec 6>"${DIR}/.start.lock"
  flock 6
  install_docker
  local runtime=()
  if lacks_cap_sys_resource; then
    write_runc_wrapper
    runtime=(--add-runtime "dso-runc=${DIR}/runc-wrapper" --default-runtime dso-runc)
    log "the capability bounding set lacks CAP_SYS_RESOURCE: containers run through ${DIR}/runc-wrapper"
  fi
  if pid="$(own_pid)"; then
    # Running but not answering yet (another run just started it): wait below.
    log "dockerd ${pid} is starting"
  else
    rm -f "${SOCK}" "${PIDFILE}"
    log "starting dockerd (data root ${DIR}/data, socket ${SOCK}, log ${LOG})"
    # --exec-root under the cache: a system dockerd's /var/run/docker is left alone.
    # setsid + nohup: the daemon outlives this script and the test process that ran it; 6>&-: it
    # must not inherit (and so hold forever) the start lock.
    setsid nohup dockerd \
      --host "${OWN_HOST}" \
      --data-root "${DIR}/data" \
      --exec-root "${DIR}/exec" \
      --pidfile "${PIDFILE}" \
      "${runtime[@]}" \
      >>"${LOG}" 2>&1 </dev/null 6>&- &
  fi
  local t0=${SECONDS}
  until answers -H "${OWN_HOST}"; do
    if ((SECONDS - t0 > 60)); then
      echo "error: dockerd did not answer on ${SOCK} within 60 s; last lines of ${LOG}:" >&2
      tail -n 30 "${LOG}" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  log "dockerd answers on ${SOCK} after $((SECONDS - t0)) s"
  echo "DOCKER_HOST=${OWN_HOST}"
}

stop() {
  local pid
  if ! pid="$(own_pid)"; then
    log "no dockerd started by this script is running"
    return
  fi
  log "stopping dockerd ${pid}"
  kill "${pid}"
  for _ in $(seq 1 60); do
    if ! kill -0 "${pid}" 2>/dev/null; then
      rm -f "${PIDFILE}"
      unmount_leftovers
      return
    fi
    sleep 0.5
  done
  echo "error: dockerd ${pid} still running after 30 s" >&2
  exit 1
}

# dockerd 20.10 leaves its default network namespace (exec/netns/default, an nsfs mount) and the
# data root's bind mount behind when it exits; unmount them so the cache can be deleted.
unmount_leftovers() {
  local mnt
  awk -v dir="${DIR}/" 'index($2, dir) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount "${mnt}" 2>/dev/null || umount -l "${mnt}" 2>/dev/null || true
  done
}

case "${1:-start}" in
  start) start ;;
  env) line="$(start | tail -n 1)"; echo "export ${line}" ;;
  stop) stop ;;
  *) echo "usage: $0 [start|stop|env]" >&2; exit 2 ;;
esac
