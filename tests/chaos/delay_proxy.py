"""delay_proxy.py - a TCP proxy in front of Redis that can be made slow: the chaos run's "Redis
made slow" fault (the kernel here has no netem). Every byte from a client reaches Redis `delay`
seconds after it arrived, in order (a queue per direction with each chunk's due time, so that
latency is added without cutting throughput); replies pass at once. A client connection whose
Redis connection cannot be made, or breaks, is closed, as a dead Redis would close it.

A process of its own (the orchestrator's threads and their GIL must not add latency of their own,
which the library would take for an outage): delay_proxy.py LISTEN_PORT REDIS_PORT prints "ready"
once it listens, then reads the delay in seconds, one number a line, from its standard input; it
ends at EOF.
"""
import asyncio
import sys
import time


class DelayProxy:
    def __init__(self, listen_port, redis_port):
        self.listen_port = listen_port
        self.redis_port = redis_port
        self.delay = 0.0

    async def run(self):
        await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        commands = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
        while True:
            line = await commands.readline()
            if not line:
                return
            self.delay = float(line)

    async def _client(self, creader, cwriter):
        try:
            rreader, rwriter = await asyncio.open_connection("127.0.0.1", self.redis_port)
        except OSError:
            cwriter.close()
            return
        queue = asyncio.Queue()
        reading = asyncio.ensure_future(self._read_delayed(creader, queue))
        # Done when the client's bytes are all delivered (after its EOF) or Redis hangs up.
        ends = [asyncio.ensure_future(self._write_due(queue, rwriter)),
                asyncio.ensure_future(self._pipe(rreader, cwriter))]
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

    async def _write_due(self, queue, writer):
        while True:
            due, data = await queue.get()
            if not data:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                return

    async def _pipe(self, reader, writer):
        while True:
            try:
                data = await reader.read(65536)
                if not data:
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return


if __name__ == "__main__":
    asyncio.run(DelayProxy(int(sys.argv[1]), int(sys.argv[2])).run())
