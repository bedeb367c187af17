#!/usr/bin/python3
# classes_report.py - the figures of bench/classes_bench.sh from what it recorded outside the
# library: pgbench's per-transaction logs (-l), Redis' own holders and queue (classes_sample.py)
# and PostgreSQL's pg_stat_activity (sampled by the server itself).
#   classes_report.py mix DIR LABEL LIMIT AGING_MS RTT_MS   one run of batch + interactive clients
#   classes_report.py weights DIR LABEL LIMIT               one run of heavy + light statements
#   classes_report.py compare FIFO_DIR CLASSES_DIR RTT_MS   the two mix runs side by side
# Each figure is printed with its target where the issue sets one; DIR/figures keeps the ones
# compare needs.
import glob
import sys

BATCH_MS, INTERACTIVE_MS = 50.0, 5.0


def line(what, value, target=""):
    print("%-62s %s%s" % (what, value, ("  (" + target + ")") if target else ""))


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q / 100.0 * len(v)))] if v else float("nan")


def pgbench_rows(prefix):
    # client_id txn_no latency_us script_no epoch_s epoch_us [schedule_lag_us]
    rows = []
    for name in glob.glob(prefix + ".[0-9]*"):
        for l in open(name):
            f = l.split()
            if len(f) < 6 or f[2] == "skipped":
                continue
            end_ms = int(f[4]) * 1000 + int(f[5]) / 1000.0
            lag = int(f[6]) / 1000.0 if len(f) > 6 else 0.0
            rows.append((end_ms, int(f[2]) / 1000.0 - lag, int(f[3])))  # end, latency from its start
    return rows


def samples(path, ncols):
    out = []
    for l in open(path):
        f = l.split()
        if len(f) == ncols:
            out.append([float(x) for x in f])
    return out


def phases(d):
    p = {}
    for l in open(d + "/phases"):
        k, v = l.split()
        p[k] = float(v)
    return p


def mix(d, label, limit, aging_ms, rtt_ms):
    limit, aging_ms, rtt_ms = int(limit), float(aging_ms), float(rtt_ms)
    ph = phases(d)
    batch, inter = pgbench_rows(d + "/batch"), pgbench_rows(d + "/interactive")
    # idle: batch alone, from 1 s after its first transaction ended to the interactive clients'
    # start; mixed: from 1 s after they started to their last second (queues filled, not draining).
    idle = (min(r[0] for r in batch) + 1000, ph["interactive_start"])
    mixed = (ph["interactive_start"] + 1000, ph["interactive_end"] - 500)
    within = lambda t, w: w[0] <= t <= w[1]
    iw = [r[1] - INTERACTIVE_MS for r in inter if within(r[0], mixed)]
    bw = [r[1] - BATCH_MS for r in batch if within(r[0], mixed)]
    print("-- %s: %d batch clients, %d interactive; limit %d" % (label, 200, 20, limit))
    line("interactive wait p99 (p50, max; %d statements)" % len(iw),
         "%8.1f ms (%.1f, %.1f)" % (pct(iw, 99), pct(iw, 50), max(iw) if iw else 0),
         "target <= %.1f ms = 50 ms + 2 RTT" % (50 + 2 * rtt_ms) if label != "FIFO" else "")
    line("batch wait p99 (p50, max; %d statements)" % len(bw),
         "%8.1f ms (%.1f, %.1f)" % (pct(bw, 99), pct(bw, 50), max(bw) if bw else 0))
    longest = max(iw + bw) if iw + bw else 0
    line("longest wait of any statement", "%8.1f ms" % longest,
         "aging bound %d ms" % aging_ms if aging_ms > 0 else "no aging bound")

    # Redis: <ms> <b held> <b queued> <i held> <i queued> <b oldest> <i oldest> <units> <queued>
    rs = samples(d + "/redis.samples", 9)
    rmix = [s for s in rs if within(s[0], mixed)]
    ridle = [s for s in rs if within(s[0], idle)]
    bmin = [s[1] for s in rmix if s[2] > 0]
    line("batch permits min while batch waits (Redis holders; %d samples)" % len(bmin),
         "%8d" % (min(bmin) if bmin else -1), "target >= 5" if label != "FIFO" else "")
    line("batch permits max, interactive idle (Redis holders)",
         "%8d" % max(s[1] for s in ridle) if ridle else "     n/a", "target %d" % limit)
    line("units held max, whole run (Redis holders)", "%8d" % max(s[7] for s in rs), "<= %d" % limit)
    # What the scripts hand out: a permit is held from its grant in Redis to its release, so what
    # this misses of the limit is the scheduling's loss; what the throughput below misses beyond it
    # is the time a granted permit takes to reach its thread and its statement the server.
    if rmix:
        line("units held, mean over the mixed phase (Redis holders)",
             "%8.2f of %d" % (sum(s[7] for s in rmix) / len(rmix), limit))
    # A process' place in the queue may serve several of its threads in turn (local handover), so
    # the oldest place can be older than any one statement's wait.
    line("oldest place in Redis' queue (batch, interactive)",
         "%8.0f ms, %.0f ms" % (max([s[5] for s in rmix] or [0]), max([s[6] for s in rmix] or [0])))

    # pg_stat_activity: <ms> <batch active> <interactive active>: what runs at the server. A
    # sample may miss a statement whose permit was granted but whose query is still on its way
    # (or count one whose client already gave the permit back), so its minimum is not the
    # permits' (Redis' is); the 1st percentile and the median say what runs most of the time.
    ps = samples(d + "/pg.samples", 3)
    pmix = [s[1] for s in ps if within(s[0], mixed)]
    pidle = [s[1] for s in ps if within(s[0], idle)]
    if pmix:
        line("batch statements running (pg_stat_activity; min, p1, p50)",
             "%8d, %d, %d" % (min(pmix), pct(pmix, 1), pct(pmix, 50)))
    if pidle:
        line("batch statements running, interactive idle (max, p50)", "%8d, %d" % (max(pidle), pct(pidle, 50)))

    ends = sorted(r[0] for r in batch + inter if within(r[0], mixed))
    gap = max((b - a for a, b in zip(ends, ends[1:])), default=0)
    line("longest time without a statement ending (a stall)", "%8.1f ms" % gap)
    secs = (mixed[1] - mixed[0]) / 1000.0
    nb = sum(1 for r in batch if within(r[0], mixed))
    ni = sum(1 for r in inter if within(r[0], mixed))
    work = nb * BATCH_MS / 1000.0 + ni * INTERACTIVE_MS / 1000.0
    tput = work / (limit * secs)
    line("throughput: %.0f batch + %.0f interactive /s" % (nb / secs, ni / secs),
         "%8.3f of the ideal" % tput, "target >= 0.97; ideal: %d permits always busy" % limit)
    isecs = (idle[1] - idle[0]) / 1000.0
    nbi = sum(1 for r in batch if within(r[0], idle))
    if isecs > 0:
        line("throughput, batch alone: %.0f /s" % (nbi / isecs),
             "%8.3f of the ideal" % (nbi * BATCH_MS / 1000.0 / (limit * isecs)), "ideal %d/s" % (limit * 1000 / BATCH_MS))
    with open(d + "/figures", "w") as f:
        f.write("interactive_p99 %f\nthroughput %f\n" % (pct(iw, 99), tput))


def weights(d, label, limit):
    limit = int(limit)
    rows = pgbench_rows(d + "/weights")
    units = [int(l.split("n=")[1]) for l in open(d + "/units.log") if "n=" in l]
    rs = samples(d + "/redis.samples", 9)
    print("-- %s" % label)
    line("units running at once at the server, max (advisory locks)",
         "%8d" % (max(units) if units else -1), "target <= %d" % limit if "without" not in label else "the measure sees past the limit")
    line("units held at once in Redis, max (holders ZSET)", "%8d" % max(s[7] for s in rs))
    heavy = [r for r in rows if r[2] == 0]
    light = [r for r in rows if r[2] == 1]
    line("heavy / light statements done", "%8d / %d" % (len(heavy), len(light)))
    line("heavy wait p99 / max", "%8.1f / %.1f ms" % (pct([r[1] - 100 for r in heavy], 99), max([r[1] - 100 for r in heavy] or [0])))


def compare(fifo, classes, rtt_ms):
    a = dict(l.split() for l in open(fifo + "/figures"))
    b = dict(l.split() for l in open(classes + "/figures"))
    fa, fb = float(a["interactive_p99"]), float(b["interactive_p99"])
    print("-- the same clients, one FIFO class against classes (this run)")
    line("interactive wait p99, FIFO / classes", "%8.1f ms / %.1f ms = %.1fx" % (fa, fb, fa / fb if fb > 0 else 0),
         "targets: FIFO > 500 ms, classes <= %.1f ms" % (50 + 2 * float(rtt_ms)))
    ta, tb = float(a["throughput"]), float(b["throughput"])
    line("throughput of the ideal, FIFO / classes", "%8.3f / %.3f = %.3f" % (ta, tb, tb / ta if ta > 0 else 0),
         "classes serve 5x the interactive statements, whose grants cost the same for 1/10 the work")


{"mix": mix, "weights": weights, "compare": compare}[sys.argv[1]](*sys.argv[2:])
