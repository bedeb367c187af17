#!/bin/sh
# build-deb.sh OUTDIR - builds the Debian packages libdbthrottle and dbthrottle (debian/) with
# dpkg-buildpackage -us -uc -b, from a copy of the source tree in OUTDIR/src: dpkg-buildpackage
# writes its .debs beside the tree it builds (in ..) and leaves debian/ build files behind, so
# the work tree stays as it is. The .debs, .buildinfo and .changes end up in OUTDIR. The test
# suite is not run (DEB_BUILD_OPTIONS=nocheck; make test runs it, with its own servers).
set -eu
out=$1
top=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' "$top/debian/changelog")
[ -n "$version" ] || { echo "build-deb: no version on debian/changelog's first line" >&2; exit 1; }
# What debian/control's Build-Depends names (debhelper-compat is debhelper's), installed when
# missing, as make installs the build packages: dpkg-buildpackage refuses to start without them.
build_deps=$(awk '/^Build-Depends:/ { on = 1; sub(/^Build-Depends:/, "") }
    on && /^[A-Za-z-]+:/ && !/^Build-Depends:/ { on = 0 }
    on { print }' "$top/debian/control" | tr ',' '\n' |
    sed -e 's/(.*)//' -e 's/\[.*\]//' -e 's/[[:space:]]//g' -e 's/^debhelper-compat$/debhelper/' | grep .)
# build-essential too: every Debian package build depends on it without naming it, and
# dpkg-checkbuilddeps refuses to start without it (a fresh machine has gcc and make but not it).
# shellcheck disable=SC2086
sh "$top/tools/install-deps.sh" build build-essential dpkg-dev fakeroot $build_deps
mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$out/src/dbthrottle-$version
rm -rf "$out/src"
mkdir -p "$src"
# The files of the tree (tracked, and new ones not ignored: what the next commit would hold);
# never a build tree.
cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c '
        for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh |
        tar -c --null -T - -f - | tar -x -C "$src"
else
    tar -c --exclude=./build --exclude=./.git -f - . | tar -x -C "$src"
fi
cd "$src"
rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -us -uc -b >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (the whole log: $out/build.log)" >&2
    exit 1
}
mv "$out"/src/*.deb "$out"/src/*.buildinfo "$out"/src/*.changes "$out"/
rm -rf "$out/src"
ls "$out"/*.deb
