#!/bin/sh
# deploy_test.sh BUILD_DIR — the install rules: cmake --install into a
# temporary DESTDIR gives the documented layout; the installed unit passes
# `systemd-analyze verify` (ExecStart pointed at the staged binary); the
# shipped default config starts a daemon that drains on SIGTERM with exit 0.
set -eu
build=$1
stage=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$stage"; }
trap cleanup EXIT
DESTDIR=$stage cmake --install "$build" >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
for f in /etc/ptod/ptod.toml "$prefix/bin/ptod" "$prefix/bin/ptoctl" "$prefix/lib/systemd/system/ptod.service" \
         "$prefix/share/doc/ptod/daemon.md" "$prefix/share/pto/proto/pto/v1/ptod.proto"; do
  [ -f "$stage$f" ] || { echo "missing after install: $f"; exit 1; }
done
grep -q '^Type=notify$' "$stage$prefix/lib/systemd/system/ptod.service"
# The Python package lands where Debian's python3 looks (for this prefix) and imports from there.
if [ -f "$build/python/pto/__init__.py" ]; then  # built (not in sanitizer builds)
  site=$(find "$stage$prefix/lib" -path '*dist-packages/pto/__init__.py' | head -n1)
  [ -n "$site" ] || { echo "missing after install: the pto Python package"; exit 1; }
  case "$prefix" in
    /usr) want=/usr/lib/python3/dist-packages ;;
    *) want=$(/usr/bin/python3 -c 'import sys; print("%s/lib/python%d.%d/dist-packages" % (sys.argv[1], *sys.version_info[:2]))' "$prefix") ;;
  esac
  [ "$(dirname "$(dirname "$site")")" = "$stage$want" ] || { echo "pto installed in $(dirname "$site"), not under $want"; exit 1; }
  PYTHONPATH=$stage$want /usr/bin/python3 -c 'import pto, pto.chip' || { echo "the installed pto does not import"; exit 1; }
fi
if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s|^ExecStart=[^ ]*|ExecStart=$stage$prefix/bin/ptod|; s|^ExecReload=.*|ExecReload=$(command -v kill) -HUP \$MAINPID|" \
    "$stage$prefix/lib/systemd/system/ptod.service" > "$stage/ptod.service"
  out=$(systemd-analyze verify "$stage/ptod.service" 2>&1 | grep -v -e 'sysinit.target' -e 'user ptod' -e "Command 'man " || true)
  [ -z "$out" ] || { echo "systemd-analyze verify: $out"; exit 1; }
fi
"$stage$prefix/bin/ptod" --config "$stage/etc/ptod/ptod.toml" --state-dir "$stage/state" --socket "$stage/s.sock" \
  --metrics off --ready-file "$stage/ready" >"$stage/log" 2>&1 &
pid=$!
i=0
while [ ! -f "$stage/ready" ]; do
  i=$((i + 1)); [ $i -lt 3000 ] || { cat "$stage/log"; echo "ptod did not start"; exit 1; }
  kill -0 "$pid" 2>/dev/null || { cat "$stage/log"; echo "ptod exited"; exit 1; }
  sleep 0.01
done
"$stage$prefix/bin/ptoctl" --address "unix:$stage/s.sock" health
kill -TERM "$pid"
wait "$pid" && rc=0 || rc=$?
pid=""
[ "$rc" -eq 0 ] || { cat "$stage/log"; echo "ptod exited $rc after SIGTERM"; exit 1; }
echo "deploy: install layout, unit and default config OK"
