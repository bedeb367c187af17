"""py_threads.py OUT THREADS - psycopg2 (libpq, preloaded) threads, each with its own connection,
until $CHAOS_STOP_NS (epoch ns): a threaded application server's shape. A quarter of the tries
are a transaction of two probes, the rest single autocommit probes. Appends "ok", "refused" (the
library's refusal) or "err" per try to OUT, errors to OUT.err. On an error the connection is
dropped and made again after 50 ms, so a stall at the server is the throttle's, not the worker's.
"""
import os
import random
import sys
import threading
import time

import psycopg2

out, threads = sys.argv[1], int(sys.argv[2])
stop_ns = int(os.environ["CHAOS_STOP_NS"])
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
err_fd = os.open(out + ".err", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def ms():
    # Mostly short, a few hundred ms at most; one in 40 longer than the lease and its renewal
    # period (5 s), so that a holder killed in the middle of one leaves its statement running past
    # its permit's return.
    r = random.randrange(320)
    return 5000 if r >= 312 else 2 + r * r // 300


def record(what, error=None):
    os.write(fd, (what + "\n").encode())
    if error is not None:
        os.write(err_fd, ("%s\n" % str(error).strip()).encode())


def work():
    conn = None
    while time.time_ns() < stop_ns:
        try:
            if conn is None:
                conn = psycopg2.connect("connect_timeout=2")
            a = ms()
            with conn.cursor() as cur:
                if a % 4 == 0:
                    conn.autocommit = False
                    cur.execute("SELECT chaos_probe(%s)", (a,))
                    cur.execute("SELECT chaos_probe(%s)", (ms(),))
                    conn.commit()
                else:
                    conn.autocommit = True
                    cur.execute("SELECT chaos_probe(%s)", (a,))
            record("ok")
        except psycopg2.Error as e:
            record("refused" if "no query permit" in str(e) else "err", e)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.05)
    if conn is not None:
        conn.close()


ts = [threading.Thread(target=work) for _ in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
