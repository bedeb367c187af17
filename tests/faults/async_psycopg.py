"""async_psycopg.py MODE REDIS_PORT POOL - an asyncio application on psycopg 3 (Debian's
python3-psycopg: libpq through ctypes) for tests/faults/async_clients.sh.

Phase 1 (both modes): 20 tasks, each with its own AsyncConnection (autocommit: one permit per
statement), each runs 3 x SELECT dbt_probe(50) (the suite's server-side counter: pg_sleep(0.05)
that logs how many ran at once), while a timer task ticks every 10 ms and records the largest gap
between two ticks. MODE "plain" runs it without the preload, to measure what this machine's own
load does to the loop; "throttled" runs it preloaded at the shell's limit.

Phase 2 ("throttled" only, at a limit of 2): two tasks hold both permits with dbt_probe(3000); a
waiter, the victim, and another waiter queue behind them (each seen in the pool's Redis queue
before the next starts). The victim is cancelled with task.cancel() while its query waits for a
permit and closes its connection as `async with` does; Redis must then show the two holders and
the two other waiters, nothing more; the others complete; at the end holders and queue are empty.

A watchdog thread ends the process (exit 3) if the loop does not tick for 5 s: a loop stuck in a
libpq call that waits for a permit cannot report anything itself. Prints one line per phase:
key=value pairs read by the shell.
"""
import asyncio
import os
import subprocess
import sys
import threading
import time

import psycopg

mode, rport, pool = sys.argv[1], sys.argv[2], sys.argv[3]
TASKS, QUERIES, PROBE_MS, TICK_S, STALL_S = 20, 3, 50, 0.01, 5.0
KEYS = {"holders": "dbthrottle:{%s}:q:holders" % pool, "queue": "dbthrottle:{%s}:q:queue" % pool}

last_tick = time.monotonic()
measuring = False
max_gap = 0.0
phase = "connect"


def watchdog():
    while True:
        time.sleep(0.05)
        stalled = time.monotonic() - last_tick
        if stalled > STALL_S:
            print("stalled phase=%s loop_blocked_s=%.1f" % (phase, stalled), flush=True)
            os._exit(3)


async def ticker():
    global last_tick, max_gap
    while True:
        await asyncio.sleep(TICK_S)
        now = time.monotonic()
        if measuring:
            max_gap = max(max_gap, now - last_tick)
        last_tick = now


def zcard(name):
    # Redis' own view of the pool, from outside the library (a short local call, off the loop's
    # measured phase).
    out = subprocess.run(["redis-cli", "-p", rport, "ZCARD", KEYS[name]], capture_output=True, text=True)
    return int(out.stdout.strip() or -1)


async def poll(cond, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


async def connect():
    return await psycopg.AsyncConnection.connect("", autocommit=True)


async def probe(conn, ms):
    cur = await conn.execute("SELECT dbt_probe(%d)" % ms)
    return (await cur.fetchone())[0]


async def phase1():
    global measuring, phase
    conns = await asyncio.gather(*(connect() for _ in range(TASKS)))
    # psycopg's first statement loads and builds what it needs (adapters, the pool in the
    # library): once per connection, one at a time, before the loop is timed
    for c in conns:
        await (await c.execute("SELECT 1")).fetchone()

    async def task(conn):
        for _ in range(QUERIES):
            await probe(conn, PROBE_MS)
        return QUERIES

    phase, measuring = "queries", True
    t0 = time.monotonic()
    try:
        # bounded: a command the library never sends or refuses would leave its task waiting
        results = await asyncio.wait_for(asyncio.gather(*(task(c) for c in conns), return_exceptions=True), 40)
    except asyncio.TimeoutError:
        results = [asyncio.TimeoutError("phase 1 not done in 40 s")]
    elapsed = time.monotonic() - t0
    measuring = False
    for c in conns:
        await c.close()
    done = sum(r for r in results if isinstance(r, int))
    errors = [repr(r) for r in results if not isinstance(r, int)]
    print(
        "phase1 queries=%d of=%d max_gap_ms=%.1f elapsed_s=%.2f errors=%d %s"
        % (done, TASKS * QUERIES, max_gap * 1000, elapsed, len(errors), "|".join(errors[:3])),
        flush=True,
    )


async def phase2():
    global phase
    phase = "cancel"
    hc = [await connect() for _ in range(2)]
    w1c, w2c = await connect(), await connect()
    queued = asyncio.Event()

    async def victim():
        async with await connect() as conn:
            queued.set()
            await conn.execute("SELECT dbt_probe(50)")
            return "completed"

    holders = [asyncio.ensure_future(probe(c, 3000)) for c in hc]
    seen = [await poll(lambda: zcard("holders") == 2, 10)]
    w1 = asyncio.ensure_future(probe(w1c, 50))
    seen.append(await poll(lambda: zcard("queue") == 1, 10))
    v = asyncio.ensure_future(victim())
    await queued.wait()
    seen.append(await poll(lambda: zcard("queue") == 2, 10))
    w2 = asyncio.ensure_future(probe(w2c, 50))
    seen.append(await poll(lambda: zcard("queue") == 3, 10))
    v.cancel()
    t0 = time.monotonic()
    await asyncio.wait({v}, timeout=15)
    if not v.done():
        outcome = "still_running_15s_after_cancel"
    elif v.cancelled():
        outcome = "CancelledError"
    elif v.exception():
        outcome = repr(v.exception()).replace(" ", "_")
    else:
        outcome = v.result()
    cancel_ms = (time.monotonic() - t0) * 1000
    # the two holders still run (3 s): exactly they hold, exactly the two others wait
    exact = await poll(lambda: zcard("holders") == 2 and zcard("queue") == 2, 2)
    after = "%d/%d" % (zcard("holders"), zcard("queue"))
    try:
        results = await asyncio.wait_for(asyncio.gather(*holders, w1, w2, return_exceptions=True), 20)
    except asyncio.TimeoutError:
        results = [asyncio.TimeoutError("the other tasks not done in 20 s")]
    others = sum(1 for r in results if isinstance(r, int))
    for c in hc + [w1c, w2c]:
        await c.close()
    empty = await poll(lambda: zcard("holders") == 0 and zcard("queue") == 0, 10)
    print(
        "phase2 queued_seen=%s cancel=%s cancel_ms=%.0f exact_after_cancel=%s holders_queue_after_cancel=%s "
        "others_done=%d of=4 empty_at_end=%s holders_queue_at_end=%d/%d %s"
        % (
            "".join("1" if s else "0" for s in seen),
            outcome,
            cancel_ms,
            exact,
            after,
            others,
            empty,
            zcard("holders"),
            zcard("queue"),
            "|".join(repr(r) for r in results if not isinstance(r, int))[:300],
        ),
        flush=True,
    )


async def main():
    tick = asyncio.ensure_future(ticker())
    await phase1()
    if mode == "throttled":
        await phase2()
    tick.cancel()


threading.Thread(target=watchdog, daemon=True).start()
asyncio.run(main())
