#!/bin/sh
# pgbench_loop.sh OUT DIR - pgbench -c8 -j4 with a custom script (3 single probes to 1
# transaction of two; one single probe in 40 is 5 s, longer than the lease), in runs of at most
# 5 s until $CHAOS_STOP_NS: pgbench gives up a client on its first error (a refusal, a broken
# connection), so a fresh run brings the 8 back. Appends
# "ok N" / "err N" per run to OUT (transactions done / clients aborted), its output to OUT.err.
out=$1 dir=$2
cat >"$dir/single.sql" <<'SQL'
\set r random(0, 319)
SELECT chaos_probe(CASE WHEN :r >= 312 THEN 5000 ELSE 2 + :r * :r / 300 END);
SQL
cat >"$dir/tx.sql" <<'SQL'
\set r random(0, 299)
BEGIN;
SELECT chaos_probe(2 + :r * :r / 300);
SELECT chaos_probe(2 + :r / 3);
COMMIT;
SQL
while :; do
    left=$(((CHAOS_STOP_NS - $(date +%s%N)) / 1000000000))
    [ "$left" -ge 1 ] || break
    [ "$left" -le 5 ] || left=5
    pgbench -n -c8 -j4 -T "$left" -f "$dir/single.sql@3" -f "$dir/tx.sql@1" >"$out.last" 2>&1
    n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out.last")
    aborted=$(grep -c "aborted in command" "$out.last")
    echo "ok ${n:-0}" >>"$out"
    [ "$aborted" -eq 0 ] || echo "err $aborted" >>"$out"
    grep -v "^\(pgbench\|transaction type\|scaling\|query mode\|number of\|latency\|initial\|tps\|maximum\|duration\|SQL script\| - \)" "$out.last" >>"$out.err"
    [ "$aborted" -eq 0 ] || sleep 0.05
done
rm -f "$out.last"
