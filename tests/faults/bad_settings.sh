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
# dbthrottle run with DISABLE on: the library would only disable, so run starts the program
# without further checks (with or without --no-check); a DISABLE that did not parse is no way out.
bs_cli_run() { # bs_cli_run NAME ENV... -- RUN-OPTIONS...: dbthrottle run of one psql probe
    bs_name=$1
    shift
    env PGAPPNAME="bs_$bs_name" DBTHROTTLE_LOG_LEVEL=warn "$@" psql -X -c "SELECT dbt_probe(0)" \
        >"$work/bs.$bs_name" 2>&1
    echo $? >"$work/bs.$bs_name.rc"
}
bs_cli_run run_disabled DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_DISABLE=on "$top/build/dbthrottle" run --
bs_cli_run run_disabled_nc DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_DISABLE=on "$top/build/dbthrottle" run --no-check --
bs_cli_run run_disabled_file DBTHROTTLE_CONFIG="$work/bs.conf" DBTHROTTLE_DISABLE=on "$top/build/dbthrottle" run --
bs_cli_run run_bad_disable DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_DISABLE=maybe "$top/build/dbthrottle" run --
check "bad_settings: dbthrottle run with DISABLE on starts the program whatever else is bad (rc $(cat "$work/bs.run_disabled.rc") $(cat "$work/bs.run_disabled_nc.rc") $(cat "$work/bs.run_disabled_file.rc"), probes $(probes bs_run_disabled) $(probes bs_run_disabled_nc) $(probes bs_run_disabled_file))" \
    '[ "$(cat "$work/bs.run_disabled.rc")$(cat "$work/bs.run_disabled_nc.rc")$(cat "$work/bs.run_disabled_file.rc")" = 000 ] && [ "$(probes bs_run_disabled)$(probes bs_run_disabled_nc)$(probes bs_run_disabled_file)" = 111 ]'
check "bad_settings: dbthrottle run with a DISABLE that does not parse refuses (rc $(cat "$work/bs.run_bad_disable.rc"), probes $(probes bs_run_bad_disable))" \
    '[ "$(cat "$work/bs.run_bad_disable.rc")" -eq 2 ] && [ "$(probes bs_run_bad_disable)" -eq 0 ] && grep -q DBTHROTTLE_DISABLE "$work/bs.run_bad_disable"'
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
# An '@' in the query string once passed for the end of a userinfo (check showed
# redis://127.0.0.1:***@ret1): refused all the same, in the library and in check, nothing shown.
bs_run query_at DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport/0?password=Sec@bsQueryAt1"
DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_REDIS_URL="redis://127.0.0.1:$rport/0?password=Sec@bsQueryAt1" \
    "$top/build/dbthrottle" check >"$work/bs.query_at_check" 2>&1
bs_query_at_rc=$?
check "bad_settings: a query string holding an '@' is refused by the library and check (rc $bs_query_at_rc), nothing of it shown: $(grep -m1 "query string" "$work/bs.query_at_check")" \
    '[ "$(probes bs_query_at)" -eq 0 ] && [ "$bs_query_at_rc" -ne 0 ] && grep -q "query string" "$work/bs.query_at" && grep -q "query string" "$work/bs.query_at_check" && ! grep -q "QueryAt1\|Sec@\|:$rport/0" "$work/bs.query_at" "$work/bs.query_at_check"'
# The operator's shell with a worker's stray bad setting: status still works; a bad Redis URL
# (which status reads) still stops it.
DBTHROTTLE_MAX_QUERIES=abc DBTHROTTLE_LOG_LEVEL=loud "$top/build/dbthrottle" status >"$work/bs.status" 2>&1
bs_status_rc=$?
DBTHROTTLE_REDIS_URL=redis://nope:x "$top/build/dbthrottle" status >"$work/bs.status_bad" 2>&1
bs_status_bad_rc=$?
check "bad_settings: dbthrottle status ignores worker-only settings (rc $bs_status_rc) but not its own (rc $bs_status_bad_rc)" \
    '[ "$bs_status_rc" -eq 0 ] && [ "$bs_status_bad_rc" -ne 0 ] && grep -q DBTHROTTLE_REDIS_URL "$work/bs.status_bad"'
