"""delay_proxy.py - a TCP proxy in front of Redis that can be made slow: the chaos run's "Redis
made slow" fault (the kernel here has no netem). Every byte from a client reaches Redis `delay`
seconds after it arrived, in order (a queue per direction with each chunk's due time, so that
latency is added without cutting throughput); replies pass at once. A client connection whose
Redis connection cannot be made, or breaks, is closed, as a dead Redis would close it.

Runs in a thread of the orchestrator: start(), set_delay(seconds), stop().
"""
import asyncio
import threading
import time


class DelayProxy:
    def __init__(self, listen_port, redis_port):
        self.listen_port = listen_port
        self.redis_port = redis_port
        self.delay = 0.0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()
        self.error = None

    def start(self):
        self.thread.start()
        self.ready.wait(10)
        if self.error:
            raise self.error

    def set_delay(self, seconds):
        self.delay = seconds

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        try:
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", self.listen_port))
        except OSError as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

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
