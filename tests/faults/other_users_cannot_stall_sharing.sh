# other_users_cannot_stall_sharing.sh - another local user (uid 65534, by setpriv) against host
# sharing (docs/design.md, "Host-level sharing: the segment").
# (a) A waiting process dies and the other user binds the names its wake socket had, read from
#     /proc/net/unix (any user can: abstract names have no owner). The host's permit must still go
#     to the live waiter when its holder ends, not to the dead one's record: judged by when the
#     survivor's probe starts at the server after the holder's psql exits (limit 1, lease 8 s: a
#     permit lost to a dead record comes back only with its lease).
# (b) The other user makes <share dir>/dbthrottle-<uid> first (mode 0777, theirs), and decoys of the
#     fall-back's names: each of 4 processes warns (not info), and they still share, all on one
#     host group (Redis' queue ids: "<G>~<cid>" with one G), within the limit at the server.
echo "# other_users_cannot_stall_sharing: another uid binds a dead peer's socket name; makes the share dir first"
ou_other=65534
ou_as_other() { setpriv --reuid=$ou_other --regid=$ou_other --clear-groups "$@"; }
ou_uid=$(id -u)
mkdir -p "$work/ou.shm" "$work/ou.shm2" "$work/ou.att"
chmod 1777 "$work/ou.shm" "$work/ou.shm2" # as /dev/shm
chmod 777 "$work/ou.att"                   # the other user's notes
ou_env="DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_LEASE=8s DBTHROTTLE_HOST_SHARE=on"

# (a)
mark
# ou_one APP MS: a worker running one probe of MS ms as application APP, in the background;
# its pid (the worker's own: env execs it) in $ou_pid.
ou_one() {
    env LD_PRELOAD="$preload" PGAPPNAME="$1" DBTHROTTLE_POOL=oua DBTHROTTLE_SHARE_DIR="$work/ou.shm" $ou_env \
        ${DBT_WRAP:-} "$worker" -n 1 -s "$2" >"$work/ou.$1.out" 2>&1 &
    ou_pid=$!
    echo "$ou_pid" >>"$work/pids"
}
ou_one ouh 4000
ou_h=$ou_pid
wait_until 15 '[ "$(probes ouh)" -ge 1 ]'
ou_one ouw1 10
ou_w1=$ou_pid
wait_until 15 '[ "$(live_waiters)" -eq 1 ]'
ou_one ouw2 10
ou_w2=$ou_pid
wait_until 15 '[ "$(live_waiters)" -eq 2 ]'
# Every name of a socket the first waiter has bound, as any user reads them.
ou_names=$(awk 'NR > 1 { print $NF }' /proc/net/unix | grep -E "[/.]$ou_w1([/.]|\$)" | tr '\n' ' ')
kill -9 "$ou_w1" 2>/dev/null
wait "$ou_w1" 2>/dev/null
# The other user binds them: an abstract one (@...) as it is; a path after removing what is
# there, if it can (one named through /proc/self/fd/N/ also as the file in the share directory's
# per-user directory). It says what it bound, then stays until killed.
ou_as_other /usr/bin/python3 -c '
import os, socket, sys, time
done = []
names = []
for n in sys.argv[3:]:
    names.append(n)
    if n.startswith("/proc/self/fd/"):
        names.append(sys.argv[2] + "/" + os.path.basename(n))
for n in names:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        if n.startswith("@"):
            s.bind(b"\0" + n[1:].encode())
        else:
            try:
                os.unlink(n)
            except OSError:
                pass
            s.bind(n)
        done.append(n)
    except OSError as e:
        done.append("not " + n + " (" + e.strerror + ")")
with open(sys.argv[1], "w") as f:
    f.write(" ".join(done) + "\n")
time.sleep(60)' "$work/ou.att/bound" "$work/ou.shm/dbthrottle-$ou_uid" $ou_names &
ou_att=$!
echo "$ou_att" >>"$work/pids"
wait_until 10 '[ -s "$work/ou.att/bound" ]'
info "the dead waiter's socket names: ${ou_names:-none}; the other user: $(cat "$work/ou.att/bound" 2>/dev/null)"
# (bounded: a holder that never ends fails the case rather than hangs it)
wait_until 20 '! kill -0 "$ou_h" 2>/dev/null || [ "$(awk "{ print \$3 }" /proc/$ou_h/stat 2>/dev/null)" = Z ]'
wait "$ou_h"
wait_until 20 '[ "$(probes ouw2)" -ge 1 ]'
ou_grant=$waited_ms
check "other_users_cannot_stall_sharing: the survivor ran within 2 s of the holder's exit ($ou_grant ms; lease 8000 ms)" \
    '[ "$ou_grant" -ge 0 ] && [ "$ou_grant" -le 2000 ]'
wait_until 20 '! kill -0 "$ou_w2" 2>/dev/null || [ "$(awk "{ print \$3 }" /proc/$ou_w2/stat 2>/dev/null)" = Z ]'
kill -9 "$ou_w2" 2>/dev/null
wait "$ou_w2" 2>/dev/null
kill "$ou_att" 2>/dev/null
wait "$ou_att" 2>/dev/null
rcli flushall >/dev/null

# (b)
mark
ou_as_other mkdir -m 777 "$work/ou.shm2/dbthrottle-$ou_uid"
ou_as_other mkdir -m 700 "$work/ou.shm2/dbthrottle-$ou_uid.000000000000000000000000" \
    "$work/ou.shm2/dbthrottle-$ou_uid.ffffffffffffffffffffffff"
ou_queue_ids() { rcli --raw --scan --pattern "*{oub}:q:wexp" | while read -r k; do rcli --raw zrange "$k" 0 -1; done; }
i=0
while [ $i -lt 4 ]; do
    env LD_PRELOAD="$preload" PGAPPNAME=oub DBTHROTTLE_POOL=oub DBTHROTTLE_SHARE_DIR="$work/ou.shm2" $ou_env \
        DBTHROTTLE_LEASE=1s DBTHROTTLE_LOG_LEVEL=warn "$worker" -n 15 -s 20 >"$work/oub.out.$i" 2>"$work/oub.err.$i" &
    eval "oub_pid$i=$!"
    eval "echo \$oub_pid$i" >>"$work/pids"
    i=$((i + 1))
done
# The queue's ids while 3 of them wait at a limit of 1.
ou_ids=
wait_until 15 '[ "$(ou_queue_ids | wc -l)" -ge 3 ]' && ou_ids=$(ou_queue_ids | tr '\n' ' ')
bad=0
for i in 0 1 2 3; do eval "wait \$oub_pid$i" || bad=$((bad + 1)); done
ou_warned=0
for i in 0 1 2 3; do grep -q "level=warn.*host_share_dir_taken\|host_share_dir_taken.*warn" "$work/oub.err.$i" && ou_warned=$((ou_warned + 1)); done
ou_groups=$(echo "$ou_ids" | tr ' ' '\n' | sed -n 's/^\([0-9a-f]\{16\}\)~.*/\1/p' | sort -u | wc -l)
ou_plain=$(echo "$ou_ids" | tr ' ' '\n' | grep -v '~' | grep -c .)
info "queued ids: ${ou_ids:-none}; directories now: $(cd "$work/ou.shm2" && ls -dn dbthrottle-* | awk '{ print $1, $3, $NF }' | tr '\n' ';')"
info "a warning line: $(grep -h host_share_dir_taken "$work"/oub.err.* | head -1)"
check "other_users_cannot_stall_sharing: a directory made first by another user: each of the 4 processes warned ($ou_warned)" \
    '[ "$ou_warned" -eq 4 ]'
check "other_users_cannot_stall_sharing: ... and they still share, on one host group ($ou_groups groups, $ou_plain ungrouped ids)" \
    '[ "$ou_groups" -eq 1 ] && [ "$ou_plain" -eq 0 ]'
check "other_users_cannot_stall_sharing: ... all ran ($(sum_field ok "$work"/oub.out.*) of 60, $bad bad exits), at most 1 at once at the server (most seen: $(max_conc oub))" \
    '[ "$bad" -eq 0 ] && [ "$(sum_field ok "$work"/oub.out.*)" -eq 60 ] && [ "$(max_conc oub)" -le 1 ]'
check "other_users_cannot_stall_sharing: ... and the other user's decoys were not used (still empty)" \
    '[ -z "$(find "$work/ou.shm2/dbthrottle-$ou_uid.000000000000000000000000" "$work/ou.shm2/dbthrottle-$ou_uid.ffffffffffffffffffffffff" -mindepth 1 2>/dev/null)" ]'
nothing_left
