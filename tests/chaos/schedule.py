"""schedule.py - the fault schedule of one chaos run, drawn from its seed alone (no I/O), so that
`make chaos SEED=N` replays the same faults at the same offsets.

Four nemeses act on their own timelines, so their faults overlap: Redis (stopped, killed and
restarted with or without its data, made slow; or, behind Sentinel, a failover), the clients (one
SIGKILLed, or SIGSTOPped for a while: a holder, or any client), PostgreSQL (a backend terminated,
the server restarted), the network (one simulated host cut from Redis for a while). No fault
starts before WARM seconds (the workload settles) and every fault has ended TAIL seconds before
the run ends, so that what follows the last fault (a lease running out, a quarantine) is seen before the verdict.
"""
import random

WARM = 2.0


def tail(lease):
    # A dead holder's permit comes back within lease + lease/3 (design.md, "Leases"), and a
    # restarted Redis' quarantine ends within Q + lease/3: both seen, with 1 s to spare.
    return lease + lease / 3 + 2.0


def redis_faults(rng, last):
    """Redis stopped, killed and restarted (from its AOF or empty), made slow; one after another."""
    faults = []
    t = WARM + rng.uniform(0, 1)
    while True:
        kind = rng.choices(["redis_stop", "redis_kill", "redis_slow"], [4, 3, 2])[0]
        if kind == "redis_stop":
            f = {"kind": kind, "duration": rng.uniform(0.1, 5.0)}
        elif kind == "redis_kill":
            f = {"kind": kind, "duration": rng.uniform(0.1, 2.0), "persist": rng.random() < 0.5}
        else:
            f = {"kind": kind, "duration": rng.uniform(0.5, 3.0), "delay": rng.uniform(0.7, 1.5)}
        if t + f["duration"] > last:
            return faults
        f["at"] = t
        faults.append(f)
        t += f["duration"] + rng.uniform(1.0, 4.0)


def sentinel_faults(rng, last):
    """Behind Sentinel: one failover (the primary killed with kill -9, not restarted), early enough
    that the new primary is named (about 3.5 s) and its quarantine over before the tail; half the
    time after a short stop of the primary (under the sentinels' down-after of 2 s: no failover)."""
    faults = []
    t = WARM + rng.uniform(0, 1)
    if rng.random() < 0.5:
        d = rng.uniform(0.1, 0.9)
        faults.append({"kind": "redis_stop", "at": t, "duration": d})
        t += d + rng.uniform(1.0, 3.0)
    faults.append({"kind": "failover", "at": max(WARM, min(t, last - 8.0)), "duration": 0.0})
    return faults


def draw(seed, seconds, lease, mode=None):
    """(mode, topology, faults): each fault a dict with its kind, its offset "at" (seconds into the
    run), its "duration", and what it needs (persist, delay, holder, pick). A slow Redis' delay is
    longer than the runs' DBTHROTTLE_REDIS_TIMEOUT (500 ms)."""
    rng = random.Random(seed)
    # Drawn even when forced, so that forcing a seed's own mode replays the same faults (the
    # draws below must not shift: `make chaos SEED=N CHAOS_MODE=closed` is seed N's run).
    drawn = rng.choice(["closed", "open"])
    mode = mode or drawn
    # One run in three reaches Redis through Sentinel (the workers then reach the servers it names,
    # not the delay proxy).
    sentinel = rng.random() < 1 / 3
    last = seconds - tail(lease)
    faults = []

    faults += sentinel_faults(rng, last) if sentinel else redis_faults(rng, last)

    t = WARM + rng.uniform(0, 2)
    while t < last:
        # holder: the target is a client whose statement runs at the server now (else any client:
        # one waiting, or between statements).
        f = {"at": t, "holder": rng.random() < 0.5, "pick": rng.random()}
        if rng.random() < 0.5:
            f.update(kind="client_kill", duration=0.0)
        else:
            f.update(kind="client_stop", duration=min(rng.uniform(0.5, 4.0), last - t))
        faults.append(f)
        t += rng.uniform(1.5, 5.0)

    t = WARM + rng.uniform(0, 3)
    restarted = False
    while t < last:
        if not restarted and rng.random() < 0.25:
            faults.append({"kind": "pg_restart", "at": t, "duration": 0.0})
            restarted = True
        else:
            faults.append({"kind": "pg_terminate", "at": t, "duration": 0.0, "pick": rng.random()})
        t += rng.uniform(3.0, 8.0)

    # A fourth nemesis, with a generator of its own so that the draws above (and the runs they
    # replay) are the same as before it came: one simulated host cut from Redis (not from
    # PostgreSQL) for a while, through its port of the delay proxy; none behind Sentinel, whose
    # servers the workers reach without the proxy.
    if not sentinel:
        prng = random.Random("%d:partition" % seed)
        t = WARM + prng.uniform(0, 4)
        while True:
            f = {"kind": "partition", "at": t, "duration": prng.uniform(0.5, 5.0),
                 "host": prng.randrange(3)}
            if t + f["duration"] > last:
                break
            faults.append(f)
            t += f["duration"] + prng.uniform(3.0, 8.0)

    faults.sort(key=lambda f: f["at"])
    return mode, "sentinel" if sentinel else "plain", faults


def self_check():
    """Forcing a seed's own mode must not change its faults (a replay with CHAOS_MODE is the same
    run). Returns the seeds that break it."""
    out = []
    for seed in range(1, 41):
        run = draw(seed, 20, 2.0)
        if draw(seed, 20, 2.0, run[0]) != run:
            out.append(seed)
    return out


if __name__ == "__main__":
    bad = self_check()
    if bad:
        raise SystemExit("schedule.py: forcing their own mode changes the faults of seeds %s" % bad)
