# delay_proxy_adds_its_delay.sh - make bench-rtt's distances are real: bench/delay_proxy.c holds
# every chunk for its one-way delay in each direction (a PING through 2 ms each way cannot answer
# in less than 4 ms; only that lower bound is checked, so a loaded machine cannot fail it), relays
# bytes exactly (a 200 kB ECHO of random bytes, read back whole), and closes a client whose target
# closes or cannot be reached. Judged from outside: a client of its own and Redis' replies.
it_delay_proxy_adds_its_delay() {
    dp_out=$work/delay_proxy.out
    "$top/build/bench/delay-proxy" 0 127.0.0.1 "$rport" 2000 >"$dp_out" 2>"$work/delay_proxy.err" &
    dp_pid=$!
    echo "$dp_pid" >>"$work/pids"
    wait_until 10 "[ -n \"\$(cat \"\$dp_out\" 2>/dev/null)\" ]"
    dp_port=$(cat "$dp_out")
    # A port nobody listens on: the proxy's connect to it is refused.
    dp_dead=$(free_port)
    "$top/build/bench/delay-proxy" 0 127.0.0.1 "$dp_dead" 0 >"$dp_out.dead" 2>"$work/delay_proxy_dead.err" &
    dp_dead_pid=$!
    echo "$dp_dead_pid" >>"$work/pids"
    wait_until 10 "[ -n \"\$(cat \"\$dp_out.dead\" 2>/dev/null)\" ]"
    out=$($py - "$dp_port" "$(cat "$dp_out.dead")" <<'PY' 2>&1
import os, socket, sys, time
port, dead = int(sys.argv[1]), int(sys.argv[2])

def conn(p):
    s = socket.create_connection(("127.0.0.1", p), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def read_exactly(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            break
        b += c
    return b

s = conn(port)
best = None
for _ in range(5):
    t = time.monotonic()
    s.sendall(b"PING\r\n")
    r = read_exactly(s, 7)
    ms = (time.monotonic() - t) * 1000
    best = ms if best is None else min(best, ms)
    assert r == b"+PONG\r\n", r
print("ping_min_ms=%.2f" % best)
data = os.urandom(200000)
s.sendall(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % len(data) + data + b"\r\n")
want = b"$%d\r\n" % len(data) + data + b"\r\n"
got = read_exactly(s, len(want))
print("echo_exact=%d" % (got == want))
s.sendall(b"QUIT\r\n")
r = read_exactly(s, 5)
print("quit_then_closed=%d" % (r == b"+OK\r\n" and s.recv(16) == b""))
d = conn(dead)
try:
    print("refused_target_closed=%d" % (d.recv(16) == b""))
except ConnectionResetError:
    print("refused_target_closed=1")
PY
)
    check "PING through a 2 ms one-way delay-proxy takes >= 4 ms, its reply byte-exact ($(echo "$out" | tr '\n' ' '))" \
        'echo "$out" | awk -F= "/^ping_min_ms=/ { ok = \$2 >= 4.0 } END { exit !ok }"'
    check "a 200 kB ECHO of random bytes comes back byte-exact through it" \
        'echo "$out" | grep -qx "echo_exact=1"'
    check "Redis closing the connection (QUIT) closes the client's, after the reply" \
        'echo "$out" | grep -qx "quit_then_closed=1"'
    check "a target that refuses the connection closes the client's" \
        'echo "$out" | grep -qx "refused_target_closed=1"'
    check "both proxies still alive, no error line but the refused connect" \
        'kill -0 $dp_pid && kill -0 $dp_dead_pid && ! [ -s "$work/delay_proxy.err" ] &&
         grep -qx "delay-proxy: connect to the target: Connection refused" "$work/delay_proxy_dead.err"'
    kill -TERM "$dp_pid" "$dp_dead_pid"
    wait "$dp_pid"
    dp_rc=$?
    check "SIGTERM ends it with status 0 ($dp_rc)" '[ $dp_rc -eq 0 ]'
    wait "$dp_dead_pid"
}
