# one_server_one_pool.sh - one server is one pool, however the clients spell it: by host name, by
# address, through the Unix socket, by hostaddr=, through a service file; measured at the server
# (the counter's advisory locks) and in Redis (the pools that have keys)
it_one_server_one_pool() {
    printf '[dbt_svc]\nhost=localhost\nport=%s\n' "$PGPORT" >"$work/pg_service.conf"
    # spell N: the connection string of spelling N (each reaches the same server)
    spell() {
        case $1 in
        0) echo "host=127.0.0.1" ;;
        1) echo "host=localhost" ;;
        2) echo "host=$work/pg" ;;
        3) echo "host=db.invalid hostaddr=127.0.0.1" ;;
        4) echo "service=dbt_svc" ;;
        esac
    }
    # Queries: the pool is named once the connection is made (the address libpq connected to).
    mark
    pids=
    for n in 0 1 2 3 4; do
        for k in 1 2; do
            throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_KEY_PREFIX=onepool: DBTHROTTLE_WAIT_TIMEOUT=60s \
                PGSERVICEFILE="$work/pg_service.conf" PGAPPNAME=onepool \
                psql -qAt -d "$(spell $n)" -c "select dbt_probe(150)" -c "select dbt_probe(150)" \
                -c "select dbt_probe(150)" >/dev/null 2>>"$work/onepool.err" &
            pids="$pids $!"
        done
    done
    rcs=0
    for p in $pids; do wait "$p" || rcs=$((rcs + 1)); done
    m=$(max_conc onepool)
    n=$(probes onepool)
    check "5 spellings x 2 clients at MAX_QUERIES=4: all ran (failures: $rcs, probes: $n)" \
        '[ $rcs -eq 0 ] && [ "$n" -eq 30 ]'
    check "never more than 4 at the server across the spellings (saw $m)" '[ "$m" -le 4 ] && [ "$m" -ge 2 ]'
    pools=$(rcli --scan --pattern 'onepool:*' | sed 's/^onepool:{\([^}]*\)}.*/\1/' | sort -u)
    check "one pool in Redis for the 5 spellings ($(echo $pools))" '[ "$(echo "$pools" | wc -l)" -eq 1 ]'
    check "its name says the server is local, on its port ($(echo $pools))" \
        '[ "$pools" = "localhost:$PGPORT/postgres" ]'
    # Connections: the pool is named before the socket opens (the host resolved as libpq will).
    for n in 0 1 2 3 4; do
        throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_KEY_PREFIX=onepoolc: \
            PGSERVICEFILE="$work/pg_service.conf" psql -qAt -d "$(spell $n)" -c "select 1" \
            >/dev/null 2>>"$work/onepool.err"
    done
    # psycopg2 connects with PQconnectStart/PQconnectPoll: the pool of its connection permit was
    # named by PQhost before libpq had chosen a host (its index -1), which crashed it.
    out=$(throttled DBTHROTTLE_MAX_CONNECTIONS=2 DBTHROTTLE_KEY_PREFIX=onepoolc: $py -c "
import psycopg2
c = psycopg2.connect('host=localhost')
cur = c.cursor()
cur.execute('select 41 + 1')
print(cur.fetchone()[0])" 2>&1)
    check "psycopg2 with a connection limit and the default pool: runs ($out)" '[ "$out" = 42 ]'
    pools=$(rcli --scan --pattern 'onepoolc:*' | sed 's/^onepoolc:{\([^}]*\)}.*/\1/' | sort -u)
    check "connection permits: one pool for the 5 spellings ($(echo $pools))" \
        '[ "$pools" = "localhost:$PGPORT/postgres" ]'
}
