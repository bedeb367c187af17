"""pglog.py - pgbench's per-transaction logs (pgbench -l) read back: throughput and latency
percentiles of a time window, and throughput per second. A log line is
    client_id transaction_no latency_us script_no epoch_s epoch_us [lag]
where the epoch is the transaction's end; the latency includes the wait for a permit, since the
library takes it inside libpq's calls that pgbench times."""
import glob
import math


def read(prefix):
    """(end time in s, latency in ms) of every transaction in the logs PREFIX.* (one file per
    pgbench thread), sorted by end time; failed or skipped transactions are left out."""
    rows = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) < 6 or not p[2].lstrip("-").isdigit() or int(p[2]) < 0:
                    continue
                rows.append((int(p[4]) + int(p[5]) / 1e6, int(p[2]) / 1000.0))
    rows.sort()
    return rows


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def window(rows, skip_s=0.5):
    """The steady part of one pgbench run: from skip_s after its first transaction ended (the
    connections are made, the first permits handed out) to its last. Returns (start, end, rows)."""
    if len(rows) < 2:
        return 0.0, 0.0, []
    a, b = rows[0][0] + skip_s, rows[-1][0]
    return a, b, [r for r in rows if a <= r[0] <= b]


def stats(rows, a, b):
    """Transactions per second in [a, b] and the latency p50/p99 (ms) of those that ended in it."""
    lat = [lat_ms for t, lat_ms in rows if a <= t <= b]
    tps = len(lat) / (b - a) if b > a else 0.0
    return {"tps": tps, "n": len(lat), "p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99)}


def per_second(rows, t0, t1):
    """Transactions ended in each whole second from t0 to t1: [(seconds since t0, count)]."""
    n = int(t1 - t0)
    counts = [0] * max(n, 0)
    for t, _ in rows:
        i = int(t - t0)
        if 0 <= i < n:
            counts[i] += 1
    return list(enumerate(counts))
