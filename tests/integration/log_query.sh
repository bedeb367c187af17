# log_query.sh - DBTHROTTLE_LOG_QUERY puts the query in the trace, or not
it_log_query() {
    # DBTHROTTLE_LOG_QUERY: the command's text in its grant and release lines (quoted, escaped, cut
    # at 1 KiB with "..."), and never when off.
    # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
    long=$(python3 -c 'print("select 1 /*" + "x" * 2000 + "*/")')
    throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG_QUERY=on \
        DBTHROTTLE_LOG=$work/query_on.log psql -qAt -c 'select '"'"'a "quoted"'"'"' as q' -c "$long" >/dev/null
    throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_LOG_LEVEL=info DBTHROTTLE_LOG=$work/query_off.log \
        psql -qAt -c "select 42" >/dev/null
    check "LOG_QUERY=on: grant and release carry the query, escaped; a 2 KB one is cut at 1 KiB with ..." \
        python3 - "$work/query_on.log" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]) if re.search(r"event=(grant|release) ", l)]
q = [re.search(r' query="((?:[^"\\]|\\.)*)"', l).group(1) for l in lines]
assert q[0] == q[1] == 'select \'a \\"quoted\\"\' as q', q[:2]
assert q[2] == q[3] and q[2].startswith("select 1 /*xxx") and q[2].endswith("x..."), q[2][-20:]
assert 1000 <= len(q[2]) <= 1030, len(q[2])
PY
    check "LOG_QUERY=off (the default): no query text in the trace" \
        'grep -q "event=grant" "$work/query_off.log" && ! grep -q "query=" "$work/query_off.log"'
}
