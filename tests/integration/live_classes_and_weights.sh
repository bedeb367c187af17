# live_classes_and_weights.sh - class_rules and weights set live per pool (dbthrottle set POOL
# class_rules / weights): a running worker with neither of its own names the live class and
# takes the live weight in the permit id Redis holds (<cid>.<serial>.batch.3.8) once it applied
# them, as its record says; cleared, its next permit is the 3-part id of a process without
# classes (<cid>.<serial>.8), weight 1.
it_live_classes_and_weights() {
    lc_cli() { "$top/build/dbthrottle" "$@" --redis "redis://127.0.0.1:$rport"; }
    # the statement of lc_w that sleeps, cancelled until it no longer runs: psql goes on to the
    # next line (the permit may stay in Redis a while, kept for the host's next command)
    lc_cancel() {
        psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'lc_w' and query like '%pg_sleep%'" >/dev/null
        [ "$(psql -qAtX -c "select count(*) from pg_stat_activity where application_name = 'lc_w' and state = 'active'")" = 0 ]
    }
    rm -f "$work"/lc.*
    check "set class_rules and weights live (--create)" \
        'lc_cli set lc class_rules "batch:application_name=lc_w" --create >/dev/null &&
         lc_cli set lc weights "3:application_name=lc_w" | grep -q "weights = 3:application_name=lc_w, live"'
    lc_v1=$(live_version lc)
    ( echo "select 1;"
      wait_until 60 '[ -e "$work/lc.go1" ]'; echo "select pg_sleep(60);"
      wait_until 60 '[ -e "$work/lc.go2" ]'; echo "select pg_sleep(60);"
      wait_until 60 '[ -e "$work/lc.end" ]' ) |
        throttled DBTHROTTLE_POOL=lc DBTHROTTLE_MAX_QUERIES=8 DBTHROTTLE_LEASE=3s PGAPPNAME=lc_w \
            psql -qAtX >"$work/lc.out" 2>"$work/lc.err" &
    lc_w=$!
    echo $lc_w >>"$work/pids"
    wait_until 20 '[ "$(live_applied lc)" = "$lc_v1" ]'
    check "the worker applied them, version $lc_v1 ($(live_applied lc))" '[ "$(live_applied lc)" = "$lc_v1" ]'
    touch "$work/lc.go1"
    # (the permit of "select 1", taken before, may still be kept on the host's shelf: the ids are
    # waited for by their class, not for any)
    lc_id='([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.batch\.3\.8'
    wait_until 20 'cls_ids lc | grep -Eq "$lc_id"'
    lc_ids=$(cls_ids lc | tr ' ' '\n' | grep -E "^$lc_id" | tr '\n' ' ')
    check "its permit names the live class and weighs the live 3 units (one member a unit): $lc_ids" \
        'echo "$lc_ids" | grep -Eq "^$lc_id $lc_id#2 $lc_id#3 $"'
    wait_until 20 lc_cancel
    lc_cli set lc class_rules --clear >/dev/null
    lc_cli set lc weights --clear >/dev/null
    lc_v2=$(live_version lc)
    wait_until 20 '[ "$(live_applied lc)" = "$lc_v2" ]'
    check "cleared: the worker applied version $lc_v2 ($(live_applied lc))" '[ "$lc_v2" != "$lc_v1" ] && [ "$(live_applied lc)" = "$lc_v2" ]'
    touch "$work/lc.go2"
    lc_plain='(^| )([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.8( |$)'
    wait_until 20 'cls_ids lc | grep -Eq "$lc_plain"'
    lc_ids=$(cls_ids lc)
    check "its next permit is a process' without classes, weight 1: $lc_ids" \
        'echo "$lc_ids" | grep -Eq "$lc_plain"'
    wait_until 20 lc_cancel
    # A live weight above the worker's limit (8) could never be granted whole: the worker
    # refuses it, as it refuses its own, and its record says so (a stranger's find: the scripts
    # clamped it without a word).
    lc_cli set lc weights "99:application_name=lc_w" >/dev/null
    lc_refusing() {
        lc_cli status lc --json | $py -c 'import json, sys
print(*[q["refused"] for q in json.load(sys.stdin)["pools"][0]["live_settings"]["processes"]["refusing"]])'
    }
    wait_until 20 '[ "$(lc_refusing)" = weights ]'
    check "a live weight above the worker's limit is refused by it, as its record says ($(lc_refusing); $(grep -o "event=live_setting_refused.*weight 99[^;]*" "$work/lc.err" | cut -c1-140))" \
        '[ "$(lc_refusing)" = weights ]'
    touch "$work/lc.end"
    wait "$lc_w"
}
