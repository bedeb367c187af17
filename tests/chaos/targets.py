"""targets.py - which local process owns a connection the chaos PostgreSQL names, so that the
nemesis signals only its own workload. `python3 targets.py` tests it against sockets of its own.

A port number alone names no connection: Linux gives the same ephemeral port to connections to
other destinations, and make test's other lanes run their own servers and workers on this host.
Matching only `sport = :PORT` once let the nemesis SIGKILL another lane's fault worker whose
connection to its own PostgreSQL had the same local port (CI: one bad exit in
processes_share_a_host while chaos ran beside it). The connection is named by both of its ends, and
its owner must be in one of the workload's process groups.
"""
import os
import re
import socket
import subprocess
import sys


def _endpoint(addr, port):
    """ss's spelling of an address and port: IPv6 in brackets."""
    return "[%s]:%s" % (addr, port) if ":" in addr else "%s:%s" % (addr, port)


def socket_owners(client_addr, client_port, server_addr, server_port):
    """The (pid, comm, local, peer) of each established TCP socket from client_addr:client_port to
    server_addr:server_port, as ss lists them (a socket shared across a fork: one per process)."""
    flt = "( src %s and dst %s )" % (_endpoint(client_addr, client_port),
                                     _endpoint(server_addr, server_port))
    r = subprocess.run(["ss", "-Htnp", "state", "established", flt], capture_output=True, text=True)
    found = []
    for line in r.stdout.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        for comm, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            found.append((int(pid), comm, fields[2], fields[3]))
    return found


def process_group(pid):
    """PID's process group, or None once it has gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        return int(st[st.rindex(")") + 2:].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def _self_test():
    """A connection of ours, and two decoys with the same local port: one from another local
    address to the same server, one from the same port number on another address to another
    server. Only ours may be named."""
    server, other = (socket.socket() for _ in range(2))
    for s in (server, other):
        s.bind(("127.0.0.1", 0))
        s.listen(8)
    # The decoys first, from a free port of 127.0.0.2; ours then from the same port of 127.0.0.1
    # (bound explicitly: on Linux a port connect() picked is not free for bind elsewhere).
    decoys = [socket.socket(), socket.socket()]
    port = 0
    for d in decoys:  # both from one address and port, to two servers: SO_REUSEADDR
        d.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        d.bind(("127.0.0.2", port))
        port = d.getsockname()[1]
    decoys[0].connect(server.getsockname())
    decoys[1].connect(other.getsockname())
    ours = socket.socket()
    ours.bind(("127.0.0.1", port))
    ours.connect(server.getsockname())
    accepted = [server.accept()[0], server.accept()[0], other.accept()[0]]
    try:
        owners = socket_owners("127.0.0.1", port, "127.0.0.1", server.getsockname()[1])
        want = [(os.getpid(), "127.0.0.1:%d" % port, "127.0.0.1:%d" % server.getsockname()[1])]
        got = [(pid, local, peer) for pid, _, local, peer in owners]
        if got != want:
            print("# targets: the connection 127.0.0.1:%d -> %s is owned by %s, ss said %s"
                  % (port, server.getsockname(), want, got))
            return 1
        if process_group(os.getpid()) != os.getpgrp() or process_group(2 ** 22 + 1) is not None:
            print("# targets: process_group reads /proc wrongly")
            return 1
    finally:
        for s in [ours, server, other] + decoys + accepted:
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(_self_test())
