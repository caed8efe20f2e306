#!/usr/bin/env bash
# install_test.sh BUILD [SANITIZE]: ctest "install". `cmake --install BUILD`
# into a temporary prefix, then checks what a host project needs: the
# layout, the installed luon running on the installed Lua files and
# libraries, plain luajit with the installed luon --env, and a C program
# built with `pkg-config --cflags --libs luon` calling Lua through the
# embedding API. SANITIZE: the build's LUON_SANITIZE (the C program gets it too).
set -euo pipefail
build=$(cd "$1" && pwd) san=${2:-}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; fail "cmake --install failed"; }
for f in bin/luon lib/libluon.so lib/libluon_embed.so lib/luon.so lib/pkgconfig/luon.pc \
         include/luon/luon.h include/luon/luon_embed.h share/luon/lua/luon/init.lua \
         share/luon/lua/luon/cdef.lua share/luon/lua/luon/ffi.lua share/luon/lua/luon/gluon/nn/init.lua; do
  [[ -e $prefix/$f ]] || fail "missing $f"
done
if [[ -e $build/lib/libluon_cuda.so && ! -e $prefix/lib/libluon_cuda.so ]]; then fail "missing lib/libluon_cuda.so"; fi

env_vars=()
if [[ -n $san ]]; then
  env_vars=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
fi

# the installed luon: installed Lua files and libluon, nothing from the build tree
where='local f = io.open("/proc/self/maps"); local maps = f:read("*a"); f:close()
       print(package.searchpath("luon.core", package.path), maps:match("(%S*libluon%.so)"))
       print(require("luon").np.arange(4):sum():item())'
out=$(env -u LUA_PATH -u LUA_CPATH -u LUON_LIB "$prefix/bin/luon" -e "$where") || fail "installed luon -e: $out"
[[ $out == "$prefix/bin/../share/luon/lua/luon/core.lua"$'\t'"$prefix/"*"lib/libluon.so"$'\n'"6" ]] ||
  fail "installed luon uses other files: $out"

# plain luajit with the installed paths
out=$(env -u LUON_LIB "${env_vars[@]}" sh -c "$("$prefix/bin/luon" --env)
  exec luajit -e 'print(package.searchpath(\"luon\", package.path)); print(require(\"luon\").np.ones({3}):sum():item())'") ||
  fail "luajit with the installed luon --env: $out"
[[ $out == "$prefix/bin/../share/luon/lua/luon/init.lua"$'\n'"3" ]] || fail "luajit with --env: $out"

# a C host built with pkg-config's flags
cat >"$prefix/host.c" <<'C'
#include <luon_embed.h>
#include <stdio.h>
int main(void) {
  luon_rt *rt;
  float x[3] = {1, 2, 3}, y = 0;
  luon_buffer in = {x, LUON_DTYPE_F32, 1, {3}}, out = {&y, LUON_DTYPE_F32, 0, {0}};
  if (luon_rt_new(&rt) != LUON_OK) return fprintf(stderr, "%s\n", luon_rt_last_error(NULL)), 1;
  if (luon_rt_dostring(rt, "function total(x) return x:sum() end\n"
                           "print(package.searchpath('luon.core', package.path))") != LUON_OK ||
      luon_rt_call(rt, "total", 1, &in, 1, &out) != LUON_OK)
    return fprintf(stderr, "%s\n", luon_rt_last_error(rt)), 1;
  printf("%g\n", y);
  luon_rt_free(rt);
  return 0;
}
C
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs luon) || fail "pkg-config luon"
cc ${san:+-fsanitize=$san} -o "$prefix/host" "$prefix/host.c" $flags || fail "compiling with: $flags"
out=$(env -u LUA_PATH -u LUA_CPATH -u LUON_LIB "$prefix/host") || fail "the C host: $out"
[[ $out == "$prefix/"*"share/luon/lua/luon/core.lua"$'\n'"6" ]] || fail "the C host: $out"
echo "install_test: ok ($prefix)"
