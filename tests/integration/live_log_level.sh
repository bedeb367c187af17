# live_log_level.sh - log_level set live per pool (dbthrottle set POOL log_level info): a running
# worker whose own level is warn writes its trace of that pool's permits (grant, release) once it
# applied the live value, as its record in Redis says; the process' other lines keep its own level
# (its info line of applying live settings is not written); cleared, its trace stops again.
it_live_log_level() {
    ll_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
    rm -f "$work"/ll.*
    check "set log_level info (--create)" 'll_cli set ll log_level info --create >/dev/null'
    ll_v1=$(live_version ll)
    ( echo "select 1;"
      wait_until 60 '[ -e "$work/ll.go1" ]'; echo "select 2;"
      wait_until 60 '[ -e "$work/ll.go2" ]'; echo "select 3;"
      wait_until 60 '[ -e "$work/ll.end" ]' ) |
        throttled DBTHROTTLE_POOL=ll DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=3s \
            DBTHROTTLE_LOG_LEVEL=warn DBTHROTTLE_LOG="$work/ll.log" PGAPPNAME=ll_worker \
            psql -qAtX >"$work/ll.out" 2>"$work/ll.err" &
    ll_w=$!
    echo $ll_w >>"$work/pids"
    wait_until 20 '[ "$(live_applied ll)" = "$ll_v1" ]'
    check "the worker's record says it applied the live settings, version $ll_v1 ($(live_applied ll))" \
        '[ -n "$ll_v1" ] && [ "$(live_applied ll)" = "$ll_v1" ]'
    # the values in force, from the worker's record: the live level, its own others
    ll_cli settings ll >"$work/ll.settings1"
    ll_sjson=$(ll_cli settings ll --json | $py -c 'import json, sys
p = json.load(sys.stdin)["pools"][0]
print(p["pool"], p["live_settings"]["values"], p["settings_in_force"]["log_level"])')
    check "settings --json says the same ($ll_sjson)" \
        '[ "$ll_sjson" = "ll {'"'log_level'"': '"'info'"'} [{'"'value'"': '"'info'"', '"'from'"': '"'live'"', '"'processes'"': 1}]" ]'
    check "settings shows the values in force and where from ($(grep -A5 "in force" "$work/ll.settings1" | tr -s ' ' | tr '\n' ';'))" \
        'grep -q "in force in its 1 process" "$work/ll.settings1" && grep -qE "^    log_level +info: live, 1$" "$work/ll.settings1" &&
         grep -qE "^    wait_timeout +2m: default, 1$" "$work/ll.settings1" && grep -qE "^    exempt +none: default, 1$" "$work/ll.settings1"'
    # A second process of the pool whose own wait_timeout differs: status says so, with where
    # each value came from; --json gives every value in force.
    hold_begin ll_other DBTHROTTLE_POOL=ll DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=3s DBTHROTTLE_WAIT_TIMEOUT=30s
    ll_in_force() {
        ll_cli status ll --json | $py -c 'import json, sys
f = json.load(sys.stdin)["pools"][0]["settings_in_force"]
print(sorted((g["value"], g["from"], g["processes"]) for g in f["wait_timeout"]), f["log_level"])'
    }
    # (the second process applies the live level at its second report, just after its first)
    wait_until 20 '[ "$(ll_in_force)" = "[('"'2m'"', '"'default'"', 1), ('"'30s'"', '"'environment'"', 1)] [{'"'value'"': '"'info'"', '"'from'"': '"'live'"', '"'processes'"': 2}]" ]'
    ll_differ=$(ll_cli status ll | grep "settings that differ")
    ll_json=$(ll_in_force)
    check "status names the setting the processes disagree on ($ll_differ; --json: $ll_json)" \
        'echo "$ll_differ" | grep -q "wait_timeout 2m: default, 1, 30s: environment, 1$" &&
         [ "$ll_json" = "[('"'2m'"', '"'default'"', 1), ('"'30s'"', '"'environment'"', 1)] [{'"'value'"': '"'info'"', '"'from'"': '"'live'"', '"'processes'"': 2}]" ]'
    hold_end_all
    ll_before=$(grep -c "event=grant " "$work/ll.log" 2>/dev/null)
    touch "$work/ll.go1"
    wait_until 20 'grep -qx 2 "$work/ll.out"'
    wait_until 5 'grep -q "event=release .*pool=ll" "$work/ll.log"'
    check "its own level is warn, yet it traced the pool's permit at the live info ($(grep -o "event=grant pool=ll kind=[a-z]*" "$work/ll.log" | head -1); grants before: ${ll_before:-0})" \
        '[ "$(grep -c "event=grant pool=ll kind=query" "$work/ll.log")" -gt "${ll_before:-0}" ] && grep -q "event=release pool=ll" "$work/ll.log"'
    check "the process' other lines keep its own level (no info line of applying them)" \
        '! grep -q "event=live_settings" "$work/ll.log"'
    ll_cli set ll log_level --clear >/dev/null
    ll_v2=$(live_version ll)
    wait_until 20 '[ "$(live_applied ll)" = "$ll_v2" ]'
    check "cleared: the worker's record says it applied version $ll_v2, the one without log_level ($(live_applied ll); $(ll_cli settings ll | head -1))" \
        '[ "$ll_v2" != "$ll_v1" ] && [ "$(live_applied ll)" = "$ll_v2" ]'
    ll_n=$(grep -c "event=grant " "$work/ll.log")
    check "cleared, settings shows the worker's own level and where from ($(ll_cli settings ll | grep "log_level" | tr -s ' '))" \
        'll_cli settings ll | grep -qE "^    log_level +warn: environment, 1$"'
    touch "$work/ll.go2"
    wait_until 20 'grep -qx 3 "$work/ll.out"'
    touch "$work/ll.end"
    wait "$ll_w"
    check "cleared, its trace stopped: grants traced $ll_n before the last statement, $(grep -c "event=grant " "$work/ll.log") after" \
        '[ "$(grep -c "event=grant " "$work/ll.log")" = "$ll_n" ] && grep -qx 3 "$work/ll.out"'
}
