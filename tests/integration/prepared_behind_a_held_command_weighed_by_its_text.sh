# prepared_behind_a_held_command_weighed_by_its_text.sh - a statement prepared in a pipeline behind
# a held command (PQsendPrepare queued behind it, not sent through the permit path) is weighed by
# its text when it later runs by name
it_prepared_behind_a_held_command_weighed_by_its_text() {
    cls_pids=
    rm -f "$work/hprep.ids"
    weights='4:sql=/\* full \*/;2:sql=/\* heavy \*/'
    cls_bg "select pg_sleep(1.5) /* full */" DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_hp DBTHROTTLE_WEIGHTS="$weights"
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_hp}:q:holders")" -ge 4 ]'
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_hp DBTHROTTLE_WEIGHTS="$weights" \
        DBTHROTTLE_WAIT_TIMEOUT=30s $py -c "
import psycopg, subprocess, threading, time
c = psycopg.connect('', autocommit=True)
with c.pipeline():
    c.execute('select 1')  # held: the pool is full
    c.execute('select pg_sleep(1) /* heavy */', prepare=True)  # its PQsendPrepare queued behind
def look():
    time.sleep(0.4)
    out = subprocess.run(['redis-cli', '-p', '$rport', 'zrange', 'dbthrottle:{cls_hp}:q:holders', '0', '-1'], capture_output=True, text=True).stdout
    open('$work/hprep.ids', 'w').write(out.replace(chr(10), ' '))
t = threading.Thread(target=look)
t.start()
c.execute('select pg_sleep(1) /* heavy */', prepare=True)  # by name now
t.join()
" >"$work/hprep.out" 2>&1
    rc=$?
    wait $cls_pids
    ids=$(cat "$work/hprep.ids" 2>/dev/null)
    check "psycopg 3 pipeline with prepare=True ran (rc $rc: $(head -c 200 "$work/hprep.out"))" [ $rc -eq 0 ]
    check "the statement prepared behind a held command, run by name, holds 2 units ($ids)" \
        'echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4#2"'
}
