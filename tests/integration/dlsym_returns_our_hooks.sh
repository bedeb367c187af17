# dlsym_returns_our_hooks.sh - a libpq found through dlsym(handle, name) hands out our hooks: ctypes
# (psycopg 3) dlopen()s libpq and asks the handle for each function: every PQ/lo_ function the
# library exports must come back as ours, or that program calls libpq unthrottled
it_dlsym_returns_our_hooks() {
    names=$(nm -D --defined-only "$lib" | awk '$3 ~ /^(PQ|lo_)/ {print $3}')
    listed=$(wc -l <"$top/build/gen/hooks.list")
    out=$(throttled DBTHROTTLE_MAX_QUERIES=4 "$top/build/tests/dlsym_check" "$lib" $names 2>&1)
    check "dlsym(dlopen(\"libpq.so.5\"), name) is our hook for each exported libpq function ($out)" \
        '[ "$out" = "dlsym: $listed of $listed hooks" ]'
}
