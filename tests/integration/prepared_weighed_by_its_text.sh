# prepared_weighed_by_its_text.sh - a statement run by name (psycopg 3's prepare=True:
# PQsendPrepare, then PQsendQueryPrepared) is weighed by the text it was prepared with
it_prepared_weighed_by_its_text() {
    rm -f "$work/prepared.ids"
    throttled DBTHROTTLE_MAX_QUERIES=4 DBTHROTTLE_POOL=cls_p DBTHROTTLE_WEIGHTS='2:sql=/\* heavy \*/' \
        $py -c "
import psycopg, subprocess, threading
c = psycopg.connect('', autocommit=True)
c.execute('select 1 /* heavy */', prepare=True)  # prepared: the next runs by name
def look():
    import time
    time.sleep(0.4)
    out = subprocess.run(['redis-cli', '-p', '$rport', 'zrange', 'dbthrottle:{cls_p}:q:holders', '0', '-1'], capture_output=True, text=True).stdout
    open('$work/prepared.ids', 'w').write(out.replace(chr(10), ' '))
t = threading.Thread(target=look)
t.start()
c.execute('select pg_sleep(1) /* heavy */', prepare=True)
c.execute('select pg_sleep(1) /* heavy */', prepare=True)
t.join()
" >"$work/prepared.out" 2>&1
    rc=$?
    ids=$(cat "$work/prepared.ids" 2>/dev/null)
    check "psycopg 3 prepare=True ran (rc $rc: $(head -c 200 "$work/prepared.out"))" [ $rc -eq 0 ]
    check "the prepared statement run by name holds 2 units: <cid>.<serial>.-.2.4 and its #2 ($ids)" \
        'echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4 " && echo "$ids" | grep -Eq "[0-9a-f]{16}\.[0-9]+\.-\.2\.4#2"'
}
