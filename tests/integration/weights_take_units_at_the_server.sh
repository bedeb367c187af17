# weights_take_units_at_the_server.sh - a weight-3 command takes 3 of the limit's 4 units: Redis
# holds id, id#2 and id#3, and two heavy statements never run at once at the server (sampled in
# pg_stat_activity) while a light one runs beside a heavy one
it_weights_take_units_at_the_server() {
    cls_pids=
    weights='3:sql=^\s*select pg_sleep\(0\.8\) /\* heavy \*/'
    rm -f "$work/heavy.stop"
    # One session samples every 20 ms, not a psql per sample: on a loaded machine a psql took
    # long enough to start that the samples missed the light statement's 0.3 s beside a heavy
    # one (make test beside a busy loop).
    echo "0 0" >"$work/heavy.max"
    ( while [ ! -e "$work/heavy.stop" ]; do
          echo "select count(*) filter (where query like '%/* heavy */'), count(*) filter (where query like '%/* light */') from pg_stat_activity where state = 'active' and pid <> pg_backend_pid();"
          sleep 0.02
      done | psql -qAtX -F ' ' |
          awk -v out="$work/heavy.max" '{ if ($1 > max) max = $1; if ($1 >= 1 && $2 >= 1) light = 1
                                          print max + 0, light + 0 >out; close(out) }' ) &
    sampler=$!
    echo $sampler >>"$work/pids"
    t0=$(date +%s%N)
    for i in 1 2 3; do
        cls_bg "select pg_sleep(0.8) /* heavy */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_w DBTHROTTLE_WEIGHTS="$weights"
    done
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_w}:q:holders")" -ge 3 ]'
    ids=$(cls_ids cls_w)
    cls_bg "select pg_sleep(0.3) /* light */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_w DBTHROTTLE_WEIGHTS="$weights"
    wait $cls_pids
    t1=$(date +%s%N)
    touch "$work/heavy.stop"
    wait $sampler
    read max light <"$work/heavy.max"
    check "a heavy one holds 3 units in Redis: <cid>.<serial>.-.3.4, its #2 and #3 ($ids)" \
        'id=$(echo "$ids" | grep -Eo "([0-9a-f]{16}~)?[0-9a-f]{16}\.[0-9]+\.-\.3\.4( |$)" | head -1 | tr -d " ") && [ -n "$id" ] && echo " $ids " | grep -q " $id#2 " && echo " $ids " | grep -q " $id#3 "'
    check "at most one of 3 heavy statements ran at once at the server (saw $max)" '[ "$max" -eq 1 ]'
    check "a light one ran beside a heavy one (1 + 3 units = the limit 4)" '[ "$light" -eq 1 ]'
    check "the 3 heavy ones ran one after another: $(( (t1 - t0) / 1000000 )) ms >= 2400" \
        '[ $(( (t1 - t0) / 1000000 )) -ge 2400 ]'
}
