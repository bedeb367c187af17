# ria_worker.py - one worker process of `make bench-peers` for the "fair semaphore" of Redis in
# Action (section 6.3.2), written here from its published description, *without* the lock that
# the book adds in 6.3.5 (the variant people deploy): a holders ZSET scored by the client's clock,
# an owner ZSET scored by a counter, ZINTERSTORE to drop timed-out owners, and a rank check. A
# caller that ranks beyond the limit withdraws and retries every 10 ms (redis-semaphore's pace).
# Same loop as dbt_worker.c; usage: python3 ria_worker.py PORT COUNTER_PORT LIMIT HOLD_MS START_MS END_MS OUT
import sys
import time
import uuid

import redis

port, ctr_port, limit, hold, start, end, out = sys.argv[1:8]
limit, hold, start, end = int(limit), float(hold), float(start), float(end)
r = redis.Redis(host="127.0.0.1", port=int(port))
ctr = redis.Redis(host="127.0.0.1", port=int(ctr_port))
count_up = ctr.register_script(
    "local n = redis.call('INCR', KEYS[1]) "
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end return n")
SEM, OWNERS, COUNTER, TIMEOUT = "ria:sem", "ria:sem:owner", "ria:sem:counter", 10.0


def try_acquire():
    me = str(uuid.uuid4())
    now = time.time()
    p = r.pipeline(True)
    p.zremrangebyscore(SEM, "-inf", now - TIMEOUT)
    p.zinterstore(OWNERS, {OWNERS: 1, SEM: 0})
    p.incr(COUNTER)
    ticket = p.execute()[-1]
    p.zadd(SEM, {me: now})
    p.zadd(OWNERS, {me: ticket})
    p.zrank(OWNERS, me)
    if p.execute()[-1] < limit:
        return me
    p.zrem(SEM, me)
    p.zrem(OWNERS, me)
    p.execute()
    return None


def release(me):
    p = r.pipeline(True)
    p.zrem(SEM, me)
    p.zrem(OWNERS, me)
    p.execute()


now_ms = lambda: time.time() * 1000
waits, held, cycles = [], 0.0, 0
while True:
    t0 = now_ms()
    if t0 >= end:
        break
    me = try_acquire()
    while me is None:
        time.sleep(0.01)
        me = try_acquire()
    t1 = now_ms()
    count_up(keys=["holders", "most"])
    if hold > 0:
        time.sleep(hold / 1000)
    ctr.decr("holders")
    t2 = now_ms()
    release(me)
    if t0 >= start and t2 <= end:
        waits.append("%.3f" % (t1 - t0))
        held += t2 - t1
        cycles += 1
with open(out, "w") as f:
    f.write("cycles %d\nheld_ms %.3f\n" % (cycles, held) + "\n".join(waits) + "\n")
