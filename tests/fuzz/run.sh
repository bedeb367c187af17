#!/bin/sh
# run.sh [BUILD_DIR] - builds the libFuzzer targets (clang, with ASan and UBSan) and runs each for
# FUZZ_SECONDS (default 20) from its seed corpus in tests/fuzz/corpus/<target>/. New inputs go to
# a scratch directory, so the corpus in the repo only changes by hand. Fails if a target crashes;
# the crashing input is kept in BUILD_DIR. `make fuzz FUZZ_SECONDS=600` runs it longer.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$top/build/fuzz}
secs=${FUZZ_SECONDS:-20}
mkdir -p "$out"
cd "$top"
srcs="preload/base/config_load.c preload/base/config_values.c preload/base/settings.c preload/base/class_rules.c preload/base/log.c preload/base/log_syslog.c preload/base/redact.c preload/redis/keys.c"
# fuzz_redact checks the redaction against libpq's own conninfo parser, so it links libpq.
targets="fuzz_config fuzz_values fuzz_redact fuzz_keys"
# The library's files are compiled with their layer's own headers, the targets (black-box) with
# the layers' public faces only (include/), as the Makefile compiles the tests.
cflags="-std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=all"
pub="-Ipreload/base/include -Ipreload/redis/include -I$out/../gen"
objs=
for src in $srcs; do
    o=$out/obj/$(echo "${src%.c}" | tr / _).o
    mkdir -p "$out/obj"
    # shellcheck disable=SC2086
    clang $cflags "-I$(dirname "$src")" $pub -c "$src" -o "$o"
    objs="$objs $o"
done
for t in $targets; do
    # shellcheck disable=SC2086
    clang $cflags $pub -I/usr/include/postgresql -o "$out/$t" "tests/fuzz/$t.c" $objs -pthread -lpq
done
# One target per core at a time: each libFuzzer run keeps one core busy for FUZZ_SECONDS, and
# make test waits for them (4 targets of 15 s: 30 s on 2 cores instead of 60).
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
run_target() {
    t=$1
    scratch=$(mktemp -d)
    if (cd "$out" && "./$t" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 \
        -artifact_prefix="$out/$t-" "$scratch" "$top/tests/fuzz/corpus/$t" >"$out/$t.log" 2>&1); then
        runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$out/$t.log")
        cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1)
        echo "ok   - $t: $runs inputs in ${secs}s, $cov, no crash" >"$out/$t.result"
        rc=0
    else
        {
            echo "FAIL - $t crashed; input kept as $out/$t-crash-*"
            grep -A15 "ERROR\|SUMMARY\|deadly" "$out/$t.log" | head -30
        } >"$out/$t.result"
        rc=1
    fi
    rm -rf "$scratch"
    return $rc
}
fail=0
set -- $targets
while [ $# -gt 0 ]; do
    pids=
    n=0
    while [ $# -gt 0 ] && [ $n -lt "$jobs" ]; do
        run_target "$1" &
        pids="$pids $!"
        shift
        n=$((n + 1))
    done
    for p in $pids; do wait "$p" || fail=1; done
done
for t in $targets; do cat "$out/$t.result"; done
exit $fail
