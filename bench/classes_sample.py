#!/usr/bin/python3
# classes_sample.py rtt PORT - the median Redis round trip (PING), in ms.
# classes_sample.py PORT POOL PIDFILE OUT STOPFILE - samples Redis' own state of one query
# semaphore every 10 ms until STOPFILE exists (for bench/classes_bench.sh): per sample one line
#   <redis ms> <batch held> <batch queued> <interactive held> <interactive queued>
#   <batch oldest wait ms> <interactive oldest wait ms> <units held> <queued>
# Holders and waiters are told apart by the process that owns them (the pid in the pool's INFO
# record, which the scripts write at every acquire), so it reads the same with or without class
# tags in the ids. PIDFILE holds "batch PID" / "interactive PID" lines, re-read until both are
# known. One Lua call per sample: the figures of a line are one atomic snapshot.
import os
import socket
import sys
import time

SAMPLE = r"""
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local by = {[ARGV[1]] = 1, [ARGV[2]] = 2}
local held, queued, oldest = {0, 0}, {0, 0}, {0, 0}
local function owner(id)
    local who = redis.call('HGET', KEYS[3], id)
    if not who then return nil, 0 end
    local since, pid = string.match(who, '^(%d+) %S+ (%d+)')
    return by[pid], tonumber(since) or now
end
local units = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, m in ipairs(units) do
    local c = owner((string.gsub(m, '#%d+$', '')))
    if c then held[c] = held[c] + 1 end
end
local q = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, id in ipairs(q) do
    local c, since = owner(id)
    if c then
        queued[c] = queued[c] + 1
        if now - since > oldest[c] then oldest[c] = now - since end
    end
end
return {now, held[1], queued[1], held[2], queued[2], oldest[1], oldest[2], #units, #q}
"""


def command(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        return [read_reply(f) for _ in range(int(rest))]
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    return rest


def rtt(port):
    sock = socket.create_connection(("127.0.0.1", int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = sock.makefile("rb")
    v = []
    for _ in range(2000):
        t = time.perf_counter()
        command(sock, "PING")
        read_reply(f)
        v.append(time.perf_counter() - t)
    v.sort()
    print("%.3f" % (v[len(v) // 2] * 1000))


def main():
    if sys.argv[1] == "rtt":
        return rtt(sys.argv[2])
    port, pool, pidfile, out, stopfile = sys.argv[1:6]
    base = "dbthrottle:{%s}:q" % pool
    keys = [base + ":holders", base + ":queue", base + ":info"]
    sock = socket.create_connection(("127.0.0.1", int(port)))
    f = sock.makefile("rb")
    command(sock, "SCRIPT", "LOAD", SAMPLE)
    sha = read_reply(f)
    pids = {}
    with open(out, "w") as o:
        while not os.path.exists(stopfile):
            if len(pids) < 2 and os.path.exists(pidfile):
                with open(pidfile) as p:
                    pids = dict(l.split() for l in p if len(l.split()) == 2)
            command(sock, "EVALSHA", sha, 3, *keys, pids.get("batch", "-"), pids.get("interactive", "-"))
            o.write(" ".join(str(v) for v in read_reply(f)) + "\n")
            time.sleep(0.01)


main()
