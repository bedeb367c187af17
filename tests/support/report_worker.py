"""report_worker.py SEED N OUT [SCALE] - one worker of tests/integration/shadow_report_predicts.sh
and bench/report/run.sh: N statements on one psycopg2 connection, each a pg_sleep of 5-25 ms
followed by a pause of 10-50 ms (both times SCALE, default 1), drawn from SEED, so that two runs
of one seed ask the same statements with the same pauses. Writes per statement its latency as
this client saw it and the sleep it asked for (seconds), one line each: the wait a limit added
is what the latency has beyond the sleep and the run's least overhead."""
import random
import sys
import time

import psycopg2

seed, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
scale = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
rnd = random.Random(seed)
conn = psycopg2.connect("")
conn.autocommit = True
cur = conn.cursor()
lines = []
for _ in range(n):
    sleep = rnd.uniform(0.005, 0.025) * scale
    pause = rnd.uniform(0.010, 0.050) * scale
    t0 = time.monotonic()
    cur.execute("select pg_sleep(%s)", (sleep,))
    lines.append("%.6f %.6f" % (time.monotonic() - t0, sleep))
    time.sleep(pause)
conn.close()
with open(out, "w") as f:
    f.write("\n".join(lines) + "\n")
