# shellcheck shell=bash
# The Go environment of every build in hack/ (sourced by build-control-plane.sh and
# build-kind-node.sh): static binaries, no paths of this machine in them, the local toolchain only.
#
# GOGC=400: the Go compiler is a Go program, and a cold `make test` spends most of its build phase
# in it (~20 min on 2 cores). Collecting its heap at 5x the live size instead of 2x cuts the
# compiler's CPU time by about a fifth (kwok v0.8.0 with an empty build cache: 198-203 s user at
# GOGC=100, 156 s at 400, 151 s at 800), for a few hundred MB more per compile process;
# GOMEMLIMIT caps that, so a large package still collects before it takes 2 GiB.
# -dwarf=false: every binary is linked with -s -w (no symbol table, no DWARF), so the compiler's
# DWARF was thrown away at link time; not generating it takes another tenth (kwok, same
# conditions: 160 s user + 38 s sys with it, 146 s + 34 s without; the binary is the same size).
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-trimpath -gcflags=all=-dwarf=false"
export GOGC="${DSO_GO_GOGC:-400}"
export GOMEMLIMIT="${DSO_GO_MEMLIMIT:-2GiB}"
GO="${GO:-go}"
command -v "${GO}" >/dev/null || { echo "error: Go toolchain '${GO}' not found" >&2; exit 1; }
