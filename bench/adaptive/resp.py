"""resp.py - a minimal Redis client for the adaptive bench: one connection, one command at a
time, replies as Python values (bulk strings as bytes, so that DUMP's binary survives). The bench
reads Redis from outside the controller and the library with it."""
import socket


class RedisError(Exception):
    pass


class Redis:
    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __call__(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RedisError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RedisError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exactly(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RedisError("unexpected reply %r" % line)

    def now_ms(self):
        """Redis' own clock, in ms."""
        s, us = self("TIME")
        return int(s) * 1000 + int(us) // 1000

    def snapshot(self):
        """Every key of the database: name -> (DUMP, has a TTL)."""
        keys, cur = [], b"0"
        while True:
            cur, batch = self("SCAN", cur, "COUNT", 1000)
            keys.extend(batch)
            if cur in (b"0", 0):
                break
        return {k: (self("DUMP", k), self("PTTL", k) != -1) for k in keys}
