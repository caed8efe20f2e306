#!/usr/bin/env bash
# Shared bits of scripts/setup and scripts/test, sourced, never run: the repo
# root, the package list, quiet logged commands. Holds no build logic itself.

LUON_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Debian packages luon needs to build and test (docs/ARCHITECTURE.md, Dependencies).
LUON_PACKAGES=(luajit libluajit-5.1-dev lua-busted libpng-dev libturbojpeg0-dev
               libopenblas-dev dataset-fashion-mnist cmake pkg-config gcc
               libcjson-dev zlib1g-dev libzip-dev libedit-dev clang libclang-rt-14-dev
               openmpi-bin libopenmpi-dev luarocks python3-numpy libdnnl-dev
               libprotobuf-c-dev protobuf-c-compiler libonnx-dev g++)

say() { printf '%s\n' "$*"; }
die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit 1; }

# show_tail LOG [N]: the last N lines of LOG, indented, on stderr.
show_tail() {
  printf -- '--- last %s lines of %s\n' "${2:-60}" "$1" >&2
  tail -n "${2:-60}" "$1" | sed 's/^/  /' >&2
}

# now: seconds since the epoch, for stage timings.
now() { date +%s; }
