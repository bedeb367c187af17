"""serverlog.py - the statements PostgreSQL ran, read from its log alone: one interval per
chaos_probe (probe.sql), from its "chaos_start n=N xact=T" line to the first of its "chaos_end" line, an
ERROR or FATAL of its backend (a terminated backend logs no end), the backend's disconnection, or
the server's shutdown. Times are the log's own (log_line_prefix '%m [%p] ', UTC).
"""
import calendar
import re
import time

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) UTC \[(\d+)\] (\w+):  (.*)$")


def epoch(date, millis):
    return calendar.timegm(time.strptime(date, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000.0


class Probe:
    __slots__ = ("pid", "start", "end", "n", "admitted", "how", "app")

    def __init__(self, pid, start, n, admitted, app):
        self.pid, self.start, self.n, self.end, self.how, self.app = pid, start, n, None, None, app
        # When its permit was taken: its transaction's start (at most its own).
        self.admitted = min(start, admitted)


def read(path, run_end):
    """The probes logged in PATH; one still open at the end of the log ends at RUN_END (marked
    "open")."""
    probes, running = [], {}
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        t = epoch(m.group(1), m.group(2))
        pid, level, msg = int(m.group(3)), m.group(4), m.group(5)
        if level == "LOG" and msg.startswith("chaos_start n="):
            fields = dict(kv.split("=", 1) for kv in msg.split()[1:])
            p = Probe(pid, t, int(fields["n"]), float(fields.get("xact", t)), fields.get("app", ""))
            running[pid] = p
            probes.append(p)
        elif pid in running and (msg.startswith("chaos_end") or level in ("ERROR", "FATAL")
                                 or msg.startswith("disconnection:")):
            p = running.pop(pid)
            p.end, p.how = t, {"chaos_end": "end", "chaos_end failed": "failed"}.get(msg, level.lower())
        elif msg == "database system is shut down":
            for p in running.values():
                p.end, p.how = t, "shutdown"
            running.clear()
    for p in running.values():
        p.end, p.how = max(run_end, p.start), "open"
    return probes
