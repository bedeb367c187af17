# class_queue_cap_refuses_at_once.sh - a class with a queue cap of 0 never queues: its command is
# refused at once, with 53300 and a message naming the class and its cap, and never reaches the
# server
it_class_queue_cap_refuses_at_once() {
    classes='interactive=50%;batch=50%,queue_cap=0'
    hold_begin cls_cap_holder DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_cap DBTHROTTLE_CLASSES="$classes" DBTHROTTLE_CLASS=batch
    wait_until 20 '[ "$(rcli zcard "dbthrottle:{cls_cap}:q:holders")" -ge 1 ]'
    t0=$(date +%s%N)
    throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_POOL=cls_cap DBTHROTTLE_CLASSES="$classes" \
        DBTHROTTLE_CLASS=batch DBTHROTTLE_WAIT_TIMEOUT=1m DBTHROTTLE_LOG_LEVEL=error $py -c "
import psycopg2, sys
c = psycopg2.connect('')
c.autocommit = True
cur = c.cursor()
try:
    cur.execute(\"select 'capped ran'\")
    print(cur.fetchone()[0])
except psycopg2.OperationalError as e:
    sys.stderr.write('%s %s' % (e.pgcode, e))
    sys.exit(1)" >"$work/cap.out" 2>"$work/cap.err"
    rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    check "refused (rc $rc) in $ms ms, not after DBTHROTTLE_WAIT_TIMEOUT=1m" '[ $rc -ne 0 ] && [ $ms -lt 5000 ]'
    check "the message names the class and its cap, SQLSTATE 53300: $(head -c 300 "$work/cap.err")" \
        'grep -q "^53300 dbthrottle: no query permit" "$work/cap.err" && grep -q "class \"batch\" has its queue cap of 0 waiters" "$work/cap.err"'
    check "nothing reached the server" [ ! -s "$work/cap.out" ]
    hold_end cls_cap_holder
}
