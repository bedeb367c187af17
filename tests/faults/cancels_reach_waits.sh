# cancels_reach_waits.sh - a cancel ends a wait for a permit however the program reaches libpq, and
# the cancel path is safe in a signal handler. A Python ctypes client (libpq dlopen()ed, PQcancel
# and PQgetCancel found by dlsym, as psycopg 3 does) cancels from another thread; a C client that
# finds libpq the same way cancels from a SIGALRM handler (PQrequestCancel first, then PQcancel
# 20 ms after each cancel while its commands wait), counting allocations made inside the handler
# (nothing may be looked up, logged or allocated there).
echo "# cancels_reach_waits: ctypes cancel from a thread, PQcancel from a signal handler"
cr_env="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=20s"
throttled $cr_env PGAPPNAME=cr_holder psql -X -c "SELECT pg_sleep(30)" >/dev/null 2>&1 &
cr_holder=$!
echo "$cr_holder" >>"$work/pids"
wait_until 10 '[ "$(live_holders)" -eq 1 ]'

cat >"$work/cr.py" <<'PY'
import ctypes, threading, time
pq = ctypes.CDLL('libpq.so.5')          # dlopen, RTLD_LOCAL; each attribute is a dlsym
pq.PQconnectdb.restype = ctypes.c_void_p
pq.PQconnectdb.argtypes = [ctypes.c_char_p]
pq.PQstatus.argtypes = [ctypes.c_void_p]
pq.PQgetCancel.restype = ctypes.c_void_p
pq.PQgetCancel.argtypes = [ctypes.c_void_p]
pq.PQcancel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
pq.PQexec.restype = ctypes.c_void_p
pq.PQexec.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
pq.PQresultErrorField.restype = ctypes.c_char_p
pq.PQresultErrorField.argtypes = [ctypes.c_void_p, ctypes.c_int]
pq.PQclear.argtypes = [ctypes.c_void_p]
conn = pq.PQconnectdb(b'')
assert pq.PQstatus(conn) == 0
cancel = pq.PQgetCancel(conn)
codes, took = [], []
for i in range(3):
    def fire():
        time.sleep(0.3)
        buf = ctypes.create_string_buffer(256)
        pq.PQcancel(cancel, buf, 256)
    t = threading.Thread(target=fire)
    t.start()
    t0 = time.monotonic()
    res = pq.PQexec(conn, b'SELECT 1')    # waits for a permit: the pool is full
    took.append(time.monotonic() - t0)
    code = pq.PQresultErrorField(res, ord('C'))
    codes.append(code.decode() if code else 'none')
    pq.PQclear(res)
    t.join()
print('codes=%s max_s=%.2f' % (','.join(sorted(set(codes))), max(took)), flush=True)
PY
throttled $cr_env PGAPPNAME=cr_ctypes /usr/bin/python3 "$work/cr.py" >"$work/cr.py.out" 2>&1
res=$(cat "$work/cr.py.out")
check "cancels_reach_waits: ctypes (libpq through dlsym): 3 x PQcancel from another thread ended each wait with 57014 well before the 20 s wait timeout ($res)" \
    'echo "$res" | grep -q "^codes=57014 max_s=[01]\."'
wait_until 5 '[ "$(live_waiters)" -eq 0 ]'
check "cancels_reach_waits: ctypes: its places in the queue were withdrawn (waiters $(live_waiters))" '[ "$(live_waiters)" -eq 0 ]'

cc -std=c11 -D_GNU_SOURCE -O2 -o "$work/cancel_in_handler" "$here/cancel_in_handler.c" -ldl 2>"$work/cih.cc"
throttled $cr_env PGAPPNAME=cr_signal "$work/cancel_in_handler" 10 >"$work/cih.out" 2>&1
res=$(cat "$work/cih.out" "$work/cih.cc")
check "cancels_reach_waits: PQrequestCancel and PQcancel from a SIGALRM handler: every wait ended with 57014, nothing allocated in the handler ($res)" \
    'echo "$res" | grep -q "^rounds=10 canceled=10 .* allocs_in_handler=0 "'
wait_until 5 '[ "$(live_waiters)" -eq 0 ]'
kill "$cr_holder" 2>/dev/null
psql -X -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cr_holder'" >/dev/null
wait "$cr_holder" 2>/dev/null
wait_until 10 '[ "$(live_holders)" -eq 0 ] && [ "$(live_waiters)" -eq 0 ]'
check "cancels_reach_waits: nothing held or queued in the end" 'nothing_left'
