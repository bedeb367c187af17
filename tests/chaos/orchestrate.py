"""orchestrate.py - one chaos run: Redis (behind the delay proxy), the workload on three simulated
hosts, and the seed's fault schedule applied to them; writes the run's history (what was done and
when, by this process' clock) for check.py. Judges nothing.

Usage: orchestrate.py SEED SECONDS RUN_DIR REDIS_PORT (environment: CHAOS_LIB, the
library to preload; CHAOS_CLI, the dbthrottle command; CHAOS_PGDIR, the PostgreSQL of run.sh;
CHAOS_TOP, the source tree; CHAOS_MODE, to force closed or open; CHAOS_NEMESIS=off, no faults;
CHAOS_LOG_LEVEL, the workers' DBTHROTTLE_LOG_LEVEL (info);
PG* as libpq reads them).
Redis is left running at the end (its port in RUN_DIR/redis.port, its pid in RUN_DIR/redis.pid,
or the Sentinel topology's servers in RUN_DIR/sentinel) so that run.sh can read what is left in it; every worker has exited, or been killed and said so in the history.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import schedule
import targets

LIMIT, LEASE, REDIS_TIMEOUT = 3, 2.0, 0.5
HOSTS = 3
here = os.path.dirname(os.path.abspath(__file__))
seed, seconds, run_dir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
redis_port = int(sys.argv[4])
lib, cli, pgdir, top = (os.environ[k] for k in ("CHAOS_LIB", "CHAOS_CLI", "CHAOS_PGDIR", "CHAOS_TOP"))
mode, topology, faults = schedule.draw(seed, seconds, LEASE, os.environ.get("CHAOS_MODE") or None)
if os.environ.get("CHAOS_NEMESIS") == "off":
    faults = []  # the control: the same workload without faults must pass
pids_file = os.path.join(os.environ.get("DBT_HARNESS_RUN", run_dir), "pids")
history = {"seed": seed, "mode": mode, "topology": topology, "limit": LIMIT, "lease": LEASE,
           "redis_timeout": REDIS_TIMEOUT, "seconds": seconds, "faults": [], "workers": [],
           "stuck_workers": []}
lock = threading.Lock()


def note_pid(pid):
    with open(pids_file, "a") as f:
        f.write("%d\n" % pid)


# ---- Redis -------------------------------------------------------------------------------------
# Redis and the proxy run ahead of the workload and of the machine's other work (when allowed to:
# root), so that on a loaded machine a reply later than the Redis timeout is a fault of ours, not
# the scheduler's. Real-time round robin where allowed, as tests/support/lib.sh's redis_nice says
# why: at nice -10, under make test's lanes and a busy loop, an open-mode client of seed 5 met a
# 500 ms timeout 1.6 s into the run, before any fault, and ran unthrottled (7 at once).
def _ahead():
    if os.geteuid() != 0:
        return []
    if subprocess.run(["chrt", "-r", "1", "true"], capture_output=True).returncode == 0:
        return ["chrt", "-r", "1"]
    return ["nice", "-n", "-10"]


NICE = _ahead()
redis_dir = os.path.join(run_dir, "redis")
redis = None


def redis_ping():
    r = subprocess.run(["redis-cli", "-p", str(redis_port), "ping"], capture_output=True, text=True)
    return r.stdout.strip() == "PONG"


def redis_start():
    """Starts Redis on its port with an append-only file fsynced at every write (so that a restart
    "with persistence" loses nothing), and waits until it answers."""
    global redis
    os.makedirs(redis_dir, exist_ok=True)
    redis = subprocess.Popen(
        NICE + ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--aof-timestamp-enabled", "yes",
         "--dir", redis_dir,
         "--logfile", os.path.join(redis_dir, "redis.log")], cwd=run_dir)
    note_pid(redis.pid)
    deadline = time.time() + 20
    while not redis_ping():
        if time.time() > deadline or redis.poll() is not None:
            raise SystemExit("chaos: redis-server did not start on port %d" % redis_port)
        time.sleep(0.02)
    with open(os.path.join(run_dir, "redis.pid"), "w") as f:
        f.write("%d\n" % redis.pid)


# ---- Sentinel: a primary, two replicas, three sentinels (sentinel.sh, tests/support/topology.sh)
sentinel_dir = os.path.join(run_dir, "sentinel")
sentinels = ""


def sentinel_start():
    global sentinels
    r = subprocess.run(["sh", os.path.join(here, "sentinel.sh"), "start", sentinel_dir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("chaos: the Sentinel topology did not start: %s" % r.stderr.strip())
    sentinels = r.stdout.split()[1]


def sentinel_master():
    """The primary's port as the first sentinel that answers names it ("" if none does)."""
    for hp in sentinels.split(","):
        r = subprocess.run(["redis-cli", "-p", hp.split(":")[1], "sentinel",
                            "get-master-addr-by-name", "mymaster"], capture_output=True, text=True)
        lines = r.stdout.split()
        if len(lines) == 2:
            return lines[1]
    return ""


def sentinel_pid(port):
    for name in os.listdir(sentinel_dir):
        if name.endswith(".port") and open(os.path.join(sentinel_dir, name)).read().strip() == port:
            return int(open(os.path.join(sentinel_dir, name[:-5] + ".pid")).read())
    return None


def redis_now_pid():
    """The pid of the Redis the workers use now: ours, or the primary Sentinel names."""
    return sentinel_pid(sentinel_master()) if topology == "sentinel" else redis.pid


# ---- the workload ------------------------------------------------------------------------------
groups = []  # (kind, host, Popen): each worker in a process group of its own
stop_ns = 0


def worker_env(host):
    env = dict(os.environ)
    env.update({
        "LD_PRELOAD": lib, "PGAPPNAME": "chaos", "CHAOS_STOP_NS": str(stop_ns),
        "DBTHROTTLE_REDIS_URL": ("redis-sentinel://%s/mymaster" % sentinels if topology == "sentinel"
                                 else "redis://127.0.0.1:%d" % proxy.ports[host]),
        "DBTHROTTLE_POOL": "chaos",
        "DBTHROTTLE_MAX_QUERIES": str(LIMIT), "DBTHROTTLE_LEASE": "%dms" % (LEASE * 1000),
        "DBTHROTTLE_REDIS_TIMEOUT": "%dms" % (REDIS_TIMEOUT * 1000),
        "DBTHROTTLE_ON_REDIS_ERROR": mode, "DBTHROTTLE_WAIT_TIMEOUT": "60s",
        "DBTHROTTLE_SHARE_DIR": os.path.join(run_dir, "host%d" % host),
        # The library's own account (events counted as information, never judged): one file for
        # all, one write() per line.
        "DBTHROTTLE_LOG": os.path.join(run_dir, "library.log"),
        "DBTHROTTLE_LOG_LEVEL": os.environ.get("CHAOS_LOG_LEVEL", "info")})
    return env


def start_workers():
    py = "/usr/bin/python3"
    respawn = ["sh", os.path.join(here, "workers/respawn.sh"), py]
    plan = [("psql", 0, ["sh", os.path.join(here, "workers/psql_loop.sh")]),
            ("psql", 1, ["sh", os.path.join(here, "workers/psql_loop.sh")]),
            ("acquire", 2, ["sh", os.path.join(here, "workers/psql_loop.sh")]),
            ("pgbench", 0, ["sh", os.path.join(here, "workers/pgbench_loop.sh")]),
            ("psycopg2", 1, respawn + [os.path.join(here, "workers/py_threads.py")]),
            ("psycopg3", 2, respawn + [os.path.join(here, "workers/py_async.py")])]
    for h in range(HOSTS):
        os.makedirs(os.path.join(run_dir, "host%d" % h), mode=0o700, exist_ok=True)
    for i, (kind, host, argv) in enumerate(plan):
        out = os.path.join(run_dir, "w%d.%s" % (i, kind))
        env = worker_env(host)
        args = [out]
        if kind == "acquire":
            env["CHAOS_ACQUIRE"] = cli
        if kind == "pgbench":
            d = os.path.join(run_dir, "w%d.d" % i)
            os.makedirs(d, exist_ok=True)
            args.append(d)
        if kind in ("psycopg2", "psycopg3"):
            args.append("4")
        p = subprocess.Popen(argv + args, env=env, start_new_session=True, cwd=run_dir,
                             stdout=subprocess.DEVNULL, stderr=open(out + ".stderr", "w"))
        note_pid(p.pid)
        groups.append((kind, host, p))
        history["workers"].append({"kind": kind, "host": host, "out": out})


def clients():
    """The workload's client processes now (the ones that hold permits): in the workers' process
    groups, psql, pgbench, python3 and dbthrottle, not a psql that dbthrottle acquire runs (under
    its guard, acquire-guard)."""
    pgids = {p.pid for _, _, p in groups}
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        ppid, pgid = int(fields[1]), int(fields[2])
        # A stopped one (state T) is already some fault's target.
        if pgid not in pgids or fields[0] == "T" or comm not in ("psql", "pgbench", "python3",
                                                                 "dbthrottle"):
            continue
        if comm == "psql" and parent_comm(ppid) in ("dbthrottle", "acquire-guard"):
            continue
        found.append((int(d), comm))
    return sorted(found)


def holder(pick):
    """A client whose probe runs at the server now, found from the server's side: its backend's
    connection, by both ends, and the process of the workload that owns it (ss). Drawn with a
    bias to the newest statement (the one with most of its run left: a long one killed early
    outlives the permit's return). For dbthrottle acquire, the holder is the dbthrottle that runs
    the psql. None when none runs."""
    rows = psql("SELECT host(client_addr), client_port, host(inet_server_addr()),"
                " inet_server_port() FROM pg_stat_activity WHERE application_name LIKE 'chaos%'"
                " AND state = 'active' AND query LIKE '%chaos_probe%' ORDER BY query_start DESC")
    rows = [r.split("|") for r in rows.splitlines() if r.count("|") == 3 and not r.startswith("|")]
    if not rows:
        return None
    # Its owner by both ends of the connection, in one of the workload's process groups: the
    # nemesis never signals another lane's process (targets.py).
    pgids = {p.pid for _, _, p in groups}
    row = rows[int(pick * pick * len(rows))]
    owners = [(pid, comm) for pid, comm, _, _ in targets.socket_owners(*row)
              if targets.process_group(pid) in pgids]
    if not owners:
        return None
    pid, comm = owners[0]
    if comm == "psql" and parent_comm(parent(pid)) == "acquire-guard":
        pid, comm = parent(parent(pid)), "dbthrottle"
    elif comm == "psql" and parent_comm(parent(pid)) == "dbthrottle":
        pid, comm = parent(pid), "dbthrottle"
    return pid, comm


def backends_of(pid):
    """The PostgreSQL backends of client PID (or of its children and grandchildren: dbthrottle
    acquire's psql, under its guard), by the client ports of its connections to the server (ss)
    as pg_stat_activity lists them."""
    procs = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    kids = {p for p in procs if parent(p) == pid}
    pids = {str(p) for p in {pid} | kids | {p for p in procs if parent(p) in kids}}
    r = subprocess.run(["ss", "-Htnp", "state", "established",
                        "( dport = :%s )" % os.environ["PGPORT"]], capture_output=True, text=True)
    ports = [line.split()[2].rsplit(":", 1)[1] for line in r.stdout.splitlines()
             if any("pid=%s," % p in line for p in pids)]
    if not ports:
        return []
    return psql("SELECT pid FROM pg_stat_activity WHERE client_port IN (%s)" % ",".join(ports)).split()


def parent(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        return int(st[st.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return 0


def parent_comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


# ---- the faults ----------------------------------------------------------------------------------
class Proxy:
    """The delay proxy (delay_proxy.py), a process of its own: a port for each simulated host."""

    def __init__(self):
        self.p = subprocess.Popen(NICE + ["/usr/bin/python3", os.path.join(here, "delay_proxy.py"),
                                          str(redis_port), str(HOSTS)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        note_pid(self.p.pid)
        words = self.p.stdout.readline().split()
        if len(words) != HOSTS + 1 or words[0] != "ready":
            raise SystemExit("chaos: the delay proxy did not start: %r" % words)
        self.ports = [int(w) for w in words[1:]]

    def command(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def set_delay(self, seconds):
        self.command("delay %f" % seconds)

    def stop(self):
        self.p.stdin.close()
        self.p.wait()


proxy = None


def psql(sql):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["psql", "-qAtX", "-c", sql], env=env, capture_output=True, text=True)
    return r.stdout.strip()


def apply(f):
    """Applies one fault; returns the record of what was done and when (epoch seconds): its start
    taken just before the action, its end just after the recovery completed, so that the windows
    the checker allows hold all of it."""
    rec = {"kind": f["kind"], "planned_at": f["at"]}
    k = f["kind"]
    if k == "redis_stop":
        pid = redis_now_pid()
        rec["start"] = time.time()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(f["duration"])
        os.kill(pid, signal.SIGCONT)
        rec["end"] = time.time()
    elif k == "failover":
        # Its end: the sentinels name another primary.
        old = sentinel_master()
        rec["start"] = time.time()
        os.kill(sentinel_pid(old), signal.SIGKILL)
        while sentinel_master() in ("", old) and time.time() < rec["start"] + 30:
            time.sleep(0.05)
        rec["end"] = time.time()
        rec["promoted"] = sentinel_master()
    elif k == "redis_kill":
        with lock:
            rec["start"] = time.time()
            redis.kill()
            redis.wait()
            rec["persist"] = f["persist"]
            if not f["persist"]:
                # Kept aside, not deleted: its AOF (timestamped) is the history of what Redis
                # did before the kill, for the diagnosis of a failed run.
                os.rename(redis_dir, "%s.lost-%d" % (redis_dir, int(rec["start"] * 1000)))
            time.sleep(f["duration"])
            redis_start()
            rec["end"] = time.time()
    elif k == "redis_slow":
        rec["start"] = time.time()
        proxy.set_delay(f["delay"])
        rec["delay"] = f["delay"]
        time.sleep(f["duration"])
        proxy.set_delay(0.0)
        rec["end"] = time.time()
    elif k == "partition":
        rec.update(start=time.time(), host=f["host"])
        proxy.command("cut %d" % f["host"])
        time.sleep(f["duration"])
        proxy.command("heal %d" % f["host"])
        rec["end"] = time.time()
    elif k in ("client_kill", "client_stop"):
        target = holder(f["pick"]) if f["holder"] else None
        rec["holding"] = target is not None
        if target is None:
            cs = clients()
            if not cs:
                return None
            target = cs[int(f["pick"] * len(cs))]
        pid, comm = target
        # Its backends, so that the checker can tell a statement that runs on after its client
        # was killed or stopped.
        rec.update(pid=pid, target=comm, backends=backends_of(pid))
        rec["start"] = time.time()
        try:
            os.kill(pid, signal.SIGKILL if k == "client_kill" else signal.SIGSTOP)
        except ProcessLookupError:
            return None
        if k == "client_stop":
            time.sleep(f["duration"])
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        rec["end"] = time.time()
    elif k == "pg_terminate":
        # A backend in the middle of a probe, the pick-th of those running; looked for again for
        # up to a second (a stall of the workload may leave none running at that instant).
        rec["start"] = time.time()
        rec["backend"] = ""
        while not rec["backend"] and time.time() < rec["start"] + 1.0:
            rec["backend"] = psql(
                "WITH p AS (SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'chaos%%'"
                " AND state = 'active' AND query LIKE '%%chaos_probe%%')"
                " SELECT pid FROM p ORDER BY pid OFFSET floor(%f * (SELECT count(*) FROM p))::int"
                " LIMIT 1" % f["pick"])
            if not rec["backend"]:
                time.sleep(0.02)
        if rec["backend"]:
            rec["start"] = time.time()
            psql("SELECT pg_terminate_backend(%s)" % rec["backend"])
        rec["end"] = time.time()
    elif k == "pg_restart":
        rec["start"] = time.time()
        subprocess.run(["sh", os.path.join(top, "tools/pgtmp.sh"), "restart", pgdir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rec["end"] = time.time()
    return rec


def run_fault(f, t0):
    delay = t0 + f["at"] - time.time()
    if delay > 0:
        time.sleep(delay)
    rec = apply(f)
    if rec:
        with lock:
            history["faults"].append(rec)


def main():
    global proxy, stop_ns
    if topology == "sentinel":
        sentinel_start()
    else:
        redis_start()
        proxy = Proxy()
    t0 = time.time()
    stop_ns = int((t0 + seconds) * 1e9)
    history["start"] = t0
    start_workers()
    threads = [threading.Thread(target=run_fault, args=(f, t0)) for f in faults]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The workers stop by themselves at the end (CHAOS_STOP_NS), after their statement: one still
    # running well after that is stuck (a wait that never ends), killed and reported.
    deadline = t0 + seconds + 20
    for kind, host, p in groups:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            history["stuck_workers"].append(kind)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    history["end"] = time.time()
    history["faults"].sort(key=lambda r: r["start"])
    if proxy:
        proxy.stop()
    # Where run.sh reads what is left: the primary now.
    with open(os.path.join(run_dir, "redis.port"), "w") as f:
        f.write("%s\n" % (sentinel_master() if topology == "sentinel" else redis_port))
    with open(os.path.join(run_dir, "history.json"), "w") as f:
        json.dump(history, f, indent=1)


try:
    main()
finally:
    for _, _, p in groups:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
