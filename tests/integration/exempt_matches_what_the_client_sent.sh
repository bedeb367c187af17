# exempt_matches_what_the_client_sent - DBTHROTTLE_EXEMPT's application_name rules match the name
# the client sent, non-ASCII included: PostgreSQL reports application_name with each non-ASCII
# byte replaced ("rapport-été-1" comes back as "rapport-??t??-1"), and a rule written as the
# operator wrote the name never matched it.
it_exempt_matches_what_the_client_sent() {
    # The pool's one permit held until the checks are done.
    hold_begin ex_utf8_hold DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=ex_utf8
    wait_until 15 '[ "$(live_holders q "dbthrottle:{ex_utf8}")" -eq 1 ]'
    # LC_ALL=C.UTF-8: psql passes the name on as it is in any locale; the rule's bytes are UTF-8.
    out=$(LC_ALL=C.UTF-8 throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=ex_utf8 DBTHROTTLE_WAIT_TIMEOUT=1s \
        DBTHROTTLE_EXEMPT='application_name=rapport-été*' PGAPPNAME='rapport-été-1' \
        psql -qAtX -c "select 'exempt ran', application_name from pg_stat_activity where pid = pg_backend_pid()" 2>&1)
    check "a connection named rapport-été-1 runs past the saturated pool under DBTHROTTLE_EXEMPT=application_name=rapport-été* (the server calls it: ${out#*|})" \
        '[ "${out%%|*}" = "exempt ran" ]'
    out=$(LC_ALL=C.UTF-8 throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=ex_utf8 DBTHROTTLE_WAIT_TIMEOUT=1s \
        DBTHROTTLE_EXEMPT='application_name=rapport-été*' PGAPPNAME='rapport-ete-1' \
        psql -qAtX -c "select 'ran'" 2>&1); rc=$?
    check "one named rapport-ete-1 (no accent) waits and is refused at the 1 s timeout (rc $rc)" \
        '[ $rc -ne 0 ] && [ "$out" != ran ]'
    hold_end ex_utf8_hold
}
