#!/usr/bin/env bash
# fresh_setup_test.sh BUILD: ctest "fresh_setup". scripts/test on a machine
# where busted is not installed yet must install it (through scripts/setup)
# before it looks for it, as the README's test command promises. Simulated:
# PATH is a copy of the real one without busted, dpkg-query says lua-busted
# is missing, and a stand-in apt-get "installs" it by putting busted back on
# PATH. Then `scripts/test <one spec>` must pass.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "$1" && pwd)
real_busted=$(command -v busted) || { echo "fresh_setup_test: busted is not installed here" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/path" "$tmp/stubs" "$tmp/installed"

# every command on PATH but busted
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [[ -d $d ]] || continue
  for f in "$d"/*; do
    name=${f##*/}
    [[ $name == busted || -e $tmp/path/$name ]] || ln -s "$f" "$tmp/path/$name"
  done
done

cat >"$tmp/stubs/dpkg-query" <<STUB
#!/bin/sh
for a; do
  if [ "\$a" = lua-busted ] && [ ! -e "$tmp/installed/busted" ]; then exit 1; fi
done
exec $(command -v dpkg-query) "\$@"
STUB
cat >"$tmp/stubs/apt-get" <<STUB
#!/bin/sh
case " \$* " in *" install "*lua-busted*) ln -s "$real_busted" "$tmp/installed/busted" ;; esac
exit 0
STUB
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/stubs/sudo"
chmod +x "$tmp/stubs/"*

rel=$(realpath --relative-to="$root" "$build")
out=$(PATH="$tmp/stubs:$tmp/installed:$tmp/path" LUON_BUILD_DIR="$rel" \
      bash "$root/scripts/test" "$root/tests/lua/abi_spec.lua" 2>&1) ||
  { printf '%s\n' "$out"; echo "fresh_setup_test: scripts/test failed without busted on PATH" >&2; exit 1; }
[[ -e $tmp/installed/busted ]] || { printf '%s\n' "$out"; echo "fresh_setup_test: setup did not install lua-busted" >&2; exit 1; }
grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$out" || { printf '%s\n' "$out"; echo "fresh_setup_test: no spec passed" >&2; exit 1; }
echo "fresh_setup_test: ok"
