#!/bin/sh
# psql_loop.sh OUT - one psql process per statement or transaction, until $CHAOS_STOP_NS (epoch
# ns): the shape of a shell script or cron job. About a quarter are BEGIN, two probes, COMMIT. Appends
# "ok", "refused" (the library's refusal) or "err" per try to OUT, psql's stderr to OUT.err. A
# failed try is retried after 50 ms: a stall at the server is then the throttle's, not the loop's.
# With CHAOS_ACQUIRE set, each psql runs under `dbthrottle acquire` instead of the preload (the
# permit is then the command's, taken by the CLI), as application chaos-acquire; the command
# appends the instant it starts (the permit granted) to OUT.starts before it becomes psql, and the
# loop the instant dbthrottle acquire returned (the permit given back) to OUT.ends after a try that
# started its command: the permit is in use from the one to the other, while psql starts and
# connects (over a second beside a busy loop), which the server's log cannot show.
out=$1
# Mostly a few ms to 300 ms; one in 40 is 5 s, longer than the lease and its renewal period: a
# holder killed in the middle of one leaves its statement running at the server past its permit's
# return.
ms() {
    r=$(($(od -An -N2 -tu2 /dev/urandom) % 320))
    if [ $r -ge 312 ]; then echo 5000; else echo $((2 + r * r / 300)); fi
}
while [ "$(date +%s%N)" -lt "$CHAOS_STOP_NS" ]; do
    a=$(ms)
    if [ $((a % 4)) -eq 0 ]; then
        set -- -c BEGIN -c "SELECT chaos_probe($a)" -c "SELECT chaos_probe($(ms))" -c COMMIT
    else
        set -- -c "SELECT chaos_probe($a)"
    fi
    if [ -n "${CHAOS_ACQUIRE:-}" ]; then
        set -- env -u LD_PRELOAD PGAPPNAME=chaos-acquire \
            "$CHAOS_ACQUIRE" acquire "$DBTHROTTLE_POOL" --limit "$DBTHROTTLE_MAX_QUERIES" \
            -- bash -c 'printf "%s\n" "$EPOCHREALTIME" >>"$0" && exec psql "$@"' "$out.starts" \
            -qAtX -v ON_ERROR_STOP=1 "$@"
    else
        set -- psql -qAtX -v ON_ERROR_STOP=1 "$@"
    fi
    starts=$(cat "$out.starts" 2>/dev/null | wc -l)
    "$@" >/dev/null 2>"$out.last"
    rc=$?
    if [ -n "${CHAOS_ACQUIRE:-}" ] && [ "$(cat "$out.starts" 2>/dev/null | wc -l)" -gt "$starts" ]; then
        date +%s.%N >>"$out.ends"
    fi
    if [ $rc -eq 0 ]; then
        echo ok >>"$out"
    else
        # The library's refusal in psql's message, or dbthrottle acquire's EX_TEMPFAIL (75).
        if grep -q "no query permit" "$out.last" || { [ -n "${CHAOS_ACQUIRE:-}" ] && [ $rc -eq 75 ]; }; then
            echo refused >>"$out"
        else
            echo err >>"$out"
        fi
        cat "$out.last" >>"$out.err"
        sleep 0.05
    fi
done
rm -f "$out.last"
