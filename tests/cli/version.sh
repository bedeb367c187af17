#!/bin/sh
# version.sh - every place that shows the version shows debian/changelog's (its first line: the
# one source): dbthrottle --version, check (the command's and the library's, and its warnings when
# a library of another version is preloaded), the library file's text, a process' record in Redis
# (status --json), the man pages' headers; and those of the other parts once they are there (the
# exporter's build_info, the library's exit summary). A redis-server of its own on a free port.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/lib.sh"
D=${DBT_CLI:-$top/build/dbthrottle}
harness_begin version
export DBTHROTTLE_LOG_LEVEL=error
redis_start

V=$(sed -n '1s/^dbthrottle (\([^)]*\)).*/\1/p' "$top/debian/changelog")
check "debian/changelog's first line names a version ($V)" '[ -n "$V" ]'

out=$("$D" --version); rc=$?
check "dbthrottle --version: \"dbthrottle $V\", exit 0 ($out)" '[ $rc -eq 0 ] && [ "$out" = "dbthrottle $V" ]'

lib_v=$(grep -a -o 'dbthrottle-version=[^[:cntrl:]]*' "$lib" | head -1)
check "the library file carries its version in its text ($lib_v)" '[ "$lib_v" = "dbthrottle-version=$V" ]'

DBTHROTTLE_MAX_QUERIES=1 "$D" check >"$work/check.out" 2>"$work/check.err"; rc=$?
check "check: the command's version first, the library's on its line, no version warning (rc $rc: $(grep -m1 "^library" "$work/check.out"))" '[ $rc -eq 0 ] && [ "$(head -1 "$work/check.out")" = "dbthrottle $V" ] && grep -q "^library: .* loads, version $V\$" "$work/check.out" && ! grep -q "version" "$work/check.err"'

# A library of another version: the same file with its marker's version changed.
python3 - "$lib" "$work/libdbthrottle.so" "$V" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
marker = b"dbthrottle-version=" + sys.argv[3].encode() + b"\0"
assert data.count(marker) == 1, "the marker once"
other = b"dbthrottle-version=0.0.1" + b"\0" * (len(marker) - len(b"dbthrottle-version=0.0.1"))
open(sys.argv[2], "wb").write(data.replace(marker, other))
PY
DBTHROTTLE_MAX_QUERIES=1 "$D" check --library "$work/libdbthrottle.so" >"$work/check.out" 2>"$work/check.err"
check "check --library of another version: warns, naming both ($(grep -m1 "version" "$work/check.err"))" 'grep -q "warning: the library $work/libdbthrottle.so is version 0.0.1, this command $V" "$work/check.err" && grep -q "loads, version 0.0.1" "$work/check.out"'
DBTHROTTLE_MAX_QUERIES=1 LD_PRELOAD="$work/libdbthrottle.so" "$D" check >"$work/check.out" 2>"$work/check.err"
check "check with LD_PRELOAD naming a library of another version: warns ($(grep -m1 "LD_PRELOAD" "$work/check.err"))" 'grep -q "warning: LD_PRELOAD.s $work/libdbthrottle.so is version 0.0.1, this command $V" "$work/check.err"'
DBTHROTTLE_MAX_QUERIES=1 LD_PRELOAD="$work/gone/libdbthrottle.so" "$D" check >"$work/check.out" 2>"$work/check.gone.err"; rc=$?
expect_preload_failure "$work/check.gone.err"
check "check with LD_PRELOAD naming a library that is not there fails (rc $rc), saying ld.so skips it ($(grep -m1 "LD_PRELOAD" "$work/check.gone.err"))" '[ $rc -eq 1 ] && grep -q "^dbthrottle check: LD_PRELOAD names $work/gone/libdbthrottle.so: .*runs unthrottled" "$work/check.gone.err" && ! grep -qx ok "$work/check.out"'
# A file there that is not a library (a broken copy, another architecture's): ld.so skips it too.
echo "not a library" >"$work/libdbthrottle-broken.so"
DBTHROTTLE_MAX_QUERIES=1 LD_PRELOAD="$work/libdbthrottle-broken.so" "$D" check >"$work/check.out" 2>"$work/check.broken.err"; rc=$?
expect_preload_failure "$work/check.broken.err"
check "check with LD_PRELOAD naming a file that does not load fails (rc $rc), naming it ($(grep -m1 "^dbthrottle check: LD_PRELOAD" "$work/check.broken.err"))" '[ $rc -eq 1 ] && grep -q "^dbthrottle check: LD_PRELOAD names $work/libdbthrottle-broken.so, which does not load (.*runs unthrottled" "$work/check.broken.err" && ! grep -qx ok "$work/check.out"'
# ld.so expands $LIB in LD_PRELOAD (lib/<multiarch> on Debian, lib64 or lib elsewhere): check
# loads the entry as ld.so would, not the text as written.
for d in "lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)" lib64 lib; do
    mkdir -p "$work/lib-token/$d" && ln -sf "$lib" "$work/lib-token/$d/libdbthrottle.so"
done
DBTHROTTLE_MAX_QUERIES=1 LD_PRELOAD="$work/lib-token/\$LIB/libdbthrottle.so" "$D" check >"$work/check.out" 2>"$work/check.tok.err"; rc=$?
check "check with LD_PRELOAD naming the library through \$LIB passes, as ld.so loads it (rc $rc: $(grep -m1 "^preloaded" "$work/check.out"))" '[ $rc -eq 0 ] && grep -q "^preloaded: .*, version $V\$" "$work/check.out"'
DBTHROTTLE_MAX_QUERIES=1 LD_PRELOAD="$lib" "$D" check >"$work/check.out" 2>"$work/check.err"; rc=$?
check "check with LD_PRELOAD naming the library passes (rc $rc: $(grep -m1 "^preloaded" "$work/check.out"))" '[ $rc -eq 0 ] && grep -q "^preloaded: $lib, version $V\$" "$work/check.out"'

# A process' record in Redis, written by the library's client (here acquire's).
DBTHROTTLE_LEASE=3s "$D" acquire vp --limit 1 -- sleep 60 >/dev/null 2>&1 &
acq=$!
echo "$acq" >>"$work/pids"
procs() { "$D" status --json vp 2>/dev/null | python3 -c 'import json, sys; print(" ".join("%d=%s" % (p["pid"], p["version"]) for p in json.load(sys.stdin).get("processes", [])))' 2>/dev/null; }
wait_until 15 'procs | grep -q "$acq="'
check "a process' record in Redis (status --json) carries the version ($(procs))" 'procs | grep -qw "$acq=$V"'
kill -TERM "$acq"
wait "$acq"

for m in dbthrottle.1 libdbthrottle.7; do
    th=$(grep -m1 '^\.TH' "$top/build/man/$m")
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$top/build/man/$m" 2>&1 >/dev/null)
    check "build/man/$m: its header names the version and the changelog's date, renders without warnings ($th)${warn:+: $warn}" 'echo "$th" | grep -q "\"dbthrottle $V\"" && echo "$th" | grep -Eq " [0-9]{4}-[0-9]{2}-[0-9]{2} " && [ -z "$warn" ]'
done
check "the version is defined nowhere in the source but in debian/changelog" '! grep -rn "define DBT_VERSION \"" "$top/preload" "$top/cli" && ! grep -rn "@VERSION@" "$top/build/man"'

# The other parts' places, once there: the exporter's build_info, the library's exit summary.
"$D" status --prometheus >"$work/prom" 2>/dev/null
if grep -q "^dbthrottle_build_info" "$work/prom"; then
    check "status --prometheus: dbthrottle_build_info names the version" 'grep -q "^dbthrottle_build_info{.*version=\"$V\".*} 1" "$work/prom"'
else
    info "no dbthrottle_build_info yet (part B)"
fi
DBTHROTTLE_LOG_LEVEL=info "$D" acquire vs --limit 1 -- true 2>"$work/summary"
if grep "event=summary" "$work/summary" | grep -q "version="; then
    check "the exit summary names the library's version" 'grep "event=summary" "$work/summary" | grep -q "version=$V"'
else
    info "no version in the exit summary yet (part D)"
fi

summary
