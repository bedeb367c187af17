# psycopg3_cancel_ends_wait.sh - psycopg 3 calls libpq through ctypes: its cancel() must reach our
# PQcancel and end the wait
it_psycopg3_cancel_ends_wait() {
    hold_begin cancel_holder DBTHROTTLE_MAX_QUERIES=1
    wait_holders q 1
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=20s $py -c "
import threading, time, psycopg
assert psycopg.pq.__impl__ == 'python'  # libpq through ctypes: dlopen + dlsym
c = psycopg.connect('', autocommit=True)
t = threading.Timer(0.3, c.cancel)
t.start()
t0 = time.monotonic()
try:
    c.execute('select 1')
    res = 'ran'
except psycopg.Error as e:
    res = 'cancelled' if 'canceling statement due to user request' in str(e) else repr(e)
print('%s %.1f' % (res, time.monotonic() - t0))" 2>&1)
    check "psycopg 3 through ctypes: cancel() ends a wait for a permit at once, with the cancel's error ($out)" \
        'echo "$out" | grep -q "^cancelled [01]\."'
    hold_end cancel_holder
}
