# bad_settings.sh - a bad setting refuses every command, loudly, but locks no way out:
# DBTHROTTLE_DISABLE=on still disables (the escape hatch is not locked by what it escapes),
# exempt connections get through when only other settings are bad (the others are still
# refused), the operator's commands ignore errors in settings only workers read, a Redis URL with
# a query string is refused without showing it, and a library loaded with no limit warns (at the
# default level) that the program runs unthrottled. Read from the server's log of dbt_probe.
echo "# bad_settings: bad settings refuse loudly without locking the ways out"
bs_run() { # bs_run NAME ENV... : one psql probe, application_name bs_NAME, output in bs.NAME
    bs_name=$1
    shift
    PGAPPNAME="bs_$bs_name" throttled DBTHROTTLE_LOG_LEVEL=warn "$@" \
        psql -X -c "SELECT dbt_probe(0)" >"$work/bs.$bs_name" 2>&1
}
mark
printf 'max_queries = lots\n' >"$work/bs.conf"
bs_run disabled_file DBTHROTTLE_CONFIG="$work/bs.conf" DBTHROTTLE_DISABLE=on
bs_run disabled_env DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_DISABLE=on
check "bad_settings: DBTHROTTLE_DISABLE=on disables whatever else is bad (a bad file, a bad variable): both ran" \
    '[ "$(probes bs_disabled_file)" -eq 1 ] && [ "$(probes bs_disabled_env)" -eq 1 ]'
bs_run broken DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=soon
check "bad_settings: a bad setting refuses the command, naming it: $(grep -m1 "error: dbthrottle" "$work/bs.broken")" \
    '[ "$(probes bs_broken)" -eq 0 ] && grep -q "dbthrottle: bad configuration: DBTHROTTLE_WAIT_TIMEOUT" "$work/bs.broken"'
bs_run ops_exempt DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=soon DBTHROTTLE_EXEMPT="application_name=bs_ops*"
bs_run not_exempt DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_WAIT_TIMEOUT=soon DBTHROTTLE_EXEMPT="application_name=bs_ops*"
check "bad_settings: an exempt connection gets through a bad unrelated setting; the others are still refused" \
    '[ "$(probes bs_ops_exempt)" -eq 1 ] && [ "$(probes bs_not_exempt)" -eq 0 ] && grep -q "dbthrottle: bad configuration" "$work/bs.not_exempt"'
bs_run no_limit
check "bad_settings: loaded with no limit, the library warns at the default level that the program runs unthrottled" \
    '[ "$(probes bs_no_limit)" -eq 1 ] && grep -q "level=warn.*event=not_throttled" "$work/bs.no_limit"'
bs_run query_url DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport/0?password=bs-Query-Secret"
check "bad_settings: a Redis URL with a query string is refused without showing it: $(grep -m1 "dbthrottle" "$work/bs.query_url")" \
    '[ "$(probes bs_query_url)" -eq 0 ] && grep -q "query string" "$work/bs.query_url" && ! grep -q "bs-Query-Secret" "$work/bs.query_url"'
# The operator's shell with a worker's stray bad setting: status still works; a bad Redis URL
# (which status reads) still stops it.
DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_LOG_LEVEL=loud "$top/build/dbthrottle" status >"$work/bs.status" 2>&1
bs_status_rc=$?
DBTHROTTLE_REDIS_URL=redis://nope:x "$top/build/dbthrottle" status >"$work/bs.status_bad" 2>&1
bs_status_bad_rc=$?
check "bad_settings: dbthrottle status ignores worker-only settings (rc $bs_status_rc) but not its own (rc $bs_status_bad_rc)" \
    '[ "$bs_status_rc" -eq 0 ] && [ "$bs_status_bad_rc" -ne 0 ] && grep -q DBTHROTTLE_REDIS_URL "$work/bs.status_bad"'
