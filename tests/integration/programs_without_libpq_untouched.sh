# programs_without_libpq_untouched.sh - programs that never use libpq are untouched
it_programs_without_libpq_untouched() {
    out=$(throttled DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_LOG_LEVEL=debug sh -c 'echo hi; ls / >/dev/null' 2>&1)
    check "a program without libpq prints nothing of ours, even with a bad setting" [ "$out" = hi ]
    threads=$(throttled DBTHROTTLE_MAX_QUERIES=4 sh -c 'ls /proc/self/task | wc -l')
    check "and starts no thread (threads: $threads)" [ "$threads" -eq 1 ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 /usr/bin/python3 -c 'print(1)' 2>&1)
    check "python3 without libpq: unchanged ($out)" [ "$out" = 1 ]
    out=$(timeout 20 env LD_PRELOAD="$lib $top/build/tests/libnext_preload.so" DBTHROTTLE_MAX_QUERIES=4 id -u 2>&1)
    check "another preload's dlsym(RTLD_NEXT) still finds libc, not itself ($out)" [ "$out" = "$(id -u)" ]
    direct=$(/sbin/ldconfig -p | head -3)
    through=$(throttled DBTHROTTLE_MAX_QUERIES=4 /sbin/ldconfig -p 2>&1 | head -3)
    check "a static binary (ldconfig) runs unchanged" [ "$direct" = "$through" ]
}
