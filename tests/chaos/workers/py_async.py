"""py_async.py OUT TASKS - a psycopg 3 asyncio application (libpq through ctypes, preloaded):
TASKS tasks in one event loop, each with its own AsyncConnection, until $CHAOS_STOP_NS (epoch
ns). A quarter of the tries are a transaction of two probes, the rest single autocommit probes.
Appends "ok", "refused" (the library's refusal) or "err" per try to OUT, errors to OUT.err; on an
error the connection is dropped and made again after 50 ms.
"""
import asyncio
import os
import random
import sys
import time

import psycopg

out, tasks = sys.argv[1], int(sys.argv[2])
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


async def work():
    conn = None
    while time.time_ns() < stop_ns:
        try:
            if conn is None:
                conn = await psycopg.AsyncConnection.connect("connect_timeout=2", autocommit=True)
            a = ms()
            if a % 4 == 0:
                async with conn.transaction():
                    await conn.execute("SELECT chaos_probe(%s)", (a,))
                    await conn.execute("SELECT chaos_probe(%s)", (ms(),))
            else:
                await conn.execute("SELECT chaos_probe(%s)", (a,))
            record("ok")
        except psycopg.Error as e:
            record("refused" if "no query permit" in str(e) else "err", e)
            if conn is not None:
                try:
                    await conn.close()
                except psycopg.Error:
                    pass
            conn = None
            await asyncio.sleep(0.05)
    if conn is not None:
        await conn.close()


async def main():
    await asyncio.gather(*(work() for _ in range(tasks)))


asyncio.run(main())
