#!/usr/bin/env bash
# Install Debian packages (no recommends), one apt-get at a time across the build scripts:
# `make test` builds the image and the kind node side by side, and a second apt-get would fail on
# dpkg's lock instead of waiting for it. Tries the local package lists first, then updates them.
#
# Usage: hack/apt-install.sh package [package ...]   (needs root)
set -euo pipefail
(($#)) || { echo "usage: $0 package [package ...]" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "error: installing $* needs root (apt-get install $*)" >&2; exit 1; }
exec 9>/tmp/deepseek-operator-apt.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
