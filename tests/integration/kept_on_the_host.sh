# kept_on_the_host.sh - DBTHROTTLE_CACHE_PERMITS with host sharing: a permit one psql keeps is
# taken by another psql of the host with no acquire in Redis (docs/design.md, "The shelf")
it_kept_on_the_host() {
    # Two psql sessions of one host (the suite's DBTHROTTLE_SHARE_DIR) at a limit of 1, taking
    # turns: each statement finds the permit the other kept on the host's shelf. Redis counts the
    # grants it makes: only the first reaches it. The counter says the two never ran at once.
    kh_env="DBTHROTTLE_POOL=kh DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_CACHE_IDLE=1m PGAPPNAME=kh"
    mark
    for s in a b; do
        mkfifo "$work/kh.$s.in"
        # shellcheck disable=SC2086
        throttled $kh_env psql -qAtX -f "$work/kh.$s.in" >"$work/kh.$s.out" 2>&1 &
        eval "kh_pid_$s=\$!"
        eval "exec $([ $s = a ] && echo 7 || echo 8)>\"$work/kh.$s.in\""
    done
    kh_ok=0
    for i in 1 2 3 4 5 6 7 8 9 10; do
        for s in a b; do
            fd=$([ $s = a ] && echo 7 || echo 8)
            echo "select dbt_probe(1);" >&"$fd"
            wait_until 10 "[ \$(grep -c . '$work/kh.$s.out') -ge $i ]" && kh_ok=$((kh_ok + 1))
        done
    done
    kh_grants=$(rcli --raw hget "dbthrottle:{kh}:q:stats" grants)
    exec 7>&- 8>&-
    wait "$kh_pid_a" "$kh_pid_b"
    check "kept on the host: 20 statements of two psql sessions taking turns at a limit of 1 ran ($kh_ok), never two at once ($(max_conc kh)), with ${kh_grants:-0} grant(s) made by Redis (only the first should reach it)" \
        '[ "$kh_ok" -eq 20 ] && [ "$(max_conc kh)" -le 1 ] && [ "${kh_grants:-0}" -eq 1 ] && ! grep -qi error "$work"/kh.*.out'
    check "kept on the host: nothing held in Redis once both ended" nothing_left
}
