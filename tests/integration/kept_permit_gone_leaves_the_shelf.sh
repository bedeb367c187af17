# kept_permit_gone_leaves_the_shelf.sh - a permit kept on the host's shelf that Redis no longer
# counts (evicted, with its push lost; or lost) is taken off the shelf at its keeper's renewal, so
# that no other process of the host takes it there with no Redis call (docs/design.md, "The
# shelf", invariant 5).
it_kept_permit_gone_leaves_the_shelf() {
    # psql A keeps a permit idle on the shelf (limit 1, kept 1 min, lease 6 s: renewed every 2 s,
    # a shelved permit is taken while renewed within 3 s). Its eviction is written by hand, as
    # admin.lua writes it but without its push (a push can be lost: a failover, a listener between
    # connections): only A's next renewal tells A. Meanwhile psql C, of another host, is granted
    # the freed unit by Redis and runs a 3 s statement. Once A has logged the eviction, psql B, of
    # A's host, runs one statement: it must queue behind C in Redis, not run beside it on the
    # evicted permit taken from the shelf.
    kg_env="DBTHROTTLE_POOL=kg DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_CACHE_PERMITS=on DBTHROTTLE_CACHE_IDLE=1m DBTHROTTLE_LEASE=6s DBTHROTTLE_WAIT_TIMEOUT=30s PGAPPNAME=kg"
    mkfifo "$work/kg.a.in"
    # shellcheck disable=SC2086
    throttled $kg_env psql -qAtX -f "$work/kg.a.in" >"$work/kg.a.out" 2>&1 &
    kg_a=$!
    exec 7>"$work/kg.a.in"
    mark
    echo "select dbt_probe(1);" >&7
    wait_until 10 "[ \$(grep -c '^[0-9]' '$work/kg.a.out') -ge 1 ]"
    kg_id=$(rcli --raw zrange "dbthrottle:{kg}:q:holders" 0 0)
    kg_now=$(rcli --raw time | head -1)
    kg_forget=$(((kg_now + 12) * 1000))
    rcli zrem "dbthrottle:{kg}:q:holders" "$kg_id" >/dev/null
    rcli zadd "dbthrottle:{kg}:q:gone" "$kg_forget" "$kg_id" "$kg_forget" "e:$kg_id" >/dev/null
    mkdir -p "$work/kg.otherhost"
    # shellcheck disable=SC2086
    throttled $kg_env DBTHROTTLE_SHARE_DIR="$work/kg.otherhost" psql -qAtX -c "select dbt_probe(3000)" >"$work/kg.c.out" 2>&1 &
    kg_c=$!
    wait_until 10 "grep -q 'event=evicted' '$work/kg.a.out'"
    kg_seen=$?
    # shellcheck disable=SC2086
    throttled $kg_env psql -qAtX -c "select dbt_probe(1)" >"$work/kg.b.out" 2>&1
    kg_b=$?
    wait "$kg_c"
    exec 7>&-
    wait "$kg_a"
    check "a permit evicted on the host's shelf (${kg_id:-none}; its keeper logged it: $([ $kg_seen -eq 0 ] && echo yes || echo no)): another process of the host does not take it there (at most 1 at once at the server: $(max_conc kg); its statement ran, rc $kg_b)" \
        '[ -n "$kg_id" ] && [ $kg_seen -eq 0 ] && [ "$(max_conc kg)" -le 1 ] && [ $kg_b -eq 0 ] && grep -q "^[0-9]" "$work/kg.b.out"'
    check "kept_permit_gone_leaves_the_shelf: nothing held in Redis once all ended" nothing_left
}
