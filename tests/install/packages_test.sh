#!/bin/sh
# packages_test.sh BUILD_DIR — the Debian packages (cpack -G DEB): four
# packages with what each must hold, the daemon's maintainer scripts and
# conffile, and, when lintian is installed, no errors and no warnings.
set -eu
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$build" && cpack -G DEB -B "$tmp" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; echo "cpack failed"; exit 1; }
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
need() {  # need PACKAGE PATH...: each path is in the package
  deb=$(ls "$tmp/$1_${version}_"*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || { echo "no package $1"; exit 1; }
  pkg=$1; shift
  dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\.||' >"$tmp/$pkg.list"
  for p in "$@"; do
    grep -qx "$p" "$tmp/$pkg.list" || { echo "$pkg does not hold $p"; exit 1; }
  done
}
need ptod /usr/bin/ptod /usr/lib/systemd/system/ptod.service /etc/ptod/ptod.toml /usr/share/man/man1/ptod.1.gz \
  /usr/share/doc/ptod/copyright /usr/share/doc/ptod/changelog.gz
need pto-tools /usr/bin/ptoctl /usr/bin/pto2-run /usr/share/man/man1/ptoctl.1.gz /usr/share/man/man1/pto2-run.1.gz \
  /usr/share/bash-completion/completions/ptoctl /usr/share/doc/pto-tools/copyright
need libpto-dev /usr/include/pto/client.h /usr/include/pto2/kernel_abi.h /usr/include/pto/version.h \
  /usr/include/pto-proto/pto/v1/ptod.pb.h /usr/share/pto/proto/pto/v1/ptod.proto \
  /usr/share/pto/proto/pto/v1/session.proto /usr/share/pto/proto/grpc/health/v1/health.proto
grep -q '/cmake/PTO/PTOConfig.cmake$' "$tmp/libpto-dev.list" || { echo "libpto-dev has no PTOConfig.cmake"; exit 1; }
grep -q '/pkgconfig/pto.pc$' "$tmp/libpto-dev.list" || { echo "libpto-dev has no pto.pc"; exit 1; }
if [ -f "$build/python/pto/__init__.py" ]; then
  need python3-pto /usr/lib/python3/dist-packages/pto/__init__.py /usr/lib/python3/dist-packages/pto/v1/ptod_pb2.py
fi
# Every binary stripped.
dpkg-deb -x "$(ls "$tmp"/ptod_*.deb)" "$tmp/x"
dpkg-deb -x "$(ls "$tmp"/pto-tools_*.deb)" "$tmp/x"
for b in "$tmp/x/usr/bin/"*; do
  file "$b" | grep -q "stripped" && ! file "$b" | grep -q "not stripped" || { echo "not stripped: $b"; exit 1; }
done
# The daemon's control files.
dpkg-deb -e "$(ls "$tmp"/ptod_*.deb)" "$tmp/ctl"
grep -qx /etc/ptod/ptod.toml "$tmp/ctl/conffiles" || { echo "ptod.toml is not a conffile"; exit 1; }
grep -q "deb-systemd-helper enable ptod.service" "$tmp/ctl/postinst" || { echo "postinst does not enable the unit"; exit 1; }
grep -q "deb-systemd-invoke" "$tmp/ctl/postinst" || { echo "postinst does not start the unit"; exit 1; }
grep -q "^Depends:.*adduser" "$tmp/ctl/control" || { echo "ptod uses adduser without depending on it"; exit 1; }
for s in postinst prerm postrm; do sh -n "$tmp/ctl/$s"; done
for c in "$tmp/x/usr/share/bash-completion/completions/"*; do bash -n "$c"; done
# The completion offers every ptoctl subcommand.
for cmd in $("$build/client/ptoctl" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}'); do
  grep -qE "(^|[ \"])$cmd([ \"]|\$)" "$tmp/x/usr/share/bash-completion/completions/ptoctl" ||
    { echo "the ptoctl completion does not offer '$cmd'"; exit 1; }
done
if command -v lintian >/dev/null 2>&1; then
  lintian --tag-display-limit 0 "$tmp"/*.deb >"$tmp/lintian.log" 2>&1 || true
  cat "$tmp/lintian.log"
  if grep -q '^[EW]: ' "$tmp/lintian.log"; then echo "lintian: errors or warnings"; exit 1; fi
  echo "lintian: no errors, no warnings"
else
  echo "lintian: not installed, skipped"
fi
echo "packages: ptod, pto-tools, libpto-dev$( [ -f "$build/python/pto/__init__.py" ] && echo ', python3-pto') OK"
