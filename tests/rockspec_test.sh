#!/usr/bin/env bash
# rockspec_test.sh: ctest "rockspec". `luarocks make luon-scm-1.rockspec` in
# a copy of the checkout, into a temporary rocks tree (CUDA off: the backend
# is not what this checks), then plain luajit with that tree's paths
# (`luarocks path`) requires luon and runs an op.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v luarocks >/dev/null || { echo "rockspec_test: luarocks is not installed (scripts/setup installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$tmp/src"
cd "$tmp/src"
LUON_CUDA=OFF luarocks --lua-version 5.1 --tree "$tmp/tree" make luon-scm-1.rockspec >"$tmp/make.log" 2>&1 ||
  { tail -n 40 "$tmp/make.log"; echo "rockspec_test: luarocks make failed" >&2; exit 1; }
cd "$tmp"
out=$(eval "$(luarocks --lua-version 5.1 --tree "$tmp/tree" path)" && env -u LUON_LIB luajit -e '
  local luon = require("luon")
  print(package.searchpath("luon", package.path))
  print(luon.np.arange(4):sum():item())') || { echo "rockspec_test: luajit: $out" >&2; exit 1; }
[[ $out == "$tmp/tree/share/lua/5.1/luon/init.lua"$'\n'"6" ]] || { echo "rockspec_test: unexpected: $out" >&2; exit 1; }
echo "rockspec_test: ok"
