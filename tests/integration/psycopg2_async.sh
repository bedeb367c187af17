# psycopg2_async.sh - psycopg2 asynchronous mode, driven by a select() loop
it_psycopg2_async() {
    rm -f "$work/trace16.log"
    # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
    out=$(throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/trace16.log DBTHROTTLE_LOG_LEVEL=info \
        $py -c "
import select, psycopg2, psycopg2.extensions as ext
def wait(conn):
    while True:
        state = conn.poll()
        if state == ext.POLL_OK:
            return
        if state == ext.POLL_READ:
            select.select([conn.fileno()], [], [])
        elif state == ext.POLL_WRITE:
            select.select([], [conn.fileno()], [])
conn = psycopg2.connect('', async_=True)
wait(conn)
cur = conn.cursor()
for q in ('select 1', 'select 2', 'select pg_sleep(0.1), 3'):
    cur.execute(q)
    wait(conn)
print(cur.fetchone()[1])" 2>&1)
    grants=$(grep -c 'event=grant' "$work/trace16.log")
    releases=$(grep -c 'event=release' "$work/trace16.log")
    check "psycopg2 async: results right ($out), one grant and release per statement ($grants/$releases)" \
        '[ "$out" = 3 ] && [ "$grants" = 3 ] && [ "$releases" = 3 ]'
}
