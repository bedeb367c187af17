# clients_lists_every_connection.sh - dbthrottle clients (PgBouncer's SHOW CLIENTS) lists every
# connection the workers' library knows, idle ones too, each with its process, state, application
# and server, as the server and Redis see them: an idle session, one idle in a transaction with its
# permit, one running, one waiting for a permit (Redis queues it); and a connection that closes
# leaves the list within a few seconds, a renewal period being 20 s.
it_clients_lists_every_connection() {
    rm -f "$work"/cl.*
    # cl_s PGAPP SQL...: a throttled psql that runs SQL, then stays connected until cl.end.PGAPP
    cl_s() {
        cl_app=$1
        shift
        ( for q in "$@"; do echo "$q"; done
          wait_until 120 '[ -e "$work/cl.end.'"$cl_app"'" ]' ) |
            throttled DBTHROTTLE_POOL=cl DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LEASE=60s \
                DBTHROTTLE_WAIT_TIMEOUT=120s PGAPPNAME="$cl_app" psql -qAtX >/dev/null 2>&1 &
        echo $! >>"$work/pids"
    }
    # one at a time, each once the server shows it where it should be (its statement ran)
    cl_at() { [ -n "$(psql -qAtX -c "select 1 from pg_stat_activity where application_name = '$1' and state = '$2' and query = '$3'")" ]; }
    cl_s cl_idle "select 1;"
    wait_until 20 'cl_at cl_idle idle "select 1;"'
    cl_s cl_tx "begin;" "select 1;"
    wait_until 20 'cl_at cl_tx "idle in transaction" "select 1;"'
    cl_s cl_run "select pg_sleep(120);"
    wait_until 20 'cl_at cl_run active "select pg_sleep(120);" && [ "$(rcli zcard "dbthrottle:{cl}:q:holders")" = 2 ]'
    cl_s cl_wait "select 2;"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cl}:q:queue")" = 1 ]'
    # What the server and Redis say, per application: the psql's pid (its backend's client) and
    # the state the list must show.
    cl_truth=$(psql -qAtX -F ' ' -c "select application_name,
            case when state = 'idle in transaction' then 'idle_tx' when state = 'active' then 'running' else state end
        from pg_stat_activity where application_name like 'cl\_%' order by 1")
    cl_list() { "$top/build/dbthrottle" clients cl --json --redis "redis://127.0.0.1:$rport" | $py -c 'import json,sys
d = json.load(sys.stdin)
for p in d["pools"][0]["processes"]:
    for c in p["connections"]:
        print(c["application"], c["state"], p["pid"], c["server"])' | sort; }
    # (the waiter's session is idle at the server: its statement waits for a permit in Redis)
    cl_want=$(echo "$cl_truth" | sed 's/^cl_wait idle$/cl_wait waiting/')
    wait_until 20 '[ "$(cl_list | cut -d" " -f1,2)" = "$cl_want" ]'
    cl_got=$(cl_list)
    check "clients lists the four connections with the states the server and Redis show (want: $(echo "$cl_want" | tr '\n' ';') got: $(echo "$cl_got" | tr '\n' ';'))" \
        '[ "$(echo "$cl_got" | cut -d" " -f1,2)" = "$cl_want" ]'
    cl_bad=
    for a in cl_idle cl_tx cl_run cl_wait; do
        # the pid is the psql's whose backend has this application_name
        cl_backend_client=$(psql -qAtX -c "select client_port from pg_stat_activity where application_name = '$a'")
        cl_p=$(echo "$cl_got" | awk -v a="$a" '$1 == a { print $3 }')
        ss -tnp 2>/dev/null | grep -q ":$cl_backend_client .*pid=$cl_p," || cl_bad="$cl_bad $a(pid $cl_p, port $cl_backend_client)"
        echo "$cl_got" | awk -v a="$a" '$1 == a { print $4 }' | grep -q ":$PGPORT/postgres\$" ||
            cl_bad="$cl_bad $a(server $(echo "$cl_got" | awk -v a="$a" '$1 == a { print $4 }'))"
    done
    check "each connection is listed with its own process and its server (wrong:${cl_bad:- none})" '[ -z "$cl_bad" ]'
    "$top/build/dbthrottle" clients cl --redis "redis://127.0.0.1:$rport" >"$work/cl.table" 2>&1
    check "the table lists them too ($(grep -c " cl_" "$work/cl.table") rows)" \
        '[ "$(grep -c "^cl .* cl_" "$work/cl.table")" = 4 ] && grep -q "^POOL .*STATE .*APPLICATION .*SERVER" "$work/cl.table"'
    # A connection that closes leaves the list (a renewal period is 20 s: within about a second).
    touch "$work/cl.end.cl_idle"
    wait_until 15 '! cl_list | grep -q "^cl_idle "'
    check "a closed connection leaves the list within seconds ($waited_ms ms)" '! cl_list | grep -q "^cl_idle "'
    touch "$work/cl.end.cl_tx" "$work/cl.end.cl_wait"
    psql -qAtX -c "select pg_cancel_backend(pid) from pg_stat_activity where application_name = 'cl_run'" >/dev/null
    touch "$work/cl.end.cl_run"
    wait_until 30 '[ -z "$(cl_list)" ]'
    check "no connection is listed once every worker ended" '[ -z "$(cl_list)" ]'
    # A name with a non-ASCII letter keeps the columns after it in line (printf counted bytes).
    cl_s "cl_été" "select 1;"
    wait_until 20 '"$top/build/dbthrottle" clients cl --redis "redis://127.0.0.1:$rport" | grep -q "cl_été"'
    "$top/build/dbthrottle" clients cl --redis "redis://127.0.0.1:$rport" >"$work/cl.table2"
    cl_cols=$($py -c 'import sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
print(" ".join(str(l.index("SERVER") if l.startswith("POOL") else l.index(" " + l.split()[9] + " ") + 1) for l in lines if l.startswith(("POOL", "cl "))))' "$work/cl.table2")
    check "a non-ASCII application name keeps the SERVER column in line (columns: $cl_cols; $(grep -c "cl_" "$work/cl.table2") rows: $(tail -1 "$work/cl.table2"))" \
        '[ "$(echo $cl_cols | wc -w)" = 2 ] && [ "$(echo $cl_cols | tr " " "\n" | sort -u | wc -l)" = 1 ]'
    touch "$work/cl.end.cl_été"
    # a pool nobody ever used is an error, not an empty list
    check "clients of a pool Redis has no key of fails" \
        '! "$top/build/dbthrottle" clients no_such_pool_cl --redis "redis://127.0.0.1:$rport" >/dev/null 2>&1'
}
