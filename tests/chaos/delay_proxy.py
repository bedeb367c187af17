"""delay_proxy.py - a TCP proxy in front of Redis that can be made slow, or cut from one simulated
host: the chaos run's "Redis made slow" and "a host partitioned from Redis" faults (the kernel here
has no netem, and the workers reach PostgreSQL on loopback, which a network namespace would cut
too). Every byte from a client reaches Redis `delay` seconds after it arrived, in order (a queue per
direction with each chunk's due time, so that latency is added without cutting throughput);
replies pass at once. A client connection whose Redis connection cannot be made, or breaks, is
closed, as a dead Redis would close it.

Each simulated host has a port of its own. A cut host's bytes stop, both ways, as a partition
drops packets: nothing is closed or refused (a connect completes in the kernel's backlog, as a
SYN would be answered by nobody: the library sees timeouts, not errors), and what was sent meanwhile
is delivered once the cut heals, as TCP's retransmissions would deliver it (a request a client gave
up on may reach Redis late).

A process of its own (the orchestrator's threads and their GIL must not add latency of their own,
which the library would take for an outage): delay_proxy.py REDIS_PORT HOSTS listens on HOSTS
free ports and prints "ready PORT..." (one port per host, in order), then reads commands from its
standard input, one a line: "delay SECONDS" (every host), "cut HOST", "heal HOST" (HOST from 0);
it ends at EOF.
"""
import asyncio
import sys
import time


class DelayProxy:
    def __init__(self, redis_port, hosts):
        self.redis_port = redis_port
        self.hosts = hosts
        self.delay = 0.0
        # Set while the host's link is up: every byte of that host waits for it.
        self.up = [asyncio.Event() for _ in range(hosts)]
        for e in self.up:
            e.set()

    async def run(self):
        ports = []
        for host in range(self.hosts):
            server = await asyncio.start_server(
                lambda r, w, host=host: self._client(host, r, w), "127.0.0.1", 0)
            ports.append(server.sockets[0].getsockname()[1])
        print("ready " + " ".join(map(str, ports)), flush=True)
        loop = asyncio.get_running_loop()
        commands = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
        while True:
            line = await commands.readline()
            if not line:
                return
            word, arg = line.decode().split()
            if word == "delay":
                self.delay = float(arg)
            elif word == "cut":
                self.up[int(arg)].clear()
            elif word == "heal":
                self.up[int(arg)].set()
            else:
                raise SystemExit("delay_proxy: unknown command %r" % line)

    async def _client(self, host, creader, cwriter):
        up = self.up[host]
        await up.wait()  # a cut host's connect reaches nobody until the cut heals
        try:
            rreader, rwriter = await asyncio.open_connection("127.0.0.1", self.redis_port)
        except OSError:
            cwriter.close()
            return
        queue = asyncio.Queue()
        reading = asyncio.ensure_future(self._read_delayed(creader, queue))
        # Done when the client's bytes are all delivered (after its EOF) or Redis hangs up.
        ends = [asyncio.ensure_future(self._write_due(queue, rwriter, up)),
                asyncio.ensure_future(self._pipe(rreader, cwriter, up))]
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        except Exception:
            pass
        for t in ends + [reading]:
            t.cancel()
        for w in (cwriter, rwriter):
            w.close()

    async def _read_delayed(self, reader, queue):
        while True:
            try:
                data = await reader.read(65536)
            except OSError:
                data = b""
            if not data:
                await queue.put((0.0, b""))
                return
            await queue.put((time.monotonic() + self.delay, data))

    async def _write_due(self, queue, writer, up):
        while True:
            due, data = await queue.get()
            if not data:
                await up.wait()  # the client's end too reaches Redis only over a live link
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await up.wait()
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                return

    async def _pipe(self, reader, writer, up):
        while True:
            try:
                data = await reader.read(65536)
                await up.wait()
                if not data:
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return


if __name__ == "__main__":
    asyncio.run(DelayProxy(int(sys.argv[1]), int(sys.argv[2])).run())
