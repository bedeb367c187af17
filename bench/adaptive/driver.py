#!/usr/bin/python3
"""driver.py - the parts of `make bench-adaptive` (bench/adaptive/run.sh starts the servers and
the workloads' SQL, then this): all measured from outside the controller and the library
(pgbench's per-transaction logs, Redis read by this script).

  dry run  `dbthrottle adapt --dry-run` under load: a DUMP of every Redis key before and after
  static   each limit of a small set, on each workload, over the client sweep (phases of 8 .. 64
           clients, one after the other): throughput and p99; the best static limit
  adaptive `dbthrottle adapt POOL --min 1 --max 32 --start min|max --interval 1s` on the same
           sweep, after a warm-up: throughput and p99 against the best static limit's
  step     32 clients of a statement that waits 10 ms off the CPU then works; its CPU part x 4
           mid-run: the limit in force (Redis' LIM key, read every second) until it settles
  lease    two controllers started at once: whose the lease is over time; kill -9 of the one
           that leads; how long until the other does (Redis' clock)

Prints one summary table (target, measured, PASS/MISS) at the end; the plots (limit and
throughput over time) go to --out as PNG files, drawn by gnuplot."""
import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pglog  # noqa: E402
from resp import Redis  # noqa: E402


def knob(name, full, quick):
    v = os.environ.get(name)
    if v:
        return type(full)(v)
    return quick if QUICK else full


QUICK = os.environ.get("BENCH_QUICK") == "1"
LIMITS = [1, 2, 4, 16] if QUICK else [1, 2, 3, 4, 6, 8, 12, 16]
CLIENTS = [8, 32] if QUICK else [8, 16, 32, 64]
PHASE_S = knob("ADAPTIVE_PHASE_S", 4, 3)  # each client count of the sweep
WARM_S = knob("ADAPTIVE_WARM_S", 30, 15)  # the controller's warm-up before the sweep
STEP_PRE_S = knob("ADAPTIVE_STEP_PRE_S", 30, 20)
STEP_POST_S = knob("ADAPTIVE_STEP_POST_S", 45, 40)
STEP_CLIENTS = 32
# After the step, the new workload at static limits (the reference the settled limit is held to).
STEP_REF_LIMITS = [4, 32] if QUICK else [4, 8, 16, 32]
STEP_REF_S = knob("ADAPTIVE_STEP_REF_S", 8, 5)
SETTLE_HOLD_S = 10  # "settled": within the band for this long, up to the run's end
LEASE_S = 5  # the lease the two controllers of the lease part use
DRY_S = 6
MIN, MAX = 1, 32
WINDOW = os.environ.get("ADAPTIVE_WINDOW", "")  # --window for the controller; "" = its default

WORKLOADS = {
    # a sum over generate_series: a few ms of one core, nothing waited on
    "cpu": "SELECT bench_cpu(40000);\n",
    # 4 hot rows of 16, each update holding its row lock for 3 ms: lock waits
    "hot": "\\set id random(1, 4)\nBEGIN;\nUPDATE hot SET v = v + 1 WHERE id = :id;\n"
    "SELECT pg_sleep(0.003);\nCOMMIT;\n",
    # 10 ms off the CPU, then CPU work whose size bench_knob sets (the step multiplies it)
    "mixed": "SELECT bench_mixed();\n",
}
WORKLOAD_TEXT = {
    "cpu": "CPU-bound: SELECT sum(i) FROM generate_series(1, 40000)",
    "hot": "hot rows: UPDATE one of 4 rows, 3 ms in the transaction",
}


class Bench:
    def __init__(self, a):
        self.work, self.port, self.lib, self.cli, self.out = a.work, a.redis_port, a.lib, a.cli, a.out
        self.url = "redis://127.0.0.1:%d" % self.port
        self.r = Redis(self.port)
        self.procs = []
        self.rows = []  # the summary: (part, target, measured, verdict)
        self.missing = self.controller_missing()
        for name, text in WORKLOADS.items():
            with open(os.path.join(self.work, name + ".sql"), "w") as f:
                f.write(text)

    # ---- processes --------------------------------------------------------------------------
    def track(self, p):
        """Every process started here, so that those still running are killed at the end (by
        their Popen: a pid written to a file could be another process's by then)."""
        self.procs.append(p)
        return p

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def pgbench(self, d, prefix, workload, clients, seconds, pool=None, limit=None):
        """pgbench in directory d (its logs d/prefix.*), through the library when pool is given."""
        env = dict(os.environ)
        if pool:
            env.update(LD_PRELOAD=self.lib, DBTHROTTLE_REDIS_URL=self.url, DBTHROTTLE_POOL=pool,
                       DBTHROTTLE_MAX_QUERIES=str(limit), DBTHROTTLE_WAIT_TIMEOUT="300s",
                       DBTHROTTLE_LOG_LEVEL="error")
        out = open(os.path.join(d, prefix + ".out"), "w")
        args = ["pgbench", "-n", "-c", str(clients), "-j", str(clients), "-T", str(seconds),
                "-f", os.path.join(self.work, workload + ".sql"), "-l", "--log-prefix=" + prefix]
        return self.track(subprocess.Popen(args, cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT))

    def controller_missing(self):
        """Why `dbthrottle adapt` cannot run here (None when it can)."""
        try:
            p = subprocess.run([self.cli, "adapt", "--help"], capture_output=True, text=True, timeout=10)
        except OSError as e:
            return "%s: %s" % (self.cli, e)
        text = (p.stdout + p.stderr).strip()
        if "unknown command" in text or (p.returncode != 0 and "--min" not in text):
            return "this build has no `dbthrottle adapt` (%s)" % text.splitlines()[-1][:100]
        return None

    def controller(self, pool, start, log, dry=False, lease_s=None):
        args = [self.cli, "adapt", pool, "--min", str(MIN), "--max", str(MAX), "--start", start,
                "--interval", "1s", "--redis", self.url]
        if WINDOW:
            args += ["--window", WINDOW]
        if lease_s:
            args += ["--lease", "%ds" % lease_s]
        if dry:
            args.append("--dry-run")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        f = open(os.path.join(self.work, log), "w")
        return self.track(subprocess.Popen(args, env=env, stdout=f, stderr=subprocess.STDOUT))

    def stop(self, p, sig=signal.SIGTERM, bound_s=15):
        """Ends a controller the way a service manager would; its exit status (None: killed)."""
        if p.poll() is None:
            p.send_signal(sig)
            try:
                return p.wait(timeout=bound_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                return None
        return p.returncode

    def tail(self, log, n=3):
        try:
            with open(os.path.join(self.work, log)) as f:
                return " | ".join(line.strip() for line in f.readlines()[-n:])
        except OSError:
            return ""

    def psql(self, sql):
        subprocess.run(["psql", "-qAtX", "-c", sql], check=True, stdout=subprocess.DEVNULL)

    # ---- the limit over time, read from Redis -----------------------------------------------
    def lim_key(self, pool):
        return "dbthrottle:{%s}:q:limit" % pool

    def sample_limits(self, pool, worker_limit, stop, into, period=1.0):
        """Every period: the limit in force (LIM, or the workers' own limit when LIM is absent),
        LIM's PTTL and the controller record's owner, by a connection of its own."""
        r = Redis(self.port)
        key = self.lim_key(pool)
        nxt = time.time()
        while not stop.is_set():
            lim, pttl = r("GET", key), r("PTTL", key)
            owner, pid = r("HMGET", key + ":adapt", "owner", "pid")
            into.append({"t": time.time(), "redis_ms": r.now_ms(),
                         "limit": int(lim) if lim is not None else worker_limit,
                         "lim": int(lim) if lim is not None else None, "pttl": pttl,
                         "owner": (owner or b"").decode(), "pid": (pid or b"").decode()})
            nxt += period
            stop.wait(max(0.0, nxt - time.time()))
        r.close()

    def sampler(self, pool, worker_limit, period=1.0):
        stop, into = threading.Event(), []
        th = threading.Thread(target=self.sample_limits, args=(pool, worker_limit, stop, into, period),
                              daemon=True)
        th.start()
        return stop, th, into

    # ---- the client sweep -------------------------------------------------------------------
    def sweep(self, tag, workload, pool=None, limit=None):
        """One phase per client count; per phase its steady window's throughput and p99; over
        the sweep the mean throughput of the phases and the p99 of every transaction measured."""
        d = os.path.join(self.work, tag)
        os.makedirs(d, exist_ok=True)
        phases, lat, failed = [], [], []
        for c in CLIENTS:
            p = self.pgbench(d, "c%d" % c, workload, c, PHASE_S, pool, limit)
            if p.wait() != 0:
                failed.append("c%d: %s" % (c, self.tail(os.path.join(tag, "c%d.out" % c), 2)))
            rows = pglog.read(os.path.join(d, "c%d" % c))
            a, b, w = pglog.window(rows)
            st = pglog.stats(w, a, b)
            st["clients"] = c
            phases.append(st)
            lat.extend(x for _, x in w)
        return {"tps": statistics.mean(p["tps"] for p in phases), "p99": pglog.percentile(lat, 0.99),
                "phases": phases, "failed": failed}

    def phase_line(self, res):
        return "  ".join("c%d %5.0f/s p99 %6.1f" % (p["clients"], p["tps"], p["p99"]) for p in res["phases"])

    # ---- parts --------------------------------------------------------------------------------
    def part_static(self):
        print("\n== static limits: each over the sweep of %s clients, %d s each" %
              (",".join(map(str, CLIENTS)), PHASE_S))
        best = {}
        for wl in ("cpu", "hot"):
            print("-- %s" % WORKLOAD_TEXT[wl])
            results = {}
            if not QUICK:
                res = self.sweep("%s-direct" % wl, wl)
                print("  %-10s mean %6.0f/s  p99 %7.1f ms   %s" % ("no library", res["tps"], res["p99"],
                                                                  self.phase_line(res)))
            for lim in LIMITS:
                res = self.sweep("%s-s%d" % (wl, lim), wl, "%s-s%d" % (wl, lim), lim)
                results[lim] = res
                print("  limit %-4d mean %6.0f/s  p99 %7.1f ms   %s%s" %
                      (lim, res["tps"], res["p99"], self.phase_line(res),
                       "  FAILED " + "; ".join(res["failed"]) if res["failed"] else ""), flush=True)
            # The best: the highest throughput; within 3 % of it (noise on this machine), the lowest p99.
            top = max(r["tps"] for r in results.values())
            lim = min((r["p99"], lim) for lim, r in results.items() if r["tps"] >= 0.97 * top)[1]
            best[wl] = (lim, results[lim])
            print("  best static limit: %d (%.0f/s, p99 %.1f ms)" % (lim, results[lim]["tps"], results[lim]["p99"]))
            self.rows.append(("static", "%s: best static limit" % wl, "limit %d: %.0f/s, p99 %.1f ms" %
                              (lim, results[lim]["tps"], results[lim]["p99"]), ""))
        return best

    def part_adaptive(self, best):
        print("\n== adaptive: dbthrottle adapt POOL --min %d --max %d --start min|max --interval 1s%s,"
              " %d s of warm-up at %d clients, then the same sweep" %
              (MIN, MAX, " --window " + WINDOW if WINDOW else "", WARM_S, CLIENTS[0]))
        for wl in ("cpu", "hot"):
            lim, ref = best[wl]
            for start in ("min", "max"):
                what = "%s, start %s" % (wl, start)
                if self.missing:
                    self.rows.append(("adaptive", "%s: throughput / best static >= 0.9" % what, "not run", "MISS"))
                    self.rows.append(("adaptive", "%s: p99 / best static <= 1.5" % what, "not run", "MISS"))
                    continue
                pool, tag = "%s-a%s" % (wl, start), "%s-a%s" % (wl, start)
                d = os.path.join(self.work, tag)
                os.makedirs(d, exist_ok=True)
                stop, th, samples = self.sampler(pool, MAX)
                t0 = time.time()
                ctl = self.controller(pool, start, tag + ".log")
                self.pgbench(d, "warm", wl, CLIENTS[0], WARM_S, pool, MAX).wait()
                t_sweep = time.time()
                res = self.sweep(tag, wl, pool, MAX)
                alive = ctl.poll() is None
                rc = self.stop(ctl)
                stop.set()
                th.join()
                lims = [s["limit"] for s in samples if s["t"] >= t_sweep]
                conv = settle([(s["t"], s["limit"]) for s in samples if s["t"] < t_sweep], t0)
                print("  %-14s mean %6.0f/s  p99 %7.1f ms   %s" % (what, res["tps"], res["p99"], self.phase_line(res)))
                print("  %-14s limit during the sweep %s (median %s); from the start: %s; controller %s" %
                      ("", span(lims), med(lims), conv_text(conv),
                       "ran throughout" if alive else "had exited (%s): %s" % (rc, self.tail(tag + ".log"))))
                print("  %-14s limit each second: %s" % ("", " ".join(str(s["limit"]) for s in samples)), flush=True)
                self.plot(tag, samples, [(os.path.join(d, "warm"), None)] +
                          [(os.path.join(d, "c%d" % c), c) for c in CLIENTS], t0, None,
                          "%s, start %s: limit and throughput (clients %s after %d s)" %
                          (WORKLOAD_TEXT[wl], start, ",".join(map(str, CLIENTS)), WARM_S))
                tr, pr = res["tps"] / ref["tps"], res["p99"] / ref["p99"]
                note = "" if alive else " (controller exited)"
                self.rows.append(("adaptive", "%s: throughput / best static (limit %d) >= 0.9" % (what, lim),
                                  "%.3f (%.0f/%.0f)%s" % (tr, res["tps"], ref["tps"], note),
                                  "PASS" if tr >= 0.9 and alive else "MISS"))
                self.rows.append(("adaptive", "%s: p99 / best static <= 1.5" % what,
                                  "%.3f (%.1f/%.1f ms)%s" % (pr, res["p99"], ref["p99"], note),
                                  "PASS" if pr <= 1.5 and alive else "MISS"))

    def part_step(self):
        print("\n== step: %d clients of bench_mixed() (10 ms pg_sleep, then CPU work); the CPU work x 4"
              " after %d s; %d s after the step; controller --start max" % (STEP_CLIENTS, STEP_PRE_S, STEP_POST_S))
        target = ("settles within 30 s of the step (band max(1, 20%%) for %d s), then >= 0.9 x the"
                  " throughput and <= 1.5 x the p99 of the new workload's best static limit" % SETTLE_HOLD_S)
        if self.missing:
            self.rows.append(("step", target, "not run", "MISS"))
            return
        self.psql("UPDATE bench_knob SET sleep_ms = 10, cpu_n = 5000")
        pool = tag = "step"
        d = os.path.join(self.work, tag)
        os.makedirs(d, exist_ok=True)
        stop, th, samples = self.sampler(pool, MAX)
        t0 = time.time()
        ctl = self.controller(pool, "max", tag + ".log")
        p = self.pgbench(d, "step", "mixed", STEP_CLIENTS, STEP_PRE_S + STEP_POST_S, pool, MAX)
        time.sleep(max(0.0, t0 + STEP_PRE_S - time.time()))
        self.psql("UPDATE bench_knob SET cpu_n = cpu_n * 4")
        t_step = time.time()
        p.wait()
        alive = ctl.poll() is None
        self.stop(ctl)
        stop.set()
        th.join()
        lim = [(s["t"], s["limit"]) for s in samples]
        before = [v for t, v in lim if t_step - SETTLE_HOLD_S <= t < t_step]
        took, level, band = settle(lim, t_step)
        print("  limit each second (t = 0 at the controller's start; | = the step):")
        line = []
        for t, v in lim:
            if line and t >= t_step and line[-1] != "|" and "|" not in line:
                line.append("|")
            line.append(str(v))
        print("   ", " ".join(line))
        print("  limit before the step (median of its last %d s): %s; after: settles at %s (band +-%s) %s" %
              (SETTLE_HOLD_S, med(before), level, band,
               "%.0f s after the step" % took if took is not None else "- not settled by the end"))
        rows = pglog.read(os.path.join(d, "step"))
        pre = pglog.stats(rows, t0 + 5, t_step)
        post = pglog.stats(rows, t_step + (took or 0), t0 + STEP_PRE_S + STEP_POST_S)
        print("  throughput before %.0f/s (p99 %.1f ms), after settling %.0f/s (p99 %.1f ms)" %
              (pre["tps"], pre["p99"], post["tps"], post["p99"]))
        png = self.plot(tag, samples, [(os.path.join(d, "step"), None)], t0, t_step,
                        "step: CPU part of each statement x 4 at %.0f s; %d clients" % (t_step - t0, STEP_CLIENTS))
        # Is the limit it settled at right for the new workload? The step multiplies the CPU part
        # of every statement, so the right limit may fall, or not (on 2 cores shared with the
        # clients, every limit above the cores' may do as well): the new workload at static
        # limits, the same clients, measured now (bench_knob keeps the new cost), says.
        ref = {}
        for lim_s in STEP_REF_LIMITS:
            self.pgbench(d, "ref%d" % lim_s, "mixed", STEP_CLIENTS, STEP_REF_S, "%s-s%d" % (pool, lim_s),
                         lim_s).wait()
            rows_s = pglog.read(os.path.join(d, "ref%d" % lim_s))
            a, b, w = pglog.window(rows_s)
            ref[lim_s] = pglog.stats(w, a, b)
        top = max(r["tps"] for r in ref.values())
        ref_lim = min((r["p99"], lim_s) for lim_s, r in ref.items() if r["tps"] >= 0.97 * top)[1]
        best = ref[ref_lim]
        print("  the new workload at static limits (%d clients, %d s each): %s; best: limit %d" %
              (STEP_CLIENTS, STEP_REF_S, "  ".join("limit %d %.0f/s p99 %.1f ms" % (lim_s, r["tps"], r["p99"])
                                                   for lim_s, r in sorted(ref.items())), ref_lim))
        tr = post["tps"] / best["tps"] if best["tps"] else 0.0
        pr = post["p99"] / best["p99"] if best["p99"] else 99.0
        moved = before and level is not None and abs(level - med(before)) > band
        print("  after settling / the best static: throughput %.3f, p99 %.3f; the limit %s with the step" %
              (tr, pr, "moved" if moved else "did not move"))
        good = tr >= 0.9 and pr <= 1.5
        self.rows.append(("step", target, "%s (limit %s -> %s%s); %.3f / %.3f of limit %d's%s" %
                          ("%.0f s" % took if took is not None else "not settled", med(before), level,
                           "" if moved else ", did not move", tr, pr, ref_lim,
                           "" if alive else " (controller exited)"),
                          "PASS" if took is not None and took <= 30 and good and alive else "MISS"))
        if png:
            print("  plot:", png)

    def part_lease(self):
        print("\n== lease: two controllers started at once (--lease %ds), 8 clients of the CPU workload" % LEASE_S)
        t1 = "two controllers at once: controllers that lead = 1"
        t2 = "the other leads within one lease (%d s) of kill -9" % LEASE_S
        if self.missing:
            self.rows.append(("lease", t1, "not run", "MISS"))
            self.rows.append(("lease", t2, "not run", "MISS"))
            return
        pool = "lease"
        d = os.path.join(self.work, pool)
        os.makedirs(d, exist_ok=True)
        load = self.pgbench(d, "load", "cpu", 8, 6 + 3 * LEASE_S + 6, pool, MAX)
        a = self.controller(pool, "min", "lease-a.log", lease_s=LEASE_S)
        b = self.controller(pool, "min", "lease-b.log", lease_s=LEASE_S)
        procs = {str(a.pid): a, str(b.pid): b}
        stop, th, samples = self.sampler(pool, MAX, period=0.1)
        time.sleep(6)
        first = [s for s in samples]
        leaders = sorted({(s["owner"], s["pid"]) for s in first if s["owner"]})
        print("  leaders seen in 6 s (owner token, pid), sampled every 0.1 s: %s" % (leaders or "none"))
        took = None
        if len(leaders) == 1 and leaders[0][1] in procs:
            owner, pid = leaders[0]
            other = [q for q in procs if q != pid][0]
            t_kill = self.r.now_ms()
            procs[pid].kill()
            procs[pid].wait()
            dead_until = self.r("HGET", self.lim_key(pool) + ":adapt", "lease_until")
            since = None
            end = time.time() + 3 * LEASE_S
            while time.time() < end:
                o, opid, osince = self.r("HMGET", self.lim_key(pool) + ":adapt", "owner", "pid", "since")
                if o and o.decode() != owner and opid and opid.decode() == other:
                    since = int(osince)
                    took = (since - t_kill) / 1000.0
                    break
                time.sleep(0.01)
            print("  kill -9 of pid %s (the leader); pid %s leads %s" %
                  (pid, other, "%.2f s later (Redis' clock)" % took if took is not None else
                   "- not within %d s" % (3 * LEASE_S)))
            if since is not None and dead_until:
                print("  the dead leader's lease ran out %.2f s after the kill (renewed %.2f s before it);"
                      " the standby led %d ms after that" %
                      ((int(dead_until) - t_kill) / 1000.0, LEASE_S - (int(dead_until) - t_kill) / 1000.0,
                       since - int(dead_until)))
        else:
            print("  (no single leader among our two controllers: no kill)")
            for name in ("lease-a.log", "lease-b.log"):
                print("  %s: %s" % (name, self.tail(name)))
        stop.set()
        th.join()
        for p in procs.values():
            self.stop(p)
        load.wait()
        self.rows.append(("lease", t1, "%d" % len(leaders), "PASS" if len(leaders) == 1 else "MISS"))
        self.rows.append(("lease", t2, "%.2f s" % took if took is not None else "no takeover",
                          "PASS" if took is not None and took <= LEASE_S else "MISS"))

    def part_dry_run(self):
        print("\n== dry run: dbthrottle adapt --dry-run --start max for %d s, 16 unthrottled clients loading"
              " PostgreSQL; a DUMP of every Redis key before and after" % DRY_S)
        target = "--dry-run: Redis keys added, removed or changed = 0"
        if self.missing:
            self.rows.append(("dry run", target, "not run", "MISS"))
            return
        pool = "dry"
        d = os.path.join(self.work, pool)
        os.makedirs(d, exist_ok=True)
        # The pool's keys exist (as in production) and its permits are all back.
        self.pgbench(d, "prime", "cpu", 4, 2, pool, 2).wait()
        holders = "dbthrottle:{%s}:q:holders" % pool
        end = time.time() + 15
        while self.r("ZCARD", holders) and time.time() < end:
            time.sleep(0.1)
        before = self.r.snapshot()
        load = self.pgbench(d, "load", "cpu", 16, DRY_S + 3)
        ctl = self.controller(pool, "max", "dry.log", dry=True)
        time.sleep(DRY_S)
        ran = ctl.poll() is None
        rc = self.stop(ctl)
        after = self.r.snapshot()
        load.wait()
        changed = sorted(k.decode() for k in set(before) | set(after) if before.get(k) != after.get(k))
        with open(os.path.join(self.work, "dry.log")) as f:
            lines = f.read().splitlines()
        acted = [line for line in lines if "event=adapt" in line]
        print("  keys before %d, after %d, added/removed/changed %d%s" %
              (len(before), len(after), len(changed), (": " + ", ".join(changed[:8])) if changed else ""))
        print("  the controller: %s, exit status %s after SIGTERM, %d log lines with event=adapt*; last: %s" %
              ("ran throughout" if ran else "had exited early", rc, len(acted), self.tail("dry.log", 1)))
        ok = not changed and ran and rc == 0 and acted
        self.rows.append(("dry run", target, "%d (of %d keys)%s" % (len(changed), len(before),
                          "" if ran and rc == 0 and acted else "; the controller did not run (see above)"),
                          "PASS" if ok else "MISS"))

    # ---- output -------------------------------------------------------------------------------
    def plot(self, tag, samples, logs, t0, t_step, title):
        """PNG of the limit in force (from Redis, every second) and the throughput (pgbench's logs,
        per second) over time; None when gnuplot is missing."""
        lim_file = os.path.join(self.work, tag + ".limit.dat")
        tps_file = os.path.join(self.work, tag + ".tps.dat")
        with open(lim_file, "w") as f:
            for s in samples:
                f.write("%.2f %d\n" % (s["t"] - t0, s["limit"]))
        rows = []
        for prefix, _ in logs:
            rows.extend(pglog.read(prefix))
        end = max([r[0] for r in rows] + [s["t"] for s in samples] + [t0])
        with open(tps_file, "w") as f:
            for sec, n in pglog.per_second(rows, t0, end):
                f.write("%d %d\n" % (sec, n))
        png = os.path.join(self.out, "adaptive-%s.png" % tag)
        gp = ["set terminal pngcairo size 1000,500", "set output '%s'" % png, "set title '%s'" % title,
              "set xlabel 'seconds'", "set ylabel 'limit (Redis LIM, read every second)'",
              "set y2label 'transactions per second'", "set ytics nomirror", "set y2tics",
              "set yrange [0:%d]" % (MAX + 2), "set y2range [0:*]", "set key top right", "set grid"]
        if t_step is not None:
            gp.append("set arrow from %.1f, graph 0 to %.1f, graph 1 nohead dashtype 2" % (t_step - t0, t_step - t0))
        gp.append("plot '%s' using 1:2 axes x1y2 with lines lc rgb '#999999' title 'throughput', "
                  "'%s' using 1:2 with steps lw 2 lc rgb '#cc0000' title 'limit'" % (tps_file, lim_file))
        try:
            subprocess.run(["gnuplot"], input="\n".join(gp) + "\n", text=True, check=True,
                           stderr=subprocess.PIPE)
            return png
        except (OSError, subprocess.CalledProcessError) as e:
            print("  (no plot: %s)" % e)
            return None

    def summary(self):
        print("\n== summary (bench/adaptive, %s run)" % ("BENCH_QUICK" if QUICK else "full"))
        if self.missing:
            print("NOTE: %s: the controller's parts were not run and count as MISS." % self.missing)
        w1 = max(len(r[1]) for r in self.rows)
        w2 = max(len(r[2]) for r in self.rows)
        print("%-8s  %-*s  %-*s  %s" % ("part", w1, "target", w2, "measured", "verdict"))
        for part, target, measured, verdict in self.rows:
            print("%-8s  %-*s  %-*s  %s" % (part, w1, target, w2, measured, verdict))


def settle(lim, t_ref):
    """When the limit settled after t_ref: the first time from which every sample up to the end
    lies within +-band of the final level (the median of the last SETTLE_HOLD_S s; band =
    max(1, ceil(20 % of it))), provided that holds for at least SETTLE_HOLD_S s. Returns
    (seconds after t_ref or None, final level, band)."""
    post = [(t, v) for t, v in lim if t >= t_ref]
    if not post:
        return None, None, None
    level = med([v for t, v in post if t >= post[-1][0] - SETTLE_HOLD_S])
    band = max(1, math.ceil(0.2 * level))
    i = len(post)
    while i > 0 and abs(post[i - 1][1] - level) <= band:
        i -= 1
    if i == len(post) or post[-1][0] - post[i][0] < SETTLE_HOLD_S:
        return None, level, band
    return max(0.0, post[i][0] - t_ref), level, band


def conv_text(c):
    took, level, band = c
    if level is None:
        return "no samples"
    return "settled at %s (+-%s) after %.0f s" % (level, band, took) if took is not None else \
        "not settled within the warm-up (last %s)" % level


def med(v):
    return int(statistics.median(v)) if v else None


def span(v):
    return "%d..%d" % (min(v), max(v)) if v else "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    b = Bench(ap.parse_args())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        run(b)
    finally:
        b.kill_all()


def run(b):
    t0 = time.time()
    print("dbthrottle adaptive limit benchmark (%s; %d cores; loopback Redis and PostgreSQL)" %
          ("BENCH_QUICK" if QUICK else "full run", os.cpu_count()))
    if b.missing:
        print("NOTE: %s: only the static limits are measured; the controller's parts are MISS." % b.missing)
    b.part_dry_run()
    best = b.part_static()
    b.part_adaptive(best)
    b.part_step()
    b.part_lease()
    b.summary()
    print("(%.0f s in all)" % (time.time() - t0))


if __name__ == "__main__":
    main()
