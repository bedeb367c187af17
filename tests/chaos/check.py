"""check.py - the verdict on one chaos run, from outside the library only: the statements the
server ran (serverlog.py), the faults the orchestrator applied and when (history.json), and what
Redis still held at the end (counted by run.sh from Redis' own keys). Prints the run's table and
exits 1 when a rule is broken. The library's own log is counted as information, never judged.

Usage: check.py HISTORY SERVER_LOG HOLDERS_LEFT WAITERS_LEFT (SERVER_LOG: the run's part of it)

The rules (docs/chaos.md), with Q = lease/3 + DBTHROTTLE_REDIS_TIMEOUT + 1 s, the quarantine by
which docs/design.md ("Failover and data loss") bounds re-assertion:
- closed: never more statements at once than the limit, but in a restarted Redis' quarantine
  window (from the kill to Q after it answers again); a SIGSTOPped client's statement that runs on
  at the server counts until its permit could lapse (2/3 lease less the Redis timeout after the
  stop), not after
  (docs/operations.md, "The bound on over-admission": the window no lease closes);
- open: above the limit only while Redis is unreachable (stopped, killed, slow, or cut from a
  host) and for the 1 s outage backoff after the last request that could fail (its return +
  DBTHROTTLE_REDIS_TIMEOUT; design.md, "Redis errors"); what was admitted then may run on to its
  end, and so may a statement whose lease lapsed in the outage (open mode cancels nothing);
- no capacity lost for longer than 1 s, from the first time `limit` permits were in use at once
  (not before 1 s in, not after 5 s in: the programs' start-up): the workers are closed loops,
  more of them than the limit, so `limit` permits are in use but for the instants between one
  holder and the next (in use: a transaction's from its start to its last statement's end, and
  dbthrottle acquire's from its command's start to its psql's last statement);
  fewer than that for over 1 s is a stall, unless a fault excuses it: a fault in progress (all the
  permits), a restarted Redis' Q plus one renewal period (lease/3) after it answers again (all),
  a killed or stopped client's lease plus one renewal period from the signal (the permits it can
  hold: 1 for psql and dbthrottle acquire, all for the others), a host cut from Redis the same from
  the cut (the permits its clients can hold). Nothing running at all is the
  plainest stall and is shown apart;
- nothing held or queued in Redis at the end; every worker ended by itself.
"""
import calendar
import json
import os
import re
import sys
import time
from collections import Counter

import serverlog

STALL = 1.0  # the bound on a stall past its excuse
OUTAGE_BACKOFF = 1.0  # design.md, "Redis errors": an outage admits (open) or refuses for 1 s
RECONNECT = 1.0  # the workload's clients connecting again after PostgreSQL restarted
REDIS_DOWN = ("redis_stop", "redis_kill", "redis_slow", "failover", "partition")
RESTARTS = ("redis_kill", "failover")  # another run_id: a quarantine of Q (design.md)

hist_path, log_path, holders_left, waiters_left = sys.argv[1:5]
h = json.load(open(hist_path))
limit, lease, mode = h["limit"], h["lease"], h["mode"]
Q = lease / 3 + h["redis_timeout"] + 1.0
t0, t_end = h["start"], h["start"] + h["seconds"]
probes = serverlog.read(log_path, h["end"])
faults = h["faults"]


def backoff_end(back):
    """When the outage backoff that Redis' return at BACK may leave ends: a request sent just before
    the return fails up to the Redis timeout after it, and the backoff runs 1 s from that last
    failure (design.md, "Redis errors")."""
    return back + h["redis_timeout"] + OUTAGE_BACKOFF


def over_window(f):
    """Where more than the limit at once may be admitted because of fault f (None: nowhere)."""
    if mode == "closed" and f["kind"] in RESTARTS:
        return (f["start"], f["end"] + Q)
    if mode == "open" and f["kind"] in REDIS_DOWN:
        # Redis is back at the fault's end (a slow one once the requests queued in the proxy have
        # passed, its delay later); an outage admits unthrottled until its backoff ends.
        return (f["start"], backoff_end(f["end"] + f.get("delay", 0.0)))
    return None


def can_hold(kind):
    """How many permits one client of this kind can keep from use when it is killed or stopped:
    psql and dbthrottle acquire two, the others (pgbench, the Python clients) up to the limit.
    Two, not one: a single-command client killed while it waits leaves its place in Redis' queue,
    granted to nobody if it reaches the head before its waiter lease lapses (operations.md,
    "a worker is SIGKILLed while waiting"), and a process of its host may have offered it a
    released permit just before the signal, which waits for it in the host segment (seen in CI:
    seed 12, a psql killed 1 ms after an offer, 1.48 s at one statement of three)."""
    return min(2, limit) if kind in ("psql", "dbthrottle", "acquire") else limit


def excuse(f):
    """(from, until, permits): how many permits fault f may keep from use, and when."""
    if f["kind"] in RESTARTS:
        return (f["start"], f["end"] + Q + lease / 3, limit)
    if f["kind"] in ("redis_stop", "redis_slow"):
        # A client whose call failed keeps away from Redis for 1 s after its last failure, which
        # came up to a Redis timeout after its return (design.md, "Redis errors"): closed mode
        # refuses meanwhile what it would have run (seen: seed 2, psycopg 3 refused 10 tries
        # 0.8 s after a 0.8 s stop, 1.39 s below the limit), as after a partition below.
        return (f["start"], backoff_end(f["end"] + f.get("delay", 0.0)), limit)
    if f["kind"] in ("client_kill", "client_stop"):
        return (f["start"], max(f["end"], f["start"] + lease + lease / 3), can_hold(f["target"]))
    if f["kind"] == "partition":
        # What the cut host's clients held, or were granted before their places lapsed, comes
        # back within a lease and a renewal period of the cut, as a stopped client's would. And
        # the cut host's clients that live on (pgbench, the Python ones) met Redis errors: each
        # keeps away from Redis for 1 s after its last failure, which came up to a Redis timeout
        # after the heal (design.md, "Redis errors"), refusing in closed mode what it would have
        # run (seen in CI: seed 1 below the limit 1.30 s after a 3 s cut healed).
        held = sum(can_hold(w["kind"]) for w in h["workers"] if w["host"] == f["host"])
        return (f["start"], max(backoff_end(f["end"]), f["start"] + lease + lease / 3),
                min(limit, held))
    if f["kind"] == "pg_restart":
        # Every session was dropped: each client connects again (a psql a process, pgbench a run
        # of 8 connections) once the server accepts them, none of it the throttle's. Beside a busy
        # loop that took 1.15 s after a 3.2 s restart (seed 5). A permit a broken connection kept
        # would stay lost for its lease (2 s and more), which this second does not cover.
        return (f["start"], f["end"] + RECONNECT, limit)
    return (f["start"], f["end"], limit)


# ---- the concurrency the server saw over time (ends sort before starts at the same instant: a
# statement logs its end before its client can release the permit the next one takes) ----------
def sweep(ps):
    events = sorted([(p.start, 1) for p in ps] + [(p.end, -1) for p in ps])
    segs = []  # (from, to, statements running)
    n, prev = 0, t0
    for t, d in events:
        if t > prev:
            segs.append((prev, t, n))
        n += d
        prev = max(prev, t)
    segs.append((prev, max(prev, h["end"]), n))
    return segs


def union(spans):
    """Overlapping (from, to) spans merged, so that a stretch across two of them is inside."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


windows = union(w for w in map(over_window, faults) if w)


def inside(a, b):
    return any(wa <= a and b <= wb for wa, wb in windows)


segments = sweep(probes)
# In open mode a statement, or a transaction, admitted unthrottled while Redis was away runs to its
# end after Redis is back (the library cannot take it back; a transaction that began without a
# permit runs to its COMMIT without one): what is judged after a window is what was admitted
# after it, so those statements are left out there (and counted in the window's own figure).
outage_admitted = {p for p in probes if mode == "open" and inside(p.admitted, p.admitted)}
# Likewise, in open mode, a statement admitted with a permit that runs through an outage long
# enough for its lease to lapse unrenewed (2/3 lease less the Redis timeout, as for a stopped
# holder below): open mode runs it on (docs/design.md, "A lease that lapses under a running
# command": only closed mode cancels), so it is unthrottled from then on, as one admitted in the
# outage is.
if mode == "open":
    for f in faults:
        w = over_window(f)
        if not w:
            continue
        lapse = w[0] + 2 * lease / 3 - h["redis_timeout"]
        outage_admitted |= {p for p in probes if p.admitted < w[0] and p.end > lapse
                            and lapse < min(w[1], f["end"])}
ran_on = [p for p in outage_admitted if not inside(p.end, p.end)]


# A client SIGSTOPped while its statement runs cannot renew its permit, which Redis may then grant
# again, while the server runs that statement on (and one it wrote as it resumed, stopped between
# its lease check and the write): the window docs/operations.md documents ("The bound on
# over-admission") and no lease can close; it ends with the statement. Such a statement counts
# toward the limit until its permit could be granted again (its last renewal Redis accepted ran at
# most lease/3 + the Redis timeout before the stop: 2/3 lease less that timeout after the stop),
# not after. A stop shorter than that takes nothing.
RESUME_WRITE = 0.25  # s after the resume in which a statement is the one written as it resumed


def frozen_from(p):
    """When statement p stops counting toward the limit as a stopped client's (None: never)."""
    for f in faults:
        if f["kind"] != "client_stop" or str(p.pid) not in f.get("backends", []):
            continue
        # its last renewal Redis accepted ran at most lease/3 + the Redis timeout before the stop
        # (renewals follow each other lease/3 after the last one's reply)
        lapse = f["start"] + 2 * lease / 3 - h["redis_timeout"]
        if p.start < f["start"] and p.end > lapse:
            return lapse
        if f["end"] >= lapse and f["end"] <= p.start < f["end"] + RESUME_WRITE:
            return p.start
    return None


class Span:
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start, self.end = start, end


frozen = {p: frozen_from(p) for p in probes}
frozen = {p: t for p, t in frozen.items() if t is not None}
judged = sweep([Span(p.start, frozen.get(p, p.end)) for p in probes if p not in outage_admitted])
most_in = max([c for a, b, c in segments if b > a and inside(a, b)], default=0)
most_out = max([c for a, b, c in judged if b > a and not inside(a, b)], default=0)
over_out = [(a, b, c) for a, b, c in judged if c > limit and b > a and not inside(a, b)]
locks_most = max([p.n for p in probes], default=0)

# ---- lost capacity: fewer statements running than the limit less what the faults excuse, from
# the start-up's end until the workers' stop time; stretches of it, and stalls (nothing running) --
# Judged from the first time the server ran `limit` at once (the workers started and connected),
# not before 1 s in and not after 5 s in: on a loaded machine starting the programs alone took
# more than 1 s (seed 1: below the limit from 1.0 s to 2.43 s, before any fault).
# What is judged is the permits in use, not the statements alone: a transaction's permit is in use
# from its start (BEGIN) to its last statement's end, its client's own time between statements
# included (seen beside a busy loop: psycopg2 170 ms from BEGIN to its statement); and a permit
# dbthrottle acquire took, from its command's start (the acquire worker's OUT.starts, appended
# before the command becomes psql) to the command's end (OUT.ends, appended when dbthrottle
# acquire returned, its permit given back), its start-up and connection included (seen in CI's
# load: 1.2 s from the grant to the connection, seed 1, the only client running below the limit
# for 1.17 s; and a psql that had run no statement 2 s after its start when Redis' failover took
# the permit, seed 2: 1.10 s below the limit counted before the end was). Neither can hide a
# permit nobody holds.
def acquire_times(suffix):
    out = []
    for w in h["workers"]:
        if w["kind"] != "acquire":
            continue
        try:
            with open(os.path.join(os.path.dirname(hist_path),
                                   os.path.basename(w["out"]) + suffix)) as f:
                out += [float(x.replace(",", ".")) for x in f.read().split()]
        except (OSError, ValueError):
            pass
    return sorted(out)


def in_use():
    spans = {}  # (backend, transaction start) -> (from, to)
    acquired = []
    for p in probes:
        if p.app == "chaos-acquire":
            acquired.append(p)
            continue
        a, b = spans.get((p.pid, p.admitted), (p.admitted, p.end))
        spans[(p.pid, p.admitted)] = (min(a, p.admitted), max(b, p.end))
    out = [Span(a, b) for a, b in spans.values()]
    # The acquire worker runs one command at a time: a command's statements are those that start
    # after its start and before the next one's; its end, the first end after its start (none: a
    # run cut short, its statements' end).
    starts = acquire_times(".starts") + [float("inf")]
    ends = acquire_times(".ends")
    for i, s in enumerate(starts[:-1]):
        mine = [p for p in acquired if s <= p.start < starts[i + 1]]
        end = min([e for e in ends if s <= e < starts[i + 1]], default=None)
        if mine or end is not None:
            out.append(Span(s, max([p.end for p in mine] + ([end] if end is not None else []))))
    out += [Span(p.start, p.end) for p in acquired if p.start < starts[0]]
    return out


capacity = sweep(in_use())
excuses = [excuse(f) for f in faults]
first_full = min([a for a, b, c in capacity if c >= limit and b > a], default=t0 + 5.0)
judge_from = max(t0 + 1.0, min(first_full, t0 + 5.0))
cuts = sorted({t for a, b, _ in capacity for t in (a, b)} | {t for a, b, _ in excuses for t in (a, b)}
              | {judge_from, t_end})
cuts = [t for t in cuts if judge_from <= t <= t_end]
seg_i = 0
# A stretch of lost capacity lasts until the server runs `limit` at once again; only its unexcused
# time counts (an excuse in its middle, e.g. a backend terminated meanwhile, pauses the count and
# does not end the stretch).
short, stalls = [], []  # (from, to, unexcused seconds) of lost capacity; (from, to) of nothing run
lost_from, lost = None, 0.0


def extend(a, b):
    if stalls and stalls[-1][1] >= a:
        stalls[-1] = (stalls[-1][0], b)
    else:
        stalls.append((a, b))


for a, b in zip(cuts, cuts[1:]):
    mid = (a + b) / 2
    while seg_i < len(capacity) - 1 and capacity[seg_i][1] <= mid:
        seg_i += 1
    running = capacity[seg_i][2]
    if running == 0:
        extend(a, b)
    if running >= limit:
        if lost_from is not None:
            short.append((lost_from, a, lost))
        lost_from, lost = None, 0.0
    elif running < limit - min(limit, sum(p for ea, eb, p in excuses if ea <= mid < eb)):
        lost_from = a if lost_from is None else lost_from
        lost += b - a
if lost_from is not None:
    short.append((lost_from, cuts[-1], lost))
bad_short = [s for s in short if s[2] > STALL]


def merge(stretches):
    """(from, to, count) stretches less than 0.25 s apart as one, with the largest count (for the
    table: a permit too many shows as many short stretches between statements)."""
    out = []
    for a, b, c in stretches:
        if out and out[-1][1] + 0.25 >= a:
            out[-1] = (out[-1][0], b, max(out[-1][2], c))
        else:
            out.append((a, b, c))
    return out


def back_to_limit(f):
    """Seconds from fault f's end until the server ran `limit` statements at once again (None:
    not before the end of the run). Information: other faults may delay it."""
    for a, b, c in capacity:
        if b > f["end"] and c >= limit:
            return max(0.0, a - f["end"])
    return None


# ---- primaries the sentinels named that no injected fault asked for (a sentinel that took a busy
# primary for down): a fault of the environment, which the rules do not excuse; shown, so that a
# failure it causes says so -------------------------------------------------------------------------
def uninjected_switches():
    switches = set()
    d = os.path.join(os.path.dirname(hist_path), "sentinel")
    for name in (os.listdir(d) if os.path.isdir(d) else []):
        if not (name.startswith("sentinel") and name.endswith(".out")):
            continue
        for line in open(os.path.join(d, name), errors="replace"):
            m = re.search(r"(\d+ \w+ \d{4} [\d:]+\.\d+) # \+switch-master \S+ \S+ \d+ \S+ (\d+)", line)
            if m:
                at = calendar.timegm(time.strptime(m.group(1).split(".")[0], "%d %b %Y %H:%M:%S"))
                switches.add((m.group(2), at + int(m.group(1).split(".")[1]) / 1000.0))
    firsts = {}
    for port, at in switches:  # each new primary once, when the first sentinel named it
        firsts[port] = min(at, firsts.get(port, at))
    injected = {f.get("promoted") for f in faults if f["kind"] == "failover"}
    return sorted((at, port) for port, at in firsts.items() if port not in injected)


# ---- what the clients saw, and the library's own account (information) -------------------------
outcomes = Counter()
for w in h["workers"]:
    try:
        # Beside the history (a failed run's directory is judged again where it was copied).
        for line in open(os.path.join(os.path.dirname(hist_path), os.path.basename(w["out"]))):
            parts = line.split()
            outcomes[parts[0]] += int(parts[1]) if len(parts) > 1 else 1
    except OSError:
        pass
lib_events = Counter()
try:
    for line in open(os.path.join(os.path.dirname(hist_path), "library.log"), errors="replace"):
        m = re.search(r"\bevent=(\S+)", line)
        if m:
            lib_events[m.group(1)] += 1
except OSError:
    pass

# ---- the table ---------------------------------------------------------------------------------
rel = lambda t: t - t0  # noqa: E731
print("seed %d  mode %s  %s  limit %d  lease %.1fs  redis_timeout %dms  Q %.2fs  %.0fs" %
      (h["seed"], mode, "behind Sentinel" if h.get("topology") == "sentinel" else "one Redis",
       limit, lease, h["redis_timeout"] * 1000, Q, h["seconds"]))
print("  %-13s %7s %7s  %-26s %-22s %s" % ("fault", "start", "end", "detail",
                                           "excuses (permits)", "at the limit again"))
for f in faults:
    detail = {"failover": lambda: "primary killed, %s promoted" % f.get("promoted"),
              "redis_kill": lambda: "restart %s" % ("from its AOF" if f.get("persist") else "empty"),
              "redis_slow": lambda: "+%dms a request" % (f["delay"] * 1000),
              "client_kill": lambda: "%s %d%s" % (f["target"], f["pid"],
                                                   " holding" if f["holding"] else ""),
              "client_stop": lambda: "%s %d%s" % (f["target"], f["pid"],
                                                   " holding" if f["holding"] else ""),
              "pg_terminate": lambda: "backend %s" % (f.get("backend") or "none active"),
              "partition": lambda: "host %d cut from Redis" % f["host"]}
    ea, eb, permits = excuse(f)
    back = back_to_limit(f)
    print("  %-13s %6.2fs %6.2fs  %-26s to %6.2fs (%d)        %s" % (
        f["kind"], rel(f["start"]), rel(f["end"]), detail.get(f["kind"], lambda: "")(), rel(eb),
        permits, "never" if back is None else "%.2fs after its end" % back))
print("  statements at the server: %d (%d failed, %d ended with their backend, %d open at the end)"
      % (len(probes), sum(p.how == "failed" for p in probes),
         sum(p.how not in ("end", "failed", "open") for p in probes),
         sum(p.how == "open" for p in probes)))
print("  most at once at the server: %d outside the allowed windows, %d inside (limit %d); the "
      "advisory locks' count at a start: %d" % (most_out, most_in, limit, locks_most))
for at, port in uninjected_switches():
    print("  a primary no fault asked for: the sentinels named %s at %.2fs (the environment's fault, "
          "not excused)" % (port, rel(at)))
if ran_on:
    print("  statements admitted in an outage that ran on past it (not judged there): %d" % len(ran_on))
if frozen:
    print("  statements of SIGSTOPped clients that ran on after their permit could lapse (judged "
          "until then): %d" % len(frozen))


def orphans(a, b):
    """The statements running in [a, b) whose client had been killed or stopped before a: the
    backends the orchestrator recorded for it."""
    out = []
    for f in faults:
        if f["kind"] in ("client_kill", "client_stop") and f["start"] < a:
            for p in probes:
                if str(p.pid) in f.get("backends", []) and p.start < f["start"] and p.end > a:
                    out.append("backend %d (since %.2fs) of %s %d %s at %.2fs" % (
                        p.pid, rel(p.start), f["target"], f["pid"],
                        "SIGKILLed" if f["kind"] == "client_kill" else "SIGSTOPped", rel(f["start"])))
    return out


for a, b, c in merge(over_out)[:10]:
    print("    above the limit: up to %d at once from %.3fs to %.3fs%s" % (
        c, rel(a), rel(b), "".join("; " + o for o in orphans(a, b))))
print("  at the limit first %.2fs in; judged from %.2fs; longest with nothing running: %.2fs; "
      "longest below the limit unexcused: %.2fs" % (
          rel(first_full), rel(judge_from), max([b - a for a, b in stalls], default=0),
          max([u for a, b, u in short], default=0)))
for a, b, u in bad_short[:10]:
    print("    below the limit from %.3fs to %.3fs, %.2fs of it unexcused; nothing ran for %.2fs of it"
          % (rel(a), rel(b), u, sum(min(b, sb) - max(a, sa) for sa, sb in stalls if sb > a and sa < b)))
print("  left in Redis at the end: %s holders, %s waiters" % (holders_left, waiters_left))
print("  clients saw: %d ok, %d refused, %d other errors; the library logged: %s" % (
    outcomes["ok"], outcomes["refused"], outcomes["err"],
    ", ".join("%s %d" % kv for kv in sorted(lib_events.items())
              if kv[0] not in ("wait", "grant", "release", "summary")) or "nothing"))
if h["stuck_workers"]:
    print("  workers that did not end by themselves: %s" % " ".join(h["stuck_workers"]))

broken = []
if over_out:
    broken.append("above the limit outside the allowed windows (%d at once)" % most_out)
if bad_short:
    broken.append("capacity lost for %.2fs unexcused" % max(u for a, b, u in bad_short))
if holders_left != "0" or waiters_left != "0":
    broken.append("left in Redis: %s holders, %s waiters" % (holders_left, waiters_left))
if h["stuck_workers"]:
    broken.append("workers stuck")
if mode == "closed" and outcomes["ok"] == 0:
    broken.append("no statement succeeded")
print("  verdict: %s" % ("PASS" if not broken else "FAIL: " + "; ".join(broken)))
sys.exit(1 if broken else 0)
